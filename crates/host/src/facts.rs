//! Provenance facts about the live machine for run reports: kernel release, CPU model, online
//! CPU count.

/// `uname -r`.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain data; uname fills it with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is valid and writable.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates release.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    release.to_string_lossy().into_owned()
}

/// The first `model name` of /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|v| v.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// CPUs online on the host (not the ones this process may use: under taskset they differ).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf takes no pointers.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0)
}
