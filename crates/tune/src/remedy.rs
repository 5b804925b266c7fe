//! The values tune sets, in one table for every consumer: `tune plan` writes them, the doctor
//! names them in its remedies, the climb makes them one step at a time. A value changed here
//! changes everywhere (they had drifted: the climb raised `netdev_max_backlog` to 16384 where
//! the plan sets 65536).

/// The sysctls raised to a floor (never lowered): name and value.
pub const SYSCTLS: &[(&str, u64)] = &[
    ("net.core.somaxconn", 65535),
    ("net.ipv4.tcp_max_syn_backlog", 65535),
    ("net.core.netdev_max_backlog", 65536),
    ("net.core.netdev_budget", 600),
    ("fs.nr_open", NR_OPEN),
    ("fs.file-max", 2 * NR_OPEN),
    // Sockets closed in the last minute at 17,000 connections a second; about 200 bytes each.
    ("net.ipv4.tcp_max_tw_buckets", 1_048_576),
    // Connections tracked at once; about 300 bytes each.
    ("net.netfilter.nf_conntrack_max", 1_048_576),
];

/// The per-process descriptor ceiling: a server with a million connections needs a million.
pub const NR_OPEN: u64 = 1_048_576;

/// The source port range a load generator gets (widened to it, never narrowed).
pub const PORT_RANGE: (u32, u32) = (1024, 65535);

/// The value tune sets `name` to, as written to /proc/sys: None when tune does not set it.
pub fn sysctl(name: &str) -> Option<String> {
    match name {
        "net.ipv4.ip_local_port_range" => Some(format!("{} {}", PORT_RANGE.0, PORT_RANGE.1)),
        "net.ipv4.tcp_tw_reuse" => Some("1".into()),
        _ => SYSCTLS.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()),
    }
}

/// nginx's `worker_connections` for a run that needs `wanted` connections a worker where
/// `limit` is set: twice the larger, up to a power of two, at least 1024; and its
/// `worker_rlimit_nofile`, twice that (a descriptor per connection, two for a proxied request).
pub fn nginx_worker_connections(wanted: u64, limit: u64) -> (u64, u64) {
    let to = (wanted.max(limit) * 2).next_power_of_two().max(1024);
    (to, to * 2)
}

/// A soft RLIMIT_NOFILE for a server that ran out of descriptors under `limit` and wants
/// `wanted` of them (nginx: two a worker connection): room for them and four times the limit
/// hit, up to a power of two, at least 8192, at most [`NR_OPEN`].
pub fn rlimit_nofile(limit: u64, wanted: u64) -> u64 {
    wanted.max(limit * 4).next_power_of_two().clamp(8192, NR_OPEN)
}

/// A floor of [`SYSCTLS`], for the planner (0 for a name not in the table, caught by a test).
pub fn floor(name: &str) -> u64 {
    SYSCTLS.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_named_once() {
        let mut names: Vec<&str> = SYSCTLS.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SYSCTLS.len());
        assert_eq!(sysctl("net.core.netdev_max_backlog").as_deref(), Some("65536"));
        assert_eq!(sysctl("net.ipv4.ip_local_port_range").as_deref(), Some("1024 65535"));
        assert_eq!(sysctl("vm.swappiness"), None);
        assert_eq!(rlimit_nofile(40, 768 * 2), 8192);
        assert_eq!(rlimit_nofile(4096, 16384 * 2), 32768);
    }
}
