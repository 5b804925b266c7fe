//! The calling thread: the CPU time it used, and its timer slack.

use std::time::Duration;

/// CPU time a thread used.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuTime {
    pub user: Duration,
    pub sys: Duration,
}

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`: finer than
/// [`CpuTime`]'s microseconds, for timing short pieces of work); 0 when unknown.
pub fn thread_cpu_ns() -> u64 {
    // SAFETY: timespec is plain data; clock_gettime fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

impl CpuTime {
    /// The calling thread's CPU time so far (`getrusage(RUSAGE_THREAD)`); zero when unknown.
    pub fn of_current_thread() -> Self {
        Self::usage(libc::RUSAGE_THREAD)
    }

    /// This process's CPU time so far, all its threads, not its children (`RUSAGE_SELF`).
    pub fn of_current_process() -> Self {
        Self::usage(libc::RUSAGE_SELF)
    }

    fn usage(who: libc::c_int) -> Self {
        // SAFETY: rusage is plain data; getrusage fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return Self::default();
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        Self { user: tv(ru.ru_utime), sys: tv(ru.ru_stime) }
    }

    pub fn since(self, earlier: Self) -> Self {
        Self {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
        }
    }

    pub fn total(self) -> Duration {
        self.user + self.sys
    }
}

impl std::ops::Add for CpuTime {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self { user: self.user + other.user, sys: self.sys + other.sys }
    }
}

/// Sets the calling thread's timer slack: how late the kernel may end its timed waits (50 us by
/// default). A schedule that wants its wake-ups on time sets it to 1 ns.
pub fn set_timer_slack(nanos: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos as libc::c_ulong) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = CpuTime::of_current_thread();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(CpuTime::of_current_thread().since(before).total() >= Duration::from_millis(10));
        set_timer_slack(1);
    }
}
