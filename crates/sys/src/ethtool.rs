//! A NIC driver's own statistics (`ethtool -S`), through the SIOCETHTOOL ioctl: the counters
//! that no /proc or /sys file holds, among them the limits a cloud NIC enforces (ENA's
//! `bw_out_allowance_exceeded`, `pps_allowance_exceeded`, `conntrack_allowance_exceeded`) and
//! drivers' own drop and miss counters. The text `ethtool -S` prints is parsed too
//! ([`parse_text`]), so a host captured with `scripts/capture-host` is read the same way.

use std::io;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// More counters than any driver has; a bound on what one call allocates.
const MAX_STATS: usize = 16 * 1024;

/// The driver's statistics of interface `name`, by counter name; an interface whose driver
/// has none gives an empty list.
pub fn stats(name: &str) -> io::Result<Vec<(String, u64)>> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // struct ethtool_sset_info: cmd u32, reserved u32, sset_mask u64, then one u32 per set.
    let mut head = [0u8; 24];
    head[0..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    head[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
    ioctl(raw, name, head.as_mut_ptr())?;
    let mask = u64::from_ne_bytes(head[8..16].try_into().unwrap_or([0; 8]));
    if mask & (1 << ETH_SS_STATS) == 0 {
        return Ok(Vec::new());
    }
    let n = (u32::from_ne_bytes(head[16..20].try_into().unwrap_or([0; 4])) as usize).min(MAX_STATS);
    if n == 0 {
        return Ok(Vec::new());
    }
    // struct ethtool_gstrings: cmd, string_set, len, then len x 32 bytes.
    let mut strings = vec![0u8; 12 + n * ETH_GSTRING_LEN];
    strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
    strings[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
    ioctl(raw, name, strings.as_mut_ptr())?;
    // struct ethtool_stats: cmd, n_stats, then n_stats x u64 (8-aligned: a u64 buffer).
    let mut values = vec![0u64; 1 + n];
    let mut cmd = [0u8; 8];
    cmd[0..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
    cmd[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
    values[0] = u64::from_ne_bytes(cmd);
    ioctl(raw, name, values.as_mut_ptr().cast())?;
    Ok((0..n)
        .map(|i| {
            let s = &strings[12 + i * ETH_GSTRING_LEN..12 + (i + 1) * ETH_GSTRING_LEN];
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            (String::from_utf8_lossy(&s[..end]).trim().to_string(), values[1 + i])
        })
        .collect())
}

/// SIOCETHTOOL on interface `name` with `data` as the command buffer.
fn ioctl(fd: libc::c_int, name: &str, data: *mut u8) -> io::Result<()> {
    // SAFETY: a zeroed ifreq is valid; the name fits (checked by the caller, NUL kept).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = data.cast();
    // SAFETY: ifr points at a command buffer the caller sized for the command it holds.
    if unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut ifr) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The counters of `ethtool -S IFACE`'s text (`NIC statistics:` then `     name: value`).
pub fn parse_text(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(':')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ethtool -S eth0` on an AWS instance with ENA (driver 2.x), the allowance counters
    /// among the queue ones.
    #[test]
    fn ena_text_reads() {
        let text = "NIC statistics:\n     tx_timeout: 0\n     bw_in_allowance_exceeded: 0\n     bw_out_allowance_exceeded: 1402\n     pps_allowance_exceeded: 88\n     queue_0_tx_cnt: 123456\n";
        let v = parse_text(text);
        assert_eq!(v.len(), 5);
        assert!(v.contains(&("bw_out_allowance_exceeded".to_string(), 1402)));
    }

    /// lo has no driver statistics: an error or an empty list, never a panic.
    #[test]
    fn loopback_has_none() {
        if let Ok(v) = stats("lo") {
            assert!(v.is_empty(), "{v:?}");
        }
        assert!(stats("a-name-far-too-long-for-ifnamsiz").is_err());
    }
}
