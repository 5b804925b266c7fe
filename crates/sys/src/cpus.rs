//! CPU lists (`0-3,8,10-11`, the kernel's cpulist format) and pinning the calling thread.

/// Parses a cpulist such as `0-3,8`.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let num = |s: &str| {
            s.trim().parse::<usize>().map_err(|_| format!("{item:?} is not a CPU number or range"))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range {item:?} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(item)?),
        }
    }
    Ok(out)
}

/// Parses `list` (the value of `flag`) and checks that this process may use every CPU in it.
pub fn usable_list(
    list: &str,
    flag: &'static str,
) -> Result<Vec<usize>, crate::config_error::ConfigError> {
    use crate::config_error::ConfigError;
    let cpus = parse_cpu_list(list).map_err(|e| ConfigError::new(flag, e))?;
    if cpus.is_empty() {
        return Err(ConfigError::new(flag, "empty CPU list; write e.g. 0-3,8"));
    }
    let allowed = allowed_cpus();
    if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(ConfigError::new(
            flag,
            format!("CPU {bad} is not available to this process (allowed: {allowed:?})"),
        ));
    }
    Ok(cpus)
}

/// CPUs the calling thread may run on (its affinity mask; the process's unless it was
/// changed for this thread).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: as above; CPU_SET writes within the set for cpu < CPU_SETSIZE, checked first.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8, 10-11").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(!allowed_cpus().is_empty());
    }
}
