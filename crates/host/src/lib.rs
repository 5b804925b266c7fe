//! qpslab's view of the host: pure parsers of /proc and /sys text ([`parse`], [`cpuset`]), the
//! host model read from an injectable root ([`host`], [`nic`]), counter samples ([`sample`]) and
//! the doctor's rules ([`doctor`]), with text rendering ([`render`]), and the tune planner with
//! its journaled apply/revert ([`tune`]), the only module that writes to the host.

pub mod cpuset;
pub mod doctor;
pub mod exam;
pub mod facts;
pub mod host;
pub mod links;
pub mod nginx;
pub mod nic;
pub mod parse;
pub mod procs;
pub mod render;
pub mod route;
pub mod sample;
pub mod tune;
pub mod upstream;

pub use cpuset::CpuSet;
pub use exam::{Diagnosis, Examination};
pub use host::Host;
pub use qpslab_sys::root::{ReadError, Root};
