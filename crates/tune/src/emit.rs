//! Server configuration matching a plan: the nginx snippet of `tune plan --emit nginx`, and the
//! `worker_cpu_affinity` masks that `bench --target nginx` also uses.

use qpslab_host::cpuset::CpuSet;

/// nginx `worker_cpu_affinity` masks: one binary mask per worker, worker i on the i-th CPU.
pub fn nginx_affinity(cpus: &[usize]) -> String {
    let width = cpus.iter().max().map_or(1, |m| m + 1);
    cpus.iter()
        .map(|&c| (0..width).rev().map(|b| if b == c { '1' } else { '0' }).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

/// An nginx configuration for the plan's worker CPUs: one pinned worker per CPU, descriptors up
/// to `nofile`, a reuseport listener with the planned backlog, no access log (seed 001: the log
/// filled the disk at 47k hits/s), keep-alive connections that are not closed every 1000
/// requests (nginx's default since 1.19.10).
pub fn nginx_snippet(workers: &CpuSet, nofile: u64, backlog: u64) -> String {
    let cpus: Vec<usize> = workers.iter().collect();
    let conns = (nofile / 2).clamp(1024, 65536);
    format!(
        "# nginx for this host, from `qpslab tune plan --emit nginx`\n\
         worker_processes {n};\n\
         worker_cpu_affinity {affinity};\n\
         worker_rlimit_nofile {nofile};\n\
         events {{\n    worker_connections {conns};\n}}\n\
         http {{\n    access_log off;\n    keepalive_requests 1000000;\n\
         \x20   server {{\n        listen 80 reuseport backlog={backlog};\n\
         \x20       location / {{ return 200; }}\n    }}\n}}\n",
        n = cpus.len(),
        affinity = nginx_affinity(&cpus),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_masks_are_one_per_worker_with_cpu_0_rightmost() {
        assert_eq!(nginx_affinity(&[0]), "1");
        assert_eq!(nginx_affinity(&[0, 2]), "001 100");
        assert_eq!(nginx_affinity(&[1]), "10");
        let s = nginx_snippet(&[4, 5].into_iter().collect(), 1_048_576, 65535);
        assert!(s.contains("worker_processes 2;\nworker_cpu_affinity 010000 100000;\n"), "{s}");
        assert!(s.contains("listen 80 reuseport backlog=65535;"), "{s}");
        assert!(s.contains("worker_connections 65536;"), "{s}");
    }
}
