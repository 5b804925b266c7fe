//! RLIMIT_NOFILE: how many descriptors the process may open, and raising it.

/// The soft and hard RLIMIT_NOFILE.
pub fn limits() -> (u64, u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (0, 0);
    }
    (lim.rlim_cur, lim.rlim_max)
}

/// Raises the soft limit to at least `needed` (and the hard one, which needs CAP_SYS_RESOURCE).
/// `Err((soft, hard))` when it cannot.
pub fn raise_to(needed: u64) -> Result<(), (u64, u64)> {
    let (soft, hard) = limits();
    if soft >= needed {
        return Ok(());
    }
    let raised = libc::rlimit { rlim_cur: needed, rlim_max: hard.max(needed) };
    // SAFETY: `raised` is a valid rlimit; an unprivileged raise of the hard limit fails cleanly.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return Ok(());
    }
    Err((soft, hard))
}

/// Raises the soft limit as far as the hard limit allows, up to `wanted`; returns the soft
/// limit in force afterwards.
pub fn raise_towards(wanted: u64) -> u64 {
    if raise_to(wanted).is_ok() {
        return wanted.max(limits().0);
    }
    let (_, hard) = limits();
    let _ = raise_to(hard.min(wanted));
    limits().0
}
