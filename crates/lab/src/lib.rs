//! qpslab's experiment orchestration: the jobs that combine the load engine, a target and the
//! doctor. [`bench`] is the main job: start a target on loopback (the built-in server or nginx)
//! on half of the CPUs, or take a URL and find the server behind it, warm up, run the load on
//! CPUs the server does not use while the doctor samples, and return one report. [`doctor`] runs
//! the doctor alone, for a duration or while a command (the load) runs. [`sweep`] runs a matrix
//! of bench variants, interleaved and repeated, with host settings applied and reverted around
//! each run; [`climb`] walks from a bench's state, one measured change at a time, keeping what
//! is faster beyond noise; both make each run through [`trial`]; [`record`] says what of a run
//! the runs store (`qpslab_runs`) keeps.

pub mod bench;
pub mod ci;
pub mod climb;
pub mod doctor;
pub mod drain;
pub mod fail_on;
pub mod hostset;
pub mod kinds;
mod place;
pub mod record;
pub mod remote;
pub mod settings;
pub mod split;
pub mod sweep;
pub mod target;
mod text;
pub mod trial;

pub use bench::{bench, BenchError, BenchOptions, BenchReport, TargetKind, TargetReport};
pub use text::render_text;
