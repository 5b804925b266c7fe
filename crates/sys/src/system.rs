//! Facts about the running kernel that have no file in /proc or /sys: its release, the CPUs
//! online and the clock tick of /proc's CPU times.

/// `uname -r`.
pub fn kernel_release() -> String {
    uname(|u| &u.release)
}

/// `uname -n`: the host's name (its UTS namespace's).
pub fn hostname() -> String {
    uname(|u| &u.nodename)
}

fn uname(field: fn(&libc::utsname) -> &[libc::c_char]) -> String {
    // SAFETY: utsname is plain data; uname fills it with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is valid and writable.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates every field.
    let text = unsafe { std::ffi::CStr::from_ptr(field(&u).as_ptr()) };
    text.to_string_lossy().into_owned()
}

/// CPUs online on the machine (not the ones this process may use: under taskset they differ).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf takes a constant and reads no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Clock ticks per second (USER_HZ), the unit of CPU times in /proc/stat and /proc/PID/stat.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes a constant and reads no memory of ours.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_of_this_machine() {
        assert!(kernel_release().chars().next().is_some_and(|c| c.is_ascii_digit()));
        assert!(online_cpus() >= std::thread::available_parallelism().map_or(1, |n| n.get()));
        assert_eq!(clock_ticks(), 100.0, "USER_HZ is 100 on Linux");
    }
}
