//! qpslab's profiler: what `perf top` showed the write-ups, as evidence for the doctor.
//!
//! [`sampler`] opens a `perf_event_open` event on every online CPU (the software `cpu-clock`,
//! which works without a PMU), with kernel and user call chains, and reads the ring buffers
//! while a run lasts, counting lost samples. [`symbols`] names the frames after the run
//! (kallsyms under a root; user frames from the files behind their mappings, see [`maps`]).
//! [`category`] says what each sample was doing (receive softirq, TCP receive or transmit,
//! system calls, epoll, socket wake-ups under a spinlock, the scheduler, idle, clock reads,
//! copies, user space); [`report`] adds it up per CPU and per process.
//!
//! It does not decide what a profile means: the doctor's rules (in the host crate) read a
//! [`Profile`] as evidence.

pub mod category;
pub mod maps;
pub mod report;
pub mod sampler;
pub mod symbols;

pub use category::Category;
pub use report::{CpuProfile, ProcessProfile, Profile, Share};
pub use sampler::{ProfileError, ProfileOptions, RawProfile, Sampler};
pub use symbols::Symbols;
