//! Every doctor rule on synthetic counter sequences: a fixture tree is written, sampled, its
//! counters are moved the way the seeds' symptoms move them, and sampled again.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use qpslab_doctor::{diagnose, summarize, Cause, Context, Finding, Generator, LoadFacts, Severity};
use qpslab_host::sample::{Role, Sample, Watch};
use qpslab_host::{Host, Root};
use qpslab_testkit::{write_process, Counters, Shape};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A synthetic machine whose counters advance one second per step.
struct Run {
    dir: tempfile::TempDir,
    shape: Shape,
    counters: Counters,
    samples: Vec<Sample>,
    watch: Vec<Watch>,
}

impl Run {
    fn new(shape: Shape) -> Run {
        let dir = tempfile::tempdir().unwrap();
        shape.write(dir.path()).unwrap();
        let counters = Counters::idle(&shape);
        let mut run = Run { dir, shape, counters, samples: Vec::new(), watch: Vec::new() };
        run.sample();
        run
    }

    fn root(&self) -> Root {
        Root::new(self.dir.path())
    }

    fn host(&self) -> Host {
        Host::read(&self.root()).unwrap()
    }

    fn sample(&mut self) {
        let host = self.host();
        let irqs: BTreeSet<u32> = host.nics.iter().flat_map(|n| n.irq_numbers()).collect();
        let at = Duration::from_secs(self.samples.len() as u64);
        let mut sample = Sample::read(&self.root(), &irqs, &self.watch, at).unwrap();
        sample.take_census(&self.root());
        sample.take_port_census(&self.root(), 100.0);
        let full = self.samples.iter().chain([&sample]).flat_map(|s| &s.listen_full);
        let inodes: BTreeSet<u64> = full.map(|l| l.inode).collect();
        sample.take_listen_full_holders(&self.root(), &inodes, &self.watch);
        self.samples.push(sample);
    }

    /// Moves the counters with `f`, writes them, and samples (one second later).
    fn step(&mut self, f: impl FnOnce(&mut Counters, &std::path::Path)) {
        f(&mut self.counters, self.dir.path());
        self.counters.write(&self.shape, self.dir.path()).unwrap();
        self.sample();
    }

    /// Writes the counters as they are and starts the window there (files the shape does not
    /// write, such as PSI memory or conntrack's, are in its first sample).
    fn restart(&mut self) {
        self.counters.write(&self.shape, self.dir.path()).unwrap();
        self.samples.clear();
        self.sample();
    }

    fn diagnose(&self, ctx: &Context) -> (Vec<Finding>, qpslab_doctor::Explanation) {
        let roles: BTreeMap<u32, Role> = self.watch.iter().map(|w| (w.pid, w.role)).collect();
        let summary = summarize(&self.samples, &roles, 100.0);
        let (findings, explanation) = diagnose(&self.host(), &self.samples, &summary, ctx);
        for f in &findings {
            assert!(qpslab_doctor::rule(f.name).is_some(), "{} is not in RULES", f.name);
        }
        (findings, explanation)
    }

    fn findings_with(&self, ctx: &Context) -> Vec<Finding> {
        self.diagnose(ctx).0
    }

    fn findings(&self) -> Vec<Finding> {
        self.findings_with(&Context::default())
    }
}

fn named<'a>(f: &'a [Finding], name: &str) -> Option<&'a Finding> {
    f.iter().find(|x| x.name == name)
}

fn four_cpus() -> Shape {
    Shape { packages: 1, cores_per_package: 4, threads_per_core: 1, ..Shape::small_virtio() }
}

/// Seed 002: one CPU's softirq at 95% while the others idle.
#[test]
fn softirq_concentrated_on_one_cpu() {
    let mut run = Run::new(four_cpus());
    run.step(|c, _| {
        c.advance_cpus(100, |cpu| if cpu == 1 { (0, 5, 95, 0) } else { (20, 10, 0, 70) });
        c.net_rx[1] += 200_000;
        c.net_rx[0] += 1_000;
    });
    let f = run.findings();
    let hot = named(&f, "softirq-concentrated").expect("finding");
    assert_eq!(hot.severity, Severity::Critical);
    assert!(hot.summary.contains("CPU 1") && hot.summary.contains("95%"), "{}", hot.summary);
    assert!(hot.evidence.iter().any(|e| e.contains("200000/s")), "{:?}", hot.evidence);
    assert!(hot.evidence.iter().any(|e| e.contains("CPUs 0,2-3 idle 70%")), "{:?}", hot.evidence);
}

#[test]
fn softirq_busy_everywhere_or_below_the_threshold_is_not_concentration() {
    let mut run = Run::new(four_cpus());
    run.step(|c, _| c.advance_cpus(100, |_| (0, 10, 90, 0)));
    assert!(named(&run.findings(), "softirq-concentrated").is_none(), "no CPU has headroom");
    let mut run = Run::new(four_cpus());
    run.step(|c, _| {
        c.advance_cpus(100, |cpu| if cpu == 1 { (0, 30, 70, 0) } else { (0, 0, 0, 100) })
    });
    assert!(named(&run.findings(), "softirq-concentrated").is_none(), "70% is under the threshold");
}

/// Seeds 000/001: a NIC with one queue and RPS off.
#[test]
fn single_rx_queue_without_rps() {
    let mut run = Run::new(Shape::small_virtio());
    run.step(|c, _| {
        c.dev.insert("eth0".into(), (50_000_000, 40_000, 30_000_000, 35_000));
    });
    let f = run.findings();
    let q = named(&f, "single-rx-queue").expect("finding");
    // A smell while the CPU taking its interrupts has room: info.
    assert_eq!(q.severity, Severity::Info);
    assert!(q.evidence.iter().any(|e| e.contains("75000 packets/s")), "{:?}", q.evidence);
    // That CPU saturated: a warning, with its figure.
    let mut hot = Run::new(Shape::small_virtio());
    hot.step(|c, _| {
        c.advance_cpus(100, |cpu| if cpu == 0 { (10, 20, 65, 5) } else { (10, 10, 0, 80) });
        c.dev.insert("eth0".into(), (50_000_000, 40_000, 30_000_000, 35_000));
    });
    let f = hot.findings();
    let q = named(&f, "single-rx-queue").expect("finding");
    assert_eq!(q.severity, Severity::Warning);
    assert!(
        q.evidence.iter().any(|e| e.contains("CPU 0 that takes its interrupts was 95% busy")),
        "{:?}",
        q.evidence
    );

    // An idle NIC has no receive work to spread: nothing to say about it.
    let mut idle = Run::new(Shape::small_virtio());
    idle.step(|_, _| {});
    assert!(named(&idle.findings(), "single-rx-queue").is_none());

    // RPS on: nothing to say.
    std::fs::write(run.dir.path().join("sys/class/net/eth0/queues/rx-0/rps_cpus"), "2\n").unwrap();
    assert!(named(&run.findings(), "single-rx-queue").is_none());
}

/// Seeds 000/001: every queue's IRQ on CPU 0.
#[test]
fn all_queue_irqs_on_one_cpu() {
    let mut run = Run::new(Shape::two_nodes_two_nics());
    run.step(|c, _| {
        c.irq_counts.get_mut(&100).unwrap()[0] += 5000;
        c.irq_counts.get_mut(&101).unwrap()[0] += 5000;
        c.dev.insert("eth0".into(), (1, 20_000, 1, 20_000));
        // CPU 0, where they land, saturated: the layout is the bound's evidence.
        c.advance_cpus(100, |cpu| if cpu == 0 { (10, 20, 65, 5) } else { (5, 5, 0, 90) });
    });
    let f = run.findings();
    let eth0 = f
        .iter()
        .find(|x| x.name == "irqs-on-one-cpu" && x.summary.contains("eth0"))
        .expect("eth0 finding");
    assert!(eth0.summary.contains("go to CPU 0"), "{}", eth0.summary);
    assert_eq!(eth0.severity, Severity::Warning);

    // Spread by hand: queue 1 now interrupts CPU 2.
    let mut run = Run::new(Shape::two_nodes_two_nics());
    run.step(|c, _| {
        c.irq_counts.get_mut(&100).unwrap()[0] += 5000;
        c.irq_counts.get_mut(&101).unwrap()[2] += 5000;
    });
    assert!(!run
        .findings()
        .iter()
        .any(|x| x.name == "irqs-on-one-cpu" && x.summary.contains("eth0")));
}

#[test]
fn irqbalance_moving_hand_pinned_irqs() {
    let mut run = Run::new(Shape::two_nodes_two_nics());
    std::fs::create_dir_all(run.dir.path().join("proc/4242")).unwrap();
    std::fs::write(run.dir.path().join("proc/4242/comm"), "irqbalance\n").unwrap();
    run.step(|_, _| {});
    assert!(named(&run.findings(), "irqbalance-vs-pinning").is_none(), "running alone is fine");
    let journal = Context { journal_active: true, ..Context::default() };
    assert!(named(&run.findings_with(&journal), "irqbalance-vs-pinning").is_some());

    run.step(|_, dir| std::fs::write(dir.join("proc/irq/100/smp_affinity"), "00000004\n").unwrap());
    let f = run.findings();
    let ib = named(&f, "irqbalance-vs-pinning").expect("finding");
    assert!(
        ib.evidence.iter().any(|e| e.contains("IRQ 100 moved from CPUs 0-31 to 2")),
        "{:?}",
        ib.evidence
    );
    assert!(ib.evidence.iter().any(|e| e.contains("pid 4242")));
}

/// A listener on port 8080 with 129 connections in its accept queue of 128: full.
const FULL_LISTENER: &str = "   0: 0100007F:1F90 00000000:0000 0A 00000080:00000081 00:00000000 00000000     0        0 777 1 0000000000000000\n";

/// Overflows in the window with `listener` rows in the socket table and `server` (a PID
/// holding inode 777 when `holds`) followed as the server.
fn overflow_run(listener: &str, server: Option<(u32, bool)>) -> Run {
    let mut run = Run::new(Shape::small_virtio());
    if let Some((pid, holds)) = server {
        qpslab_testkit::write_process(run.dir.path(), pid, "nginx", &[(pid, 100)], 0, 1024)
            .unwrap();
        if holds {
            let fd = run.dir.path().join(format!("proc/{pid}/fd/3"));
            std::os::unix::fs::symlink("socket:[777]", fd).unwrap();
        }
        run.watch.push(Watch { pid, role: Role::Server });
    }
    run.step(|c, dir| {
        *c.tcpext.get_mut("ListenOverflows").unwrap() += 120;
        *c.tcpext.get_mut("ListenDrops").unwrap() += 120;
        *c.tcpext.get_mut("TCPReqQFullDoCookies").unwrap() += 30;
        std::fs::write(dir.join("proc/net/tcp"), format!("{TCP_HEADER}{listener}")).unwrap();
    });
    run
}

/// Listen overflows are counted host-wide: they are the run's when the server's listener was
/// seen at its backlog (or, with no server followed, any listener was), and the load opened
/// connections in its window. Else they are the host's, as info: a run of 100 kept-alive
/// connections with no reconnect was told `[critical] accept-queue-overflow` for another
/// program's overflows, and to raise somaxconn while quoting it at 4096.
#[test]
fn listen_overflows_are_the_runs_only_where_its_listener_was_full() {
    let reconnecting = LoadFacts { reconnects: 50, ..closed_loop(100, 0.001, 4.0) };
    let with = |l: &LoadFacts| Context { load: Some(l.clone()), ..Context::default() };
    // The server's own listener full, connections opened: the run's.
    let run = overflow_run(FULL_LISTENER, Some((4300, true)));
    let f = run.findings_with(&with(&reconnecting));
    let aq = named(&f, "accept-queue-overflow").expect("the run's");
    assert!(
        aq.evidence[1]
            .contains("listener 127.0.0.1:8080 (nginx 4300): accept queue at its backlog of 128"),
        "{:?}",
        aq.evidence
    );
    // Its backlog (128) is under somaxconn (4096): the backlog is what to raise.
    assert!(
        aq.remedy.starts_with("raise the server's listen backlog")
            && aq.remedy.contains("it is 128 while net.core.somaxconn allows 4096"),
        "{}",
        aq.remedy
    );
    assert!(named(&f, "host-listen-overflows").is_none());
    // Kept-alive connections, no reconnect: no attempt of the run's to drop.
    let f = run.findings_with(&with(&closed_loop(100, 0.001, 4.0)));
    let host = named(&f, "host-listen-overflows").expect("the host's");
    assert_eq!(host.severity, Severity::Info);
    assert!(
        host.evidence.iter().any(|e| e.contains("opened no connection in its window")),
        "{:?}",
        host.evidence
    );
    assert!(named(&f, "accept-queue-overflow").is_none(), "{f:?}");
    // Another program's listener full, the server's not: the host's.
    let run = overflow_run(FULL_LISTENER, Some((4300, false)));
    let f = run.findings_with(&with(&reconnecting));
    assert!(named(&f, "accept-queue-overflow").is_none(), "{f:?}");
    let host = named(&f, "host-listen-overflows").expect("the host's");
    assert!(host.evidence.iter().any(|e| e.contains("(holder unknown)")), "{:?}", host.evidence);
    // No listener full in any sample: the host's.
    let f = overflow_run("", Some((4300, true))).findings_with(&with(&reconnecting));
    assert!(named(&f, "accept-queue-overflow").is_none(), "{f:?}");
    assert!(named(&f, "host-listen-overflows").is_some(), "{f:?}");
}

/// Seed 001: "Possible SYN flooding", accept queue overflows.
#[test]
fn accept_queue_overflow_and_syn_cookies() {
    let run = overflow_run(FULL_LISTENER, None);
    let f = run.findings();
    let aq = named(&f, "accept-queue-overflow").expect("accept");
    assert_eq!(aq.severity, Severity::Critical);
    assert!(aq.evidence.iter().any(|e| e.contains("ListenOverflows +120")));
    assert!(aq.evidence.iter().any(|e| e.contains("somaxconn = 4096")));
    let syn = named(&f, "syn-queue-full").expect("syn");
    assert_eq!(syn.severity, Severity::Warning);
    assert!(syn.evidence.iter().any(|e| e.contains("TCPReqQFullDoCookies +30")));
    assert_eq!(f[0].severity, Severity::Critical, "findings are sorted worst first");
}

#[test]
fn softnet_drops_and_time_squeeze() {
    let mut run = Run::new(four_cpus());
    run.step(|c, _| {
        c.softnet[2] = (100_000, 7, 40);
    });
    let f = run.findings();
    let drops = named(&f, "softnet-backlog-drops").expect("drops");
    assert!(
        drops.evidence.iter().any(|e| e.contains("dropped +7"))
            && drops.evidence.iter().any(|e| e.contains("netdev_max_backlog = 1000"))
    );
    let sq = named(&f, "softnet-time-squeeze").expect("squeeze");
    assert!(
        sq.evidence.iter().any(|e| e.contains("time_squeeze +40"))
            && sq.evidence.iter().any(|e| e.contains("netdev_budget = 300"))
    );
}

/// Seed 001: "Too many open files".
#[test]
fn descriptor_limit_close() {
    let mut run = Run::new(Shape::small_virtio());
    write_process(run.dir.path(), 700, "nginx", &[(700, 0)], 900, 1024).unwrap();
    write_process(run.dir.path(), 701, "calm", &[(701, 0)], 10, 1024).unwrap();
    run.watch =
        vec![Watch { pid: 700, role: Role::Server }, Watch { pid: 701, role: Role::Server }];
    run.samples.clear();
    run.sample();
    run.step(|_, _| {});
    let f = run.findings();
    let fd: Vec<&Finding> = f.iter().filter(|x| x.name == "fd-limit-close").collect();
    assert_eq!(fd.len(), 1, "{f:?}");
    assert!(fd[0].evidence[0].contains("900 descriptors open at peak, soft RLIMIT_NOFILE 1024"));
}

/// A server whose log says it ran out of descriptors is critical though its table was
/// sampled at 60% (between failures, closed connections free some of it); without the log
/// line the same table is not named, and the log does not make another process critical.
#[test]
fn a_server_whose_log_says_it_ran_out_of_descriptors_is_critical() {
    let mut run = Run::new(Shape::small_virtio());
    write_process(run.dir.path(), 700, "nginx", &[(700, 0)], 24, 40).unwrap();
    write_process(run.dir.path(), 702, "nginx", &[(702, 0)], 8, 1024).unwrap();
    write_process(run.dir.path(), 701, "qpslab", &[(701, 0)], 870, 1024).unwrap();
    run.watch =
        vec![Watch { pid: 700, role: Role::Server }, Watch { pid: 701, role: Role::Client }];
    run.watch.push(Watch { pid: 702, role: Role::Server });
    run.samples.clear();
    run.sample();
    run.step(|_, _| {});
    let log = qpslab_host::logs::LogWindow {
        path: "/var/log/nginx/error.log".into(),
        bytes: 4000,
        messages: vec![qpslab_host::logs::Message {
            level: "crit".into(),
            example: "accept4() failed (24: Too many open files)".into(),
            count: 57,
        }],
    };
    let said = Context { server_logs: vec![log], ..Context::default() };
    let severity = |f: &[Finding], pid: &str| {
        f.iter().find(|x| x.name == "fd-limit-close" && x.summary.contains(pid)).map(|x| x.severity)
    };
    let f = run.findings_with(&said);
    assert_eq!(severity(&f, "pid 700"), Some(Severity::Critical), "{f:#?}");
    let fd =
        f.iter().find(|x| x.name == "fd-limit-close" && x.summary.contains("pid 700")).unwrap();
    assert!(fd.evidence.iter().any(|e| e.contains("accept4() failed")), "{fd:?}");
    assert_eq!(severity(&f, "pid 701"), Some(Severity::Warning), "{f:#?}");
    assert_eq!(severity(&f, "pid 702"), None, "the master: {f:#?}");
    let quiet = run.findings();
    assert_eq!(severity(&quiet, "pid 700"), None, "{quiet:#?}");
}

/// A followed server in another network namespace (a container's): its namespace's TCP
/// counters (through /proc/PID/net) add to ours, its interfaces are summarised under their
/// names with the namespace said, and the evidence says where it counted; a process in our
/// own namespace adds nothing.
#[test]
fn a_container_servers_namespace_counts_with_ours() {
    let mut run = Run::new(Shape::small_virtio());
    let dir = run.dir.path().to_path_buf();
    write_process(&dir, 700, "server", &[(700, 0)], 10, 1024).unwrap();
    write_process(&dir, 701, "beside", &[(701, 0)], 10, 1024).unwrap();
    std::fs::create_dir_all(dir.join("proc/self/ns")).unwrap();
    for (pid, ns) in [("self", 1), ("700", 2), ("701", 1)] {
        let link = dir.join(format!("proc/{pid}/ns/net"));
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(format!("net:[402653184{ns}]"), link).unwrap();
    }
    let theirs = |overflows: u64, tx_packets: u64| {
        let net = dir.join("proc/700/net");
        std::fs::create_dir_all(&net).unwrap();
        let w = |f: &str, t: String| std::fs::write(net.join(f), t).unwrap();
        w(
            "netstat",
            format!("TcpExt: ListenOverflows ListenDrops\nTcpExt: {overflows} {overflows}\n"),
        );
        w("snmp", format!("Tcp: OutSegs RetransSegs\nTcp: {} 0\n", tx_packets));
        w("sockstat", "TCP: inuse 7 orphan 0 tw 30 alloc 7 mem 1\n".into());
        w(
            "dev",
            format!(
                "h\nh\n  eth0: 0 0 0 0 0 0 0 0 {} {tx_packets} 0 0 0 0 0 0\n",
                tx_packets * 1500
            ),
        );
    };
    theirs(0, 0);
    run.watch =
        vec![Watch { pid: 700, role: Role::Server }, Watch { pid: 701, role: Role::Server }];
    run.restart();
    theirs(50, 1000);
    run.step(|_, _| {});
    let roles: BTreeMap<u32, Role> = run.watch.iter().map(|w| (w.pid, w.role)).collect();
    let summary = summarize(&run.samples, &roles, 100.0);
    assert_eq!(summary.server_namespaces, vec!["net:[4026531842]".to_string()]);
    assert_eq!(summary.tcp.get("ListenOverflows"), Some(&50), "{:?}", summary.tcp);
    assert_eq!(summary.tcp.get("OutSegs"), Some(&1000), "{:?}", summary.tcp);
    assert!(summary.tcp_tw_max >= 30, "{}", summary.tcp_tw_max);
    let eth0 = summary.interfaces.iter().find(|i| i.name == "eth0 (the server's namespace)");
    assert_eq!(eth0.map(|i| i.tx_pps), Some(1000.0), "{:?}", summary.interfaces);
    let f = run.findings();
    let o = f
        .iter()
        .find(|x| x.evidence.iter().any(|e| e.starts_with("TcpExt ListenOverflows +50")))
        .unwrap_or_else(|| panic!("{f:#?}"));
    assert!(o.evidence[0].ends_with("host-wide and in the server's namespace"), "{o:?}");
}

/// `/proc/net/tcp` rows from ephemeral ports to `dest` (hex `ADDR:PORT` as the table prints
/// it): `n` in TIME_WAIT with `left` clock ticks of their 60 s to go, from port `first` up.
fn tw_rows(dest: &str, first: u16, n: u16, left: u64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "   0: 0100007F:{:04X} {dest} 06 00000000:00000000 03:{left:08X} 00000000     0        0 0 3 0000000000000000\n",
                first + i
            )
        })
        .collect()
}

const TCP_HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

/// The port budget is per destination: 20,000 ports in TIME_WAIT to one server, closed within
/// the window, is pressure; the same count spread over ten servers, or left from a run a
/// minute ago, is not (an idle host got the warning from the namespace's total).
#[test]
fn ephemeral_port_pressure_is_per_destination_and_now() {
    let run_with = |rows: String| {
        let mut run = Run::new(Shape::small_virtio());
        run.step(|c, dir| {
            c.sockstat.tcp_tw = 20_000;
            std::fs::write(dir.join("proc/net/tcp"), format!("{TCP_HEADER}{rows}")).unwrap();
        });
        run
    };
    // 10.0.0.2:80, closed half a second ago.
    let one = run_with(tw_rows("0200000A:0050", 33000, 20_000, 5950));
    let f = one.findings();
    let p = named(&f, "ephemeral-ports").expect("finding");
    assert_eq!(p.severity, Severity::Warning);
    assert!(p.summary.contains("to 10.0.0.2:80"), "{}", p.summary);
    assert!(
        p.evidence[0]
            .starts_with("10.0.0.2:80: 20000 of the 28232 ports of net.ipv4.ip_local_port_range"),
        "{:?}",
        p.evidence
    );
    assert!(p.evidence[0].contains("20000 closed within the window"), "{:?}", p.evidence);
    let ctx = Context { addr_not_available: 12, ..Context::default() };
    assert_eq!(
        named(&one.findings_with(&ctx), "ephemeral-ports").unwrap().severity,
        Severity::Critical
    );

    let spread: String = (0..10u16)
        .map(|k| {
            tw_rows(
                &format!("{:08X}:0050", 0x0300_000A_u32 + (u32::from(k) << 24)),
                33000 + k * 2000,
                2000,
                5950,
            )
        })
        .collect();
    let f = run_with(spread).findings();
    assert!(named(&f, "ephemeral-ports").is_none(), "{f:?}");

    // Closed 50 s ago: nothing connects there now.
    let f = run_with(tw_rows("0200000A:0050", 33000, 20_000, 1000)).findings();
    assert!(named(&f, "ephemeral-ports").is_none(), "{f:?}");
}

fn two_sides(client_pct: u64, server_pct: u64, steps: usize, pps: impl Fn(usize) -> u64) -> Run {
    let mut run = Run::new(Shape::small_virtio());
    run.watch =
        vec![Watch { pid: 500, role: Role::Client }, Watch { pid: 600, role: Role::Server }];
    let write = |run: &Run, k: u64| {
        write_process(run.dir.path(), 500, "qpslab", &[(500, 0), (501, client_pct * k)], 20, 20000)
            .unwrap();
        write_process(run.dir.path(), 600, "nginx", &[(600, server_pct * k)], 20, 20000).unwrap();
    };
    write(&run, 0);
    run.samples.clear();
    run.sample();
    let mut packets = 0;
    for k in 1..=steps {
        write(&run, k as u64);
        packets += pps(k);
        run.step(|c, _| {
            c.dev.insert("lo".into(), (packets * 100, packets, packets * 100, packets));
        });
    }
    run
}

/// Seed 000: the client machine at 100% while the server idles.
#[test]
fn client_bound_server_bound_latency_bound() {
    let f = two_sides(98, 40, 2, |_| 10_000).findings();
    let c = named(&f, "client-bound").expect("client-bound");
    assert!(
        c.evidence
            .iter()
            .any(|e| e
                .contains("qpslab (pid 500): 0.98 CPUs over 1 busy thread(s), 98% of capacity")),
        "{:?}",
        c.evidence
    );
    assert!(named(&f, "server-bound").is_none());

    let f = two_sides(60, 97, 2, |_| 10_000).findings();
    assert!(named(&f, "server-bound").is_some() && named(&f, "client-bound").is_none());

    let f = two_sides(95, 97, 2, |_| 10_000).findings();
    assert!(named(&f, "both-saturated").is_some() && named(&f, "server-bound").is_none());

    let f = two_sides(30, 30, 4, |_| 10_000).findings();
    let l = named(&f, "latency-bound").expect("latency-bound");
    assert!(l.evidence.iter().any(|e| e.contains("packets/s flat at 20000")), "{:?}", l.evidence);

    // Neither saturated, every CPU busy: something else holds the CPUs, not round trips.
    let mut run = two_sides(40, 40, 3, |_| 10_000);
    run.step(|c, _| c.advance_cpus(100, |_| (90, 10, 0, 0)));
    let f = run.findings();
    let c = named(&f, "cpu-contention").expect("contention");
    assert!(c.evidence[0].contains("other work"), "{:?}", c.evidence);
    assert!(named(&f, "latency-bound").is_none());

    // Neither saturated but the rate swings: no verdict.
    let f = two_sides(30, 30, 4, |k| if k % 2 == 0 { 2_000 } else { 20_000 }).findings();
    assert!(named(&f, "latency-bound").is_none());
    assert!(named(&f, "no-single-bottleneck").is_some());
}

/// The doctor on the server host, the load elsewhere: the generators' own verdicts are its
/// generator side.
#[test]
fn generators_on_other_hosts_are_the_client_side_on_the_server_host() {
    let mut run = two_sides(0, 40, 2, |_| 10_000);
    run.watch.retain(|w| w.role == Role::Server);
    let far = |bound| Generator { host: "root@gen1".into(), busy_ratio: 0.97, bound };
    let ctx = Context { generators: vec![far(true), far(false)], ..Context::default() };
    let f = run.findings_with(&ctx);
    let c = named(&f, "client-bound").expect("client-bound from the generators' account");
    assert_eq!(
        c.evidence[0],
        "load generator on root@gen1: busy 97%, generator-bound by its own account"
    );
    assert!(c.evidence.iter().any(|e| e.starts_with("nginx (pid 600)")), "{:?}", c.evidence);
    let ctx = Context { generators: vec![far(false)], ..Context::default() };
    let f = run.findings_with(&ctx);
    assert!(named(&f, "client-bound").is_none(), "{f:?}");
    assert!(named(&f, "latency-bound").is_some(), "{f:?}");
}

/// A diagnosis made on another host comes back as it left; finding names stay the catalogue's.
#[test]
fn a_diagnosis_travels_as_json_and_back() {
    let run = two_sides(98, 40, 2, |_| 10_000);
    let roles: BTreeMap<u32, Role> = run.watch.iter().map(|w| (w.pid, w.role)).collect();
    let summary = summarize(&run.samples, &roles, 100.0);
    let (findings, explanation) =
        diagnose(&run.host(), &run.samples, &summary, &Context::default());
    let d = qpslab_doctor::Diagnosis {
        summary,
        findings,
        explanation: Some(explanation),
        profile: None,
    };
    let text = serde_json::to_string(&d).unwrap();
    let back: qpslab_doctor::Diagnosis = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
    let strange = text.replace("client-bound", "no-such-rule");
    let e = serde_json::from_str::<qpslab_doctor::Diagnosis>(&strange).unwrap_err();
    assert!(e.to_string().contains("unknown finding \"no-such-rule\""), "{e}");
}

#[test]
fn a_quiet_machine_has_nothing_serious() {
    let mut run = Run::new(Shape::two_packages_24_queues());
    run.step(|c, _| c.advance_cpus(100, |_| (1, 1, 0, 98)));
    let f = run.findings();
    assert!(f.iter().all(|x| x.severity == Severity::Info), "{f:?}");
}

/// Regression: a loopback benchmark got `single-rx-queue` for eth0, which carried 0 packets/s.
#[test]
fn loopback_only_traffic_says_nothing_about_the_nic() {
    let mut run = Run::new(Shape::small_virtio());
    for k in 1..=3u64 {
        run.step(|c, _| {
            c.dev.insert("lo".into(), (k * 50_000_000, k * 400_000, k * 50_000_000, k * 400_000));
            c.dev.insert("eth0".into(), (1000, 10, 1000, 10));
        });
    }
    let f = run.findings();
    assert!(
        named(&f, "single-rx-queue").is_none() && named(&f, "irqs-on-one-cpu").is_none(),
        "{f:?}"
    );
}

/// Regression: one time_squeeze (0.1/s) was reported as a warning.
#[test]
fn one_squeeze_in_ten_seconds_is_not_a_finding() {
    let mut run = Run::new(four_cpus());
    for k in 0..10 {
        run.step(|c, _| c.softnet[1].2 += u64::from(k == 5));
    }
    assert!(named(&run.findings(), "softnet-time-squeeze").is_none());
    // Sustained squeezing is: 15/s over 2 s.
    let mut run = Run::new(four_cpus());
    run.step(|c, _| c.softnet[1].2 += 15);
    run.step(|c, _| c.softnet[1].2 += 15);
    let sq = named(&run.findings(), "softnet-time-squeeze").map(|f| f.evidence[0].clone());
    assert_eq!(sq.as_deref(), Some("softnet_stat time_squeeze +30 (15.0/s)"));
}

/// A run that got no response gets one finding, not a verdict.
#[test]
fn no_responses_is_said_instead_of_a_verdict() {
    let run = two_sides(30, 30, 4, |_| 10_000);
    let load = LoadFacts { responses: 0, failed: 12, ..closed_loop(100, 0.001, 4.0) };
    let ctx = Context { load: Some(load), ..Context::default() };
    let f = run.findings_with(&ctx);
    assert!(named(&f, "no-responses").is_some(), "{f:?}");
    for verdict in ["latency-bound", "client-bound", "server-bound", "no-single-bottleneck"] {
        assert!(named(&f, verdict).is_none(), "{verdict} in {f:?}");
    }
}

/// A window under a second, or with one interval, is too short to judge.
#[test]
fn a_short_window_gets_no_verdict() {
    let run = two_sides(30, 30, 1, |_| 10_000);
    let f = run.findings();
    let short = named(&f, "run-too-short").expect("run-too-short");
    assert!(short.evidence[0].contains("1 sampling interval(s)"), "{:?}", short.evidence);
    assert!(named(&f, "latency-bound").is_none());
}

/// A followed process: its threads' CPU ticks per one-second step and their affinity.
struct Proc {
    pid: u32,
    role: Role,
    comm: &'static str,
    threads: &'static [(u32, u64, &'static str)],
}

/// The processes over `steps` one-second steps, every CPU's time split as `cpus` says.
fn with_procs(procs: &[Proc], steps: u64, cpus: fn(usize) -> (u64, u64, u64, u64)) -> Run {
    with_procs_and(procs, steps, cpus, &|_, _| {})
}

/// [`with_procs`], and `also` writes more of the tree at each step (`k` from 0), after the
/// processes (it may rewrite their files).
fn with_procs_and(
    procs: &[Proc],
    steps: u64,
    cpus: fn(usize) -> (u64, u64, u64, u64),
    also: &dyn Fn(&std::path::Path, u64),
) -> Run {
    let mut run = Run::new(Shape::small_virtio());
    run.watch = procs.iter().map(|p| Watch { pid: p.pid, role: p.role }).collect();
    let write = |run: &Run, k: u64| {
        for p in procs {
            let ticks: Vec<(u32, u64)> = p.threads.iter().map(|t| (t.0, t.1 * k)).collect();
            write_process(run.dir.path(), p.pid, p.comm, &ticks, 20, 20000).unwrap();
            let affinity: Vec<(u32, &str)> = p.threads.iter().map(|t| (t.0, t.2)).collect();
            write_affinity(run.dir.path(), p.pid, &affinity);
        }
        also(run.dir.path(), k);
    };
    write(&run, 0);
    run.samples.clear();
    run.sample();
    for k in 1..=steps {
        write(&run, k);
        run.step(|c, _| {
            c.advance_cpus(100, cpus);
            c.dev.insert("lo".into(), (k * 1000, k * 100_000, k * 1000, k * 100_000));
        });
    }
    run
}

/// Regression: `qpslab serve -w 1 --cpus 0` and a generator on CPUs 0-1: CPU 0 was 100% busy,
/// and the doctor said "latency-bound: neither side is saturated".
#[test]
fn a_saturated_server_cpu_is_never_called_latency_bound() {
    // The server's worker thread is pinned to CPU 0 and uses 55% of a CPU (the generator
    // takes the rest of CPU 0); the generator's two threads may run on both CPUs.
    let run = with_procs(
        &[
            Proc {
                pid: 600,
                role: Role::Server,
                comm: "qpslab",
                threads: &[(600, 0, "0-1"), (601, 55, "0")],
            },
            Proc {
                pid: 500,
                role: Role::Client,
                comm: "qpslab",
                threads: &[(500, 0, "0-1"), (501, 45, "0-1"), (502, 40, "0-1")],
            },
        ],
        3,
        |cpu| if cpu == 0 { (60, 38, 2, 0) } else { (20, 30, 0, 50) },
    );
    let f = run.findings();
    assert!(
        named(&f, "latency-bound").is_none() && named(&f, "no-single-bottleneck").is_none(),
        "{f:?}"
    );
    let server = named(&f, "server-bound").expect("the server's CPU is full: server-bound");
    assert!(server.evidence[0].contains("its CPU 0 was 100% busy"), "{:?}", server.evidence);
    // The generator could run on the server's CPU 0, which was full: each took from the other.
    let shared = named(&f, "shared-cpus").expect("shared-cpus");
    assert!(shared.summary.contains("same CPUs (0)"), "{}", shared.summary);
}

/// Both sides confined to the same CPU, which is full.
#[test]
fn both_sides_on_one_full_cpu_share_it() {
    let run = with_procs(
        &[
            Proc { pid: 600, role: Role::Server, comm: "server", threads: &[(600, 50, "1")] },
            Proc { pid: 500, role: Role::Client, comm: "client", threads: &[(500, 45, "1")] },
        ],
        2,
        |cpu| if cpu == 1 { (60, 38, 2, 0) } else { (1, 1, 0, 98) },
    );
    let f = run.findings();
    let shared = named(&f, "shared-cpus").expect("shared-cpus");
    assert!(shared.summary.contains("same CPUs (1)"), "{}", shared.summary);
    assert!(named(&f, "both-saturated").is_some(), "{f:?}");
}

/// Neither process saturated, but a CPU the server may use is full (other work, interrupts):
/// said as such, not as latency-bound.
#[test]
fn a_full_cpu_without_a_saturated_side_is_named() {
    let run = with_procs(
        &[
            Proc {
                pid: 600,
                role: Role::Server,
                comm: "server",
                threads: &[(600, 20, "0-1"), (601, 20, "0-1")],
            },
            Proc { pid: 500, role: Role::Client, comm: "client", threads: &[(500, 30, "0-1")] },
        ],
        3,
        |cpu| if cpu == 0 { (10, 10, 80, 0) } else { (30, 20, 0, 50) },
    );
    let f = run.findings();
    let hot = named(&f, "cpu-saturated").expect("cpu-saturated");
    assert!(hot.summary.starts_with("CPU 0, "), "{}", hot.summary);
    assert!(hot.evidence[0].contains("softirq 80%"), "{:?}", hot.evidence);
    assert!(named(&f, "latency-bound").is_none());
}

/// Writes each thread's `Cpus_allowed_list`, and the process's (its first thread's).
fn write_affinity(dir: &std::path::Path, pid: u32, threads: &[(u32, &str)]) {
    for (i, (tid, list)) in threads.iter().enumerate() {
        let text = format!("Name:\tx\nCpus_allowed_list:\t{list}\n");
        std::fs::write(dir.join(format!("proc/{pid}/task/{tid}/status")), &text).unwrap();
        if i == 0 {
            std::fs::write(dir.join(format!("proc/{pid}/status")), &text).unwrap();
        }
    }
}

/// Regression: nginx's idle master may run on every CPU; busy CPUs around it did not make it,
/// and so the server, saturated.
#[test]
fn an_idle_master_on_busy_cpus_is_not_a_saturated_server() {
    let run = with_procs(
        &[
            Proc { pid: 600, role: Role::Server, comm: "nginx", threads: &[(600, 0, "0-1")] },
            Proc { pid: 601, role: Role::Server, comm: "nginx", threads: &[(601, 60, "0")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 96, "1")] },
        ],
        2,
        |cpu| if cpu == 0 { (35, 40, 0, 25) } else { (10, 88, 2, 0) },
    );
    let f = run.findings();
    let client = named(&f, "client-bound").expect("client-bound");
    assert!(named(&f, "both-saturated").is_none(), "{f:?}");
    assert!(!client.evidence.iter().any(|e| e.contains("pid 600")), "the idle master is left out");
    // Regression: the master's CPUs (0-1) counted as the server's, so CPU 1, the generator's
    // own, full with its work, was called shared.
    assert!(named(&f, "shared-cpus").is_none(), "{f:?}");
}

/// A server of several processes is judged as a whole. nginx and two gunicorn workers fill
/// CPU 0 between them (0.22 + 0.39 + 0.39 CPUs): the server saturated its CPU with its own
/// work (it was called "saturated, mostly with work not its own", each process judged alone).
#[test]
fn a_server_of_several_processes_filling_its_cpu_is_saturated_by_its_own_work() {
    let run = with_procs(
        &[
            Proc { pid: 600, role: Role::Server, comm: "nginx", threads: &[(600, 22, "0")] },
            Proc { pid: 700, role: Role::Server, comm: "gunicorn", threads: &[(700, 39, "0")] },
            Proc { pid: 701, role: Role::Server, comm: "gunicorn", threads: &[(701, 39, "0")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 30, "1")] },
        ],
        3,
        |cpu| if cpu == 0 { (80, 20, 0, 0) } else { (20, 10, 0, 70) },
    );
    let f = run.findings();
    let bound = named(&f, "server-bound").expect("server-bound");
    assert!(bound.summary.starts_with("the server's threads are saturated"), "{}", bound.summary);
    assert!(named(&f, "cpu-contention").is_none(), "{f:?}");
}

/// More workers need idle CPU, not an idle CPU of the server's own: one gunicorn worker at its
/// thread's limit, on CPUs 0-1 that it shares with nginx and the generator and that were 69%
/// busy, has 0.62 CPUs to grow into (it was told "no CPU is idle for more workers"; one more
/// worker measured 1.40x).
#[test]
fn more_workers_are_advised_where_the_servers_cpus_have_room() {
    let run = with_procs(
        &[
            Proc { pid: 600, role: Role::Server, comm: "nginx", threads: &[(600, 20, "0-1")] },
            Proc { pid: 700, role: Role::Server, comm: "gunicorn", threads: &[(700, 95, "0-1")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 23, "0-1")] },
        ],
        3,
        |_| (50, 19, 0, 31),
    );
    let f = run.findings();
    let bound = named(&f, "server-bound").expect("server-bound");
    assert!(
        bound.remedy.starts_with(
            "give the server more workers: the CPUs 0-1 it may use had 0.62 CPUs idle"
        ),
        "{}",
        bound.remedy
    );
    // The same CPUs 95% busy: no room.
    let run = with_procs(
        &[
            Proc { pid: 600, role: Role::Server, comm: "nginx", threads: &[(600, 20, "0-1")] },
            Proc { pid: 700, role: Role::Server, comm: "gunicorn", threads: &[(700, 95, "0-1")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 75, "0-1")] },
        ],
        3,
        |_| (80, 15, 0, 5),
    );
    let f = run.findings();
    let bound = named(&f, "server-bound").or_else(|| named(&f, "both-saturated")).expect("bound");
    assert!(!bound.remedy.contains("idle (`qpslab serve -w`"), "{}", bound.remedy);
}

/// A v1 cgroup at /sys/fs/cgroup/cpu/NAME with a quota of `quota` microseconds per 100 ms,
/// holding `pid`; at step `k`, `10 k` periods of which `9 k` throttled.
fn cgroup_quota(dir: &std::path::Path, pid: u32, name: &str, quota: u64, k: u64) {
    let w = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        &format!("proc/{pid}/mountinfo"),
        "31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n",
    );
    w(&format!("proc/{pid}/cgroup"), &format!("1:cpu:/{name}\n0::/\n"));
    let cg = format!("sys/fs/cgroup/cpu/{name}");
    w(&format!("{cg}/cpu.cfs_quota_us"), &format!("{quota}\n"));
    w(&format!("{cg}/cpu.cfs_period_us"), "100000\n");
    let stat = format!(
        "nr_periods {}\nnr_throttled {}\nthrottled_time {}\n",
        10 * k,
        9 * k,
        720_000_000 * k
    );
    w(&format!("{cg}/cpu.stat"), &stat);
}

/// A server held to 0.2 CPUs by its cgroup (a container's CPU limit) uses 20% of a CPU and
/// is throttled in most periods: named as the quota, and its side saturated at that quota (it
/// was called latency-bound, "add connections").
#[test]
fn a_server_held_by_a_cpu_quota_is_throttled_not_latency_bound() {
    let run = with_procs_and(
        &[
            Proc { pid: 600, role: Role::Server, comm: "qpslab", threads: &[(600, 20, "0")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 30, "1")] },
        ],
        3,
        |cpu| if cpu == 0 { (10, 10, 0, 80) } else { (10, 20, 0, 70) },
        &|dir, k| cgroup_quota(dir, 600, "bench", 20_000, k),
    );
    let f = run.findings();
    assert_eq!(f[0].name, "cpu-throttled", "the headline: {f:?}");
    assert!(
        f[0].summary.starts_with(
            "the server (qpslab, pid 600) was held back by its cgroup's CPU quota of 0.20 CPUs"
        ),
        "{}",
        f[0].summary
    );
    assert!(f[0].evidence[0].starts_with("/sys/fs/cgroup/cpu/bench: CPU quota 20000/100000 us (0.20 CPUs), throttled in 90% of 30 periods (2.16 s held back)"), "{:?}", f[0].evidence);
    let bound = named(&f, "server-bound").expect("server-bound at the quota");
    assert!(bound.summary.contains("CPU quota"), "{}", bound.summary);
    // More workers under the same quota would not help: the remedy is the limit.
    assert!(bound.remedy.starts_with("lift or raise the server's CPU limit"), "{}", bound.remedy);
    assert!(
        bound.evidence[0].contains("100% of capacity (its cgroup's quota of 0.20 CPUs)"),
        "{:?}",
        bound.evidence
    );
    assert!(named(&f, "latency-bound").is_none(), "{f:?}");
}

/// The same for the generator: client-bound at its quota, never latency-bound.
#[test]
fn a_generator_held_by_a_cpu_quota_is_throttled() {
    let run = with_procs_and(
        &[
            Proc { pid: 600, role: Role::Server, comm: "nginx", threads: &[(600, 15, "0")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 20, "1")] },
        ],
        3,
        |cpu| if cpu == 0 { (10, 5, 0, 85) } else { (10, 10, 0, 80) },
        &|dir, k| cgroup_quota(dir, 500, "gen", 20_000, k),
    );
    let f = run.findings();
    assert_eq!(f[0].name, "cpu-throttled", "{f:?}");
    assert!(f[0].summary.starts_with("the load generator (qpslab, pid 500)"), "{}", f[0].summary);
    let bound = named(&f, "client-bound").expect("client-bound at the quota");
    assert!(bound.summary.contains("CPU quota"), "{}", bound.summary);
    assert!(named(&f, "latency-bound").is_none(), "{f:?}");
}

/// A quota the process never reached is no finding.
#[test]
fn an_unused_quota_is_not_a_finding() {
    let run = with_procs_and(
        &[Proc { pid: 600, role: Role::Server, comm: "qpslab", threads: &[(600, 20, "0")] }],
        3,
        |_| (10, 10, 0, 80),
        &|dir, k| {
            cgroup_quota(dir, 600, "roomy", 400_000, 0);
            // Periods pass, none throttled.
            let stat = format!("nr_periods {}\nnr_throttled 0\nthrottled_time 0\n", 10 * k);
            std::fs::write(dir.join("sys/fs/cgroup/cpu/roomy/cpu.stat"), stat).unwrap();
        },
    );
    let f = run.findings();
    assert!(named(&f, "cpu-throttled").is_none(), "{f:?}");
    assert!(named(&f, "server-bound").is_none(), "{f:?}");
}

/// Another process took the CPUs: named in the headline with its CPU.
#[test]
fn contention_names_the_other_process() {
    let run = with_procs_and(
        &[
            Proc { pid: 600, role: Role::Server, comm: "qpslab", threads: &[(600, 45, "0")] },
            Proc { pid: 500, role: Role::Client, comm: "qpslab", threads: &[(500, 30, "1")] },
        ],
        3,
        |cpu| if cpu == 0 { (90, 10, 0, 0) } else { (40, 20, 0, 40) },
        &|dir, k| {
            write_process(dir, 777, "yes", &[(777, 55 * k)], 3, 1024).unwrap();
            write_process(dir, 778, "sshd", &[(778, k)], 3, 1024).unwrap();
        },
    );
    let f = run.findings();
    assert_eq!(f[0].name, "cpu-contention", "{f:?}");
    assert!(f[0].summary.contains("above all yes (pid 777, 0.55 CPUs)"), "{}", f[0].summary);
    assert!(
        f[0].evidence.iter().any(|e| e == "busiest other processes: yes (pid 777) 0.55 CPUs"),
        "{:?}",
        f[0].evidence
    );
    // The server's CPU was full, mostly with the other process's work: said so.
    let bound = named(&f, "server-bound").expect("server-bound");
    assert!(
        bound.summary.starts_with("the server's CPUs were saturated, mostly with work not its own"),
        "{}",
        bound.summary
    );
}

/// A server (pid 600 on CPU 0) and a generator (pid 500 on CPU 1) using `server` and
/// `client` hundredths of a CPU, CPU 0's time split as `cpu0` (user, system, softirq, idle),
/// CPU 1 as `cpu1`, the server under a quota of `quota` microseconds per 100 ms if any.
fn grid_run(server: u64, client: u64, cpu0: [u64; 4], cpu1: [u64; 4], quota: Option<u64>) -> Run {
    let mut run = Run::new(Shape::small_virtio());
    run.watch =
        vec![Watch { pid: 600, role: Role::Server }, Watch { pid: 500, role: Role::Client }];
    let write = |dir: &std::path::Path, k: u64| {
        write_process(dir, 600, "srv", &[(600, server * k)], 20, 20000).unwrap();
        write_affinity(dir, 600, &[(600, "0")]);
        write_process(dir, 500, "gen", &[(500, client * k)], 20, 20000).unwrap();
        write_affinity(dir, 500, &[(500, "1")]);
        if let Some(q) = quota {
            cgroup_quota(dir, 600, "q", q, k);
        }
    };
    write(run.dir.path(), 0);
    run.samples.clear();
    run.sample();
    for k in 1..=3 {
        write(run.dir.path(), k);
        run.step(|c, _| {
            c.advance_cpus(100, |cpu| {
                let [u, s, si, i] = if cpu == 0 { cpu0 } else { cpu1 };
                (u, s, si, i)
            });
            c.dev.insert("lo".into(), (k * 1000, k * 100_000, k * 1000, k * 100_000));
        });
    }
    run
}

/// Over a grid of runs (each side's CPU use, how busy its CPU is with other work, a quota or
/// none), every finding that says a side or a CPU is saturated carries evidence at or above
/// the rule's own threshold, and every throttled finding a throttled share at or above its
/// own (a `server-bound: the server's threads are saturated` stood above `0.32 CPUs ... 32% of
/// capacity`).
#[test]
fn no_headline_contradicts_its_evidence() {
    /// The percentages in `text` followed by `what` (`% of capacity`, `% busy`).
    fn percents(text: &str, what: &str) -> Vec<f64> {
        let b = text.as_bytes();
        text.match_indices('%')
            .filter(|(i, _)| text[*i + 1..].starts_with(what))
            .filter_map(|(i, _)| {
                let start = b[..i].iter().rposition(|c| !c.is_ascii_digit()).map_or(0, |p| p + 1);
                text[start..i].parse::<f64>().ok().map(|v| v / 100.0)
            })
            .collect()
    }
    let sat = qpslab_doctor::SATURATED;
    let throttled = qpslab_sys::cgroup::THROTTLED_SHARE;
    let mut judged = std::collections::BTreeMap::new();
    for server in [20u64, 32, 60, 95] {
        for client in [20u64, 50, 97] {
            // The server's CPU: its own work and the rest idle, or full with other work.
            for other0 in [0u64, 30, 100 - server] {
                for quota in [None, Some(25_000u64), Some(40_000)] {
                    let idle0 = 100 - server - other0.min(100 - server);
                    let cpu0 = [server / 2 + other0, server - server / 2, 0, idle0];
                    let cpu1 = [client / 2, client - client / 2, 0, 100 - client];
                    let f = grid_run(server, client, cpu0, cpu1, quota).findings();
                    for x in &f {
                        // What the headline claims, and the evidence that must bear it out.
                        let s = x.summary.as_str();
                        let (what, floor) = if x.name == "cpu-throttled" {
                            (" of ", throttled)
                        } else if s.contains("threads are saturated")
                            || s.contains("generator is saturated")
                            || s.contains("CPU quota")
                        {
                            (" of capacity", sat)
                        } else if s.contains("CPUs were saturated")
                            || matches!(x.name, "cpu-saturated" | "shared-cpus")
                        {
                            (" busy", sat)
                        } else if x.name == "both-saturated" {
                            ("", sat)
                        } else {
                            continue;
                        };
                        *judged.entry(x.name).or_insert(0) += 1;
                        let top =
                            x.evidence.iter().flat_map(|e| percents(e, what)).fold(0.0, f64::max);
                        assert!(
                            top >= floor - 1e-9,
                            "{}: {} with evidence {:?} (server {server}, client {client}, other {other0}, quota {quota:?})",
                            x.name,
                            x.summary,
                            x.evidence
                        );
                    }
                }
            }
        }
    }
    // The grid reaches every verdict it checks.
    for name in ["server-bound", "client-bound", "both-saturated", "cpu-throttled"] {
        assert!(judged.contains_key(name), "{name} never came up: {judged:?}");
    }
}

// ---- The rules that read the profile (`--profile`), on synthetic profiles.

fn share(name: &str, share: f64) -> qpslab_profile::Share {
    qpslab_profile::Share { name: name.into(), samples: (share * 1000.0) as u64, share }
}

fn cpu_profile(
    cpu: usize,
    cats: &[(&str, f64)],
    kernel: &[(&str, f64)],
) -> qpslab_profile::CpuProfile {
    qpslab_profile::CpuProfile {
        cpu,
        samples: 1000,
        categories: cats.iter().map(|(n, s)| share(n, *s)).collect(),
        net_rx_share: 0.0,
        wakeup_lock_share: 0.0,
        top_kernel: kernel.iter().map(|(n, s)| share(n, *s)).collect(),
        top_user: Vec::new(),
        wakeup_lock_stacks: Vec::new(),
    }
}

fn process_profile(
    pid: u32,
    role: &str,
    cats: &[(&str, f64)],
    kernel: &[(&str, f64)],
) -> qpslab_profile::ProcessProfile {
    qpslab_profile::ProcessProfile {
        pid,
        comm: "nginx".into(),
        role: role.into(),
        samples: 1000,
        share: 0.5,
        categories: cats.iter().map(|(n, s)| share(n, *s)).collect(),
        top_kernel: kernel.iter().map(|(n, s)| share(n, *s)).collect(),
        top_user: vec![share("ngx_http_process_request_line", 0.02)],
    }
}

fn with_profile(
    cpus: Vec<qpslab_profile::CpuProfile>,
    procs: Vec<qpslab_profile::ProcessProfile>,
) -> Context {
    let profile = qpslab_profile::Profile {
        available: true,
        event: "cpu-clock".into(),
        frequency_hz: 499,
        samples: 2000,
        cpus,
        processes: procs,
        ..qpslab_profile::Profile::default()
    };
    Context { profile: Some(profile), ..Context::default() }
}

/// Seed 000: 36% of a CPU in `_raw_spin_unlock_irqrestore` under `__wake_up_sync_key` <-
/// `sock_def_readable`: lock contention in socket wake-ups, named with the stack and its share.
#[test]
fn a_spinlock_under_socket_wakeups_is_lock_contention() {
    let mut run = two_sides(40, 97, 2, |_| 10_000);
    run.step(|c, _| c.advance_cpus(100, |_| (30, 60, 8, 2)));
    let mut cpu = cpu_profile(0, &[("wakeup-lock", 0.38), ("tcp-receive", 0.3)], &[]);
    cpu.wakeup_lock_share = 0.36;
    cpu.net_rx_share = 0.55;
    cpu.wakeup_lock_stacks = vec![share(
        "_raw_spin_unlock_irqrestore <- __wake_up_sync_key <- sock_def_readable <- tcp_rcv_established",
        0.33,
    )];
    let f = run.findings_with(&with_profile(vec![cpu.clone()], Vec::new()));
    let l = named(&f, "lock-contention").expect("lock-contention");
    assert_eq!(
        l.evidence[0],
        "CPU 0 (98% busy): 36% of its samples spinning on a lock under a socket wake-up: \
         _raw_spin_unlock_irqrestore <- __wake_up_sync_key <- sock_def_readable <- \
         tcp_rcv_established (33% of the CPU)"
    );
    assert!(l.evidence[1].contains("55% of its samples in the NET_RX softirq"), "{:?}", l.evidence);
    assert!(l.remedy.contains("SO_REUSEPORT") && l.remedy.contains("RPS"), "{}", l.remedy);
    cpu.wakeup_lock_share = 0.05;
    let f = run.findings_with(&with_profile(vec![cpu], Vec::new()));
    assert!(named(&f, "lock-contention").is_none(), "5% is below the threshold");
    assert!(named(&run.findings(), "lock-contention").is_none(), "no profile, no finding");
}

/// Seed 000's other finding: the `xen` clocksource's reads "pretty high in the perf profiles".
#[test]
fn clock_reads_with_a_clocksource_other_than_tsc_are_a_slow_clocksource() {
    let mut run = two_sides(40, 97, 2, |_| 10_000);
    let cs = run.dir.path().join("sys/devices/system/clocksource/clocksource0");
    std::fs::write(cs.join("current_clocksource"), "xen\n").unwrap();
    std::fs::write(cs.join("available_clocksource"), "xen tsc hpet acpi_pm\n").unwrap();
    run.step(|c, _| c.advance_cpus(100, |_| (30, 60, 8, 2)));
    let cpu = cpu_profile(
        1,
        &[("tcp-transmit", 0.4), ("clock", 0.12)],
        &[("tcp_sendmsg_locked", 0.2), ("xen_clocksource_read", 0.09), ("ktime_get", 0.03)],
    );
    let f = run.findings_with(&with_profile(vec![cpu.clone()], Vec::new()));
    let c = named(&f, "slow-clocksource").expect("slow-clocksource");
    assert_eq!(c.evidence[0], "clocksource xen (available: xen tsc hpet acpi_pm)");
    assert_eq!(
        c.evidence[1],
        "CPU 1: 12% of its samples reading the clock (xen_clocksource_read 9%, ktime_get 3%)"
    );
    assert!(c.remedy.contains("tsc"), "{}", c.remedy);
    std::fs::write(cs.join("current_clocksource"), "tsc\n").unwrap();
    let f = run.findings_with(&with_profile(vec![cpu], Vec::new()));
    assert!(named(&f, "slow-clocksource").is_none(), "tsc is not slow");
}

#[test]
fn a_side_spending_its_samples_in_syscalls_or_copies_is_named() {
    let run = two_sides(40, 97, 2, |_| 10_000);
    let server = process_profile(
        600,
        "server",
        &[("syscall", 0.31), ("tcp-transmit", 0.25), ("copy", 0.22)],
        &[("entry_SYSCALL_64_after_hwframe", 0.12), ("rep_movs_alternative", 0.2)],
    );
    let f = run.findings_with(&with_profile(Vec::new(), vec![server]));
    let s = named(&f, "syscall-bound").expect("syscall-bound");
    assert_eq!(s.summary, "the server spends 31% of its CPU entering and leaving system calls");
    assert_eq!(s.evidence[0], "nginx (pid 600, server): syscall 31%, tcp-transmit 25%, copy 22%");
    assert_eq!(s.evidence[1], "its top kernel symbols there: entry_SYSCALL_64_after_hwframe 12%");
    let c = named(&f, "copy-bound").expect("copy-bound");
    assert_eq!(c.evidence[1], "its top copy symbols: rep_movs_alternative 20%");
    // The server-bound verdict says where its CPU went.
    let v = named(&f, "server-bound").expect("server-bound");
    assert!(
        v.evidence.iter().any(|e| e
            .starts_with("profile: the server nginx (pid 600) spent its samples on syscall 31%")),
        "{:?}",
        v.evidence
    );
}

#[test]
fn the_profile_confirms_concentrated_softirq_with_its_net_rx_share() {
    let mut run = Run::new(four_cpus());
    run.step(|c, _| {
        c.advance_cpus(100, |cpu| if cpu == 1 { (0, 5, 95, 0) } else { (20, 10, 0, 70) });
        c.net_rx[1] += 200_000;
    });
    let mut cpu = cpu_profile(
        1,
        &[("softirq-net-rx", 0.6)],
        &[("virtnet_poll", 0.2), ("napi_gro_receive", 0.1)],
    );
    cpu.net_rx_share = 0.93;
    let f = run.findings_with(&with_profile(vec![cpu], Vec::new()));
    let hot = named(&f, "softirq-concentrated").expect("finding");
    assert_eq!(
        hot.evidence.last().unwrap(),
        "profile: 93% of CPU 1's samples in the NET_RX softirq (top: virtnet_poll 20%, napi_gro_receive 10%)"
    );
}

// ---- The rate explained (Little's law) and what does or does not explain it.

/// A closed loop's facts: `concurrency` in flight, `latency_s` each, over `secs`, all ok.
fn closed_loop(concurrency: u64, latency_s: f64, secs: f64) -> LoadFacts {
    let responses = (concurrency as f64 / latency_s * secs) as u64;
    LoadFacts {
        mode: "closed".into(),
        concurrency,
        responses,
        ok: responses,
        mean_latency_s: latency_s,
        duration_s: secs,
        ..LoadFacts::default()
    }
}

fn with_load(load: LoadFacts) -> Context {
    Context { load: Some(load), ..Context::default() }
}

/// Neither side saturated in a closed loop: latency-bound whatever the per-interval rate did
/// (one connection to a fast server was latency-bound in some runs and "not steady" in
/// others), with the chain from the rate to the latency in its evidence.
#[test]
fn a_closed_loop_with_no_saturated_resource_is_latency_bound_however_the_rate_swings() {
    let load = closed_loop(10, 0.020, 4.0);
    for swing in [false, true] {
        let run = two_sides(30, 30, 4, |k| if swing && k % 2 == 0 { 2_000 } else { 20_000 });
        let f = run.findings_with(&with_load(load.clone()));
        assert_eq!(f[0].name, "latency-bound", "{f:?}");
        assert!(named(&f, "no-single-bottleneck").is_none(), "{f:?}");
        assert!(f.iter().all(|x| x.severity == Severity::Info), "{f:?}");
        let chain = f[0].evidence.join("\n");
        assert!(chain.contains("500 responses/s = 10.0 requests in service / 20.0 ms"), "{chain}");
        assert!(f[0].summary.contains("10 request(s) in flight over 20.0 ms"), "{}", f[0].summary);
    }
}

/// Where the latency goes: with the path's round trip measured, the waiting splits into the
/// path's share and the server's, and the remedy names the larger (a slow server: its own
/// time; a long path: the path).
#[test]
fn the_latency_splits_into_the_path_and_the_server() {
    let run = two_sides(30, 30, 4, |_| 20_000);
    let slow_server = LoadFacts { path_rtt_s: Some(0.000_05), ..closed_loop(10, 0.020, 4.0) };
    let (f, e) = run.diagnose(&with_load(slow_server));
    assert_eq!(f[0].name, "latency-bound", "{f:?}");
    let path = e.path_ms.unwrap();
    assert!((path - 0.05).abs() < 1e-9, "{e:?}");
    let last = e.chain.last().unwrap();
    assert!(
        last.contains("0.050 ms on the path") && last.contains("in the server and its queues"),
        "{last}"
    );
    assert!(f[0].remedy.contains("the server's own time is"), "{}", f[0].remedy);
    let far = LoadFacts { path_rtt_s: Some(0.018), ..closed_loop(10, 0.020, 4.0) };
    let f = run.findings_with(&with_load(far));
    assert!(f[0].remedy.contains("the path's round trip is 18.0 ms"), "{}", f[0].remedy);
}

/// An open loop with nothing saturated was paced by its schedule, not latency-bound.
#[test]
fn an_open_loop_with_nothing_saturated_is_paced() {
    let run = two_sides(30, 30, 4, |_| 10_000);
    let load = LoadFacts { mode: "rate".into(), ..closed_loop(50, 0.001, 4.0) };
    let f = run.findings_with(&with_load(load));
    assert_eq!(f[0].name, "paced", "{f:?}");
    assert!(named(&f, "latency-bound").is_none(), "{f:?}");
}

/// An open loop that fell behind its schedule is not called paced: the rate is not what was
/// asked (it said "the rate is what was asked" at 2,823 of 4,000 a second). With every
/// connection busy it ran as a closed loop does: Little's law explains it, and the finding
/// names the connections; with connections free, the generator.
#[test]
fn an_open_loop_behind_its_schedule_is_not_paced() {
    let run = two_sides(30, 30, 4, |_| 10_000);
    for free in [false, true] {
        let schedule = qpslab_doctor::Schedule {
            target_rps: 4000.0,
            achieved_rps: 2823.0,
            kept: false,
            due_unsent: 3432,
            lag_p50_ms: 368.0,
            connections_free: free,
        };
        let load = LoadFacts {
            mode: "rate".into(),
            schedule: Some(schedule),
            ..closed_loop(50, 0.050, 4.0)
        };
        let (f, e) = run.diagnose(&with_load(load));
        assert!(named(&f, "paced").is_none(), "{f:?}");
        let behind = named(&f, "behind-schedule").expect("behind-schedule");
        assert_eq!(behind.severity, Severity::Warning);
        assert!(behind.summary.contains("where 4000 a second were asked"), "{}", behind.summary);
        let who = if free { "the generator set the pace" } else { "the load's connections" };
        assert!(behind.summary.contains(who), "{}", behind.summary);
        assert!(e.chain[0].contains("the schedule was not met"), "{:?}", e.chain);
        assert!(
            e.chain[0].contains("3432 due and never sent, send lag p50 368.0 ms"),
            "{:?}",
            e.chain
        );
        assert!(!e.chain.join(" ").contains("what was asked"), "{:?}", e.chain);
        // Little's law: 1000 responses/s x 50 ms = 50 in service.
        assert!(e.chain[1].contains("50.0 requests in service"), "{:?}", e.chain);
    }
}

/// Most requests answered with a bad status: the run failed, and no bound is given.
#[test]
fn a_run_of_bad_statuses_is_failed_not_bound() {
    let run = two_sides(30, 97, 4, |_| 10_000);
    let mut load = closed_loop(100, 0.001, 4.0);
    load.bad_status = load.responses;
    load.ok = 0;
    load.statuses.insert("404".into(), load.responses);
    let (f, e) = run.diagnose(&with_load(load));
    assert_eq!(f[0].name, "run-failed", "{f:?}");
    assert!(e.bound.is_none() && e.chain[0].starts_with("the run failed"), "{e:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(f[0].evidence[0].contains("(404: 400000)"), "{:?}", f[0].evidence);
    for bound in ["server-bound", "latency-bound", "both-saturated", "client-bound"] {
        assert!(named(&f, bound).is_none(), "{bound} in {f:?}");
    }
    // A few bad statuses among many ok ones are not a failed run.
    let mut load = closed_loop(100, 0.001, 4.0);
    load.bad_status = 10;
    let f = run.findings_with(&with_load(load));
    assert!(named(&f, "run-failed").is_none(), "{f:?}");
    assert!(named(&f, "server-bound").is_some(), "{f:?}");
}

/// 300 connections kept open, 48 served: rate x latency says 48 were in service, and the
/// doctor says the rest were not, as critical; with all in service, nothing is said.
#[test]
fn connections_without_answers_are_out_of_service() {
    let run = two_sides(30, 60, 4, |_| 10_000);
    let mut load = closed_loop(48, 0.002, 4.0);
    load.concurrency = 300;
    let f = run.findings_with(&with_load(load));
    let o = named(&f, "connections-out-of-service").expect("out of service");
    assert_eq!(o.severity, Severity::Critical);
    assert!(
        o.evidence[0].contains("48.0 requests in service on average, of 300"),
        "{:?}",
        o.evidence
    );
    assert_eq!(f[0].name, "connections-out-of-service", "{f:?}");
    let f = run.findings_with(&with_load(closed_loop(300, 0.002, 4.0)));
    assert!(named(&f, "connections-out-of-service").is_none(), "{f:?}");
}

/// Writes /proc/pressure/cpu with `total` microseconds of CPU waits.
fn pressure(dir: &std::path::Path, total: u64) {
    std::fs::create_dir_all(dir.join("proc/pressure")).unwrap();
    std::fs::write(
        dir.join("proc/pressure/cpu"),
        format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
    )
    .unwrap();
}

/// Another process filling the CPUs beside a latency-bound run: when no task waited for a
/// CPU (PSI), the contention does not explain the rate and is info under latency-bound; when
/// tasks waited a third of the window, it does, and is the warning.
#[test]
fn contention_heads_only_when_tasks_waited_for_a_cpu() {
    for (waits_us, explains) in [(20_000u64, false), (350_000, true)] {
        let mut run = two_sides(2, 2, 0, |_| 0);
        pressure(run.dir.path(), 1_000_000);
        write_process(run.dir.path(), 777, "sh", &[(777, 0)], 3, 1024).unwrap();
        run.samples.clear();
        run.sample();
        let mut total = 1_000_000;
        for k in 1..=3u64 {
            total += waits_us;
            write_process(run.dir.path(), 500, "qpslab", &[(500, 0), (501, 2 * k)], 20, 20000)
                .unwrap();
            write_process(run.dir.path(), 600, "nginx", &[(600, 2 * k)], 20, 20000).unwrap();
            write_process(run.dir.path(), 777, "sh", &[(777, 100 * k)], 3, 1024).unwrap();
            run.step(|c, dir| {
                c.advance_cpus(100, |cpu| if cpu == 0 { (100, 0, 0, 0) } else { (4, 0, 0, 96) });
                pressure(dir, total);
            });
        }
        let f = run.findings_with(&with_load(closed_loop(10, 0.020, 3.0)));
        let c = named(&f, "cpu-contention").expect("contention named");
        assert!(c.summary.contains("above all sh (pid 777"), "{}", c.summary);
        if explains {
            assert_eq!(f[0].name, "cpu-contention", "{f:?}");
            assert_eq!(c.severity, Severity::Warning);
            assert!(named(&f, "latency-bound").is_none(), "{f:?}");
        } else {
            assert_eq!(f[0].name, "latency-bound", "{f:?}");
            assert_eq!(c.severity, Severity::Info);
            assert!(f.iter().all(|x| x.severity == Severity::Info), "{f:?}");
            assert!(
                c.evidence.iter().any(|e| e.contains("tasks waited for a CPU 2% of the window")),
                "{:?}",
                c.evidence
            );
        }
    }
}

// ---- The network interfaces as resources: capacity, errors, a NIC's own limits.

/// Quiet sides (pids 500 and 600 at 5% each) while eth0 moves `tx_bytes_per_s` and
/// `pps` each way for 3 s; `each` runs in every step's directory.
fn eth0_run(tx_bytes_per_s: u64, pps: u64, each: &dyn Fn(&std::path::Path, u64)) -> Run {
    let mut run = two_sides(5, 5, 0, |_| 0);
    std::fs::write(run.dir.path().join("sys/class/net/eth0/speed"), "1000\n").unwrap();
    each(run.dir.path(), 0);
    run.samples.clear();
    run.sample();
    for k in 1..=3u64 {
        write_process(run.dir.path(), 500, "qpslab", &[(500, 0), (501, 5 * k)], 20, 20000).unwrap();
        write_process(run.dir.path(), 600, "nginx", &[(600, 5 * k)], 20, 20000).unwrap();
        each(run.dir.path(), k);
        run.step(|c, _| {
            c.advance_cpus(100, |_| (5, 3, 2, 90));
            c.dev.insert("eth0".into(), (k * 1_000_000, k * pps, k * tx_bytes_per_s, k * pps));
        });
    }
    run
}

/// The seeds' bare-metal limit: a gigabit interface sending 120 MB/s (96% of 125 MB/s) while
/// the CPUs idle is the bound, and its one rx queue without RPS is info (RPS "would not gain
/// anything"); the rate is not called latency-bound.
#[test]
fn a_gigabit_link_at_its_speed_is_the_bound() {
    let run = eth0_run(120_000_000, 90_000, &|_, _| {});
    let (f, e) = run.diagnose(&with_load(closed_loop(100, 0.01, 3.0)));
    assert_eq!(f[0].name, "link-saturated", "{f:?}");
    assert!(f[0].summary.contains("eth0 link (1000 Mb/s) carried 96%"), "{}", f[0].summary);
    assert_eq!(e.bound_resource().map(|r| r.kind.as_str()), Some("link"), "{e:?}");
    assert!(named(&f, "latency-bound").is_none(), "{f:?}");
    let q = named(&f, "single-rx-queue").expect("the layout is still said");
    assert_eq!(q.severity, Severity::Info, "{q:?}");
    // At a tenth of the speed, the link is not the bound.
    let f = eth0_run(12_000_000, 9_000, &|_, _| {})
        .findings_with(&with_load(closed_loop(100, 0.01, 3.0)));
    assert!(named(&f, "link-saturated").is_none(), "{f:?}");
    assert_eq!(f[0].name, "latency-bound", "{f:?}");
}

/// ENA's allowance counters (as `ethtool -S` prints them, captured beside the tree) moving
/// during the run are the NIC's own limit; a driver's drop counter is an interface drop.
#[test]
fn a_cloud_nics_allowance_counters_are_its_limit() {
    let counters = |dir: &std::path::Path, k: u64| {
        std::fs::create_dir_all(dir.join("qpslab/ethtool")).unwrap();
        std::fs::write(
            dir.join("qpslab/ethtool/eth0"),
            format!(
                "NIC statistics:\n     tx_timeout: 0\n     queue_0_tx_cnt: {}\n     bw_out_allowance_exceeded: {}\n     pps_allowance_exceeded: 0\n     rx_dropped: {}\n",
                k * 1000,
                k * 40,
                k * 3
            ),
        )
        .unwrap();
    };
    let f = eth0_run(30_000_000, 20_000, &counters).findings();
    let n = named(&f, "nic-limit").expect("nic-limit");
    assert_eq!(n.severity, Severity::Warning);
    assert!(n.summary.contains("bw_out_allowance_exceeded"), "{}", n.summary);
    assert!(
        n.evidence[0].contains("eth0 bw_out_allowance_exceeded +120 (40.0/s)"),
        "{:?}",
        n.evidence
    );
    let d = named(&f, "interface-drops").expect("interface-drops");
    assert!(
        d.evidence.iter().any(|e| e == "eth0 driver counter rx_dropped +9"),
        "{:?}",
        d.evidence
    );
    // The same counters standing still say nothing.
    let f = eth0_run(30_000_000, 20_000, &|dir, _| counters(dir, 1)).findings();
    assert!(named(&f, "nic-limit").is_none() && named(&f, "interface-drops").is_none(), "{f:?}");
}

/// Only the interfaces on the run's path are judged: a busy eth0 with its interrupt CPU
/// saturated is a warning when the route to the target leaves by it, and nothing at all when
/// the run went over lo (it named another program's short-lived veth).
#[test]
fn only_the_interfaces_on_the_runs_path_are_judged() {
    let mut run = Run::new(Shape::small_virtio());
    run.step(|c, _| {
        c.advance_cpus(100, |cpu| if cpu == 0 { (10, 20, 65, 5) } else { (10, 10, 0, 80) });
        c.dev.insert("eth0".into(), (50_000_000, 40_000, 30_000_000, 35_000));
    });
    let path = |p: &str| Context { path: Some(vec![p.to_string()]), ..Context::default() };
    assert!(named(&run.findings_with(&path("eth0")), "single-rx-queue").is_some());
    let f = run.findings_with(&path("lo"));
    assert!(named(&f, "single-rx-queue").is_none(), "{f:?}");
}

/// HTTP/2 against a server that allows one stream per connection, 64 asked: the concurrency in
/// Little's law is the server's limit, and the remedy is more connections, not more streams.
#[test]
fn a_servers_stream_limit_is_the_concurrency() {
    let load = LoadFacts {
        connections: 2,
        stream_limit: Some(qpslab_doctor::StreamLimit { server: 1, asked: 64 }),
        ..closed_loop(2, 0.001, 4.0)
    };
    let run = two_sides(30, 30, 4, |_| 20_000);
    let (f, e) = run.diagnose(&with_load(load));
    assert_eq!(f[0].name, "latency-bound", "{f:?}");
    assert!(
        f[0].summary.contains("the server's HTTP/2 stream limit set the concurrency"),
        "{}",
        f[0].summary
    );
    assert!(f[0].remedy.starts_with("more connections (-c)"), "{}", f[0].remedy);
    assert_eq!(f[0].cause, Some(qpslab_doctor::Cause::StreamLimit { server: 1, asked: 64 }));
    assert!(
        e.chain.iter().any(|c| c.contains("1 stream(s) per connection of the 64 asked")),
        "{:?}",
        e.chain
    );
}

/// HTTP/2 request bodies held by the server's flow-control window: over a third of the
/// responses' time with nothing saturated, the window is the headline (the stream's or the
/// connection's, as held first), and the waiting is split to show it; at a tenth it is
/// evidence in the chain, not the cause; with the server's CPU saturated the CPU is the bound.
#[test]
fn request_bodies_held_by_the_servers_window() {
    let flow = |held_share: f64, on_connection: u64| LoadFacts {
        flow: Some(qpslab_doctor::FlowFacts {
            server_window: 16_384,
            held: 1000,
            held_on_connection: on_connection,
            held_share,
            client_window: (1 << 30) - 1,
            past_client_window: 0,
        }),
        ..closed_loop(4, 0.020, 4.0)
    };
    let run = two_sides(30, 30, 4, |_| 20_000);
    let (f, e) = run.diagnose(&with_load(flow(0.5, 0)));
    assert_eq!(f[0].name, "latency-bound", "{f:?}");
    let cause = qpslab_doctor::Cause::FlowControl { window: 16_384, share: 0.5, connection: false };
    assert_eq!(f[0].cause, Some(cause));
    assert!(f[0].summary.contains("the server's HTTP/2 stream window (16384 bytes) held the request bodies 50% of the responses' time"), "{}", f[0].summary);
    assert!(f[0].remedy.contains("SETTINGS_INITIAL_WINDOW_SIZE"), "{}", f[0].remedy);
    let chain = e.chain.join("\n");
    assert!(chain.contains("1000 request bodies were held by the server's HTTP/2 stream window (16384 bytes) before all was sent: 50% of the responses' time (10.0 ms of the 20.0 ms per response)"), "{chain}");
    assert!(
        chain.contains("10.0 ms request bodies held by the server's HTTP/2 window, "),
        "{chain}"
    );

    let (f, _) = run.diagnose(&with_load(flow(0.5, 900)));
    assert!(matches!(f[0].cause, Some(qpslab_doctor::Cause::FlowControl { connection: true, .. })));
    assert!(
        f[0].summary.contains("the server's HTTP/2 connection window held"),
        "{}",
        f[0].summary
    );
    assert!(f[0].remedy.contains("connection window"), "{}", f[0].remedy);

    let (f, e) = run.diagnose(&with_load(flow(0.1, 0)));
    assert_eq!(f[0].cause, Some(qpslab_doctor::Cause::RoundTrips), "{f:?}");
    assert!(e.chain.iter().any(|c| c.starts_with("HTTP/2 flow control: ")), "{:?}", e.chain);

    let busy = two_sides(30, 97, 4, |_| 20_000);
    let (f, e) = busy.diagnose(&with_load(flow(0.5, 0)));
    assert!(
        f.iter().all(|f| !matches!(f.cause, Some(qpslab_doctor::Cause::FlowControl { .. }))),
        "{f:?}"
    );
    assert!(e.chain.iter().any(|c| c.starts_with("HTTP/2 flow control: ")), "{:?}", e.chain);
}

/// The server stopping as a whole (stretches with no response on any connection while
/// requests waited): a tenth of the window or more with nothing saturated is the headline,
/// with what the rate would be without the stops; a twentieth is said beside the round trips;
/// a saturated server stays the bound with the stops a warning beside it; a saturated
/// generator says nothing of them (its busy turns read no response either).
#[test]
fn a_server_that_stops_as_a_whole_is_named_by_its_stops() {
    let stops = |share: f64| LoadFacts {
        stalls: Some(qpslab_doctor::StallFacts {
            count: 7,
            total_s: 4.0 * share,
            longest_s: 0.2,
            share,
            held: 140,
            threshold_s: 0.01,
        }),
        ..closed_loop(20, 0.0004, 4.0)
    };
    let is_stalls =
        |f: &qpslab_doctor::Finding| matches!(f.cause, Some(qpslab_doctor::Cause::Stalls { .. }));
    let run = two_sides(30, 30, 4, |_| 20_000);
    let (f, e) = run.diagnose(&with_load(stops(0.3)));
    assert_eq!(f[0].name, "latency-bound", "{f:?}");
    assert_eq!(
        f[0].cause,
        Some(qpslab_doctor::Cause::Stalls { count: 7, share: 0.3, longest_ms: 200.0 })
    );
    assert!(
        f[0].summary.contains(
            "stopped answering as a whole 7 time(s), for up to 200.0 ms (30% of the window)"
        ),
        "{}",
        f[0].summary
    );
    assert!(f[0].summary.contains("about 1.43x"), "{}", f[0].summary);
    assert_eq!(f.iter().filter(|x| is_stalls(x)).count(), 1, "said once: {f:?}");
    assert!(
        e.chain.iter().any(|c| c.starts_with("the server stopped: 7 stops of 10.0 ms or longer")),
        "{:?}",
        e.chain
    );

    let (f, _) = run.diagnose(&with_load(stops(0.05)));
    assert_eq!(f[0].cause, Some(qpslab_doctor::Cause::RoundTrips), "{f:?}");
    let beside = f.iter().find(|x| x.name == "stalls").expect("said beside");
    assert_eq!(beside.severity, Severity::Info, "{beside:?}");

    let (f, _) = run.diagnose(&with_load(stops(0.01)));
    assert!(f.iter().all(|x| !is_stalls(x)), "{f:?}");

    let busy = two_sides(30, 97, 4, |_| 20_000);
    let (f, _) = busy.diagnose(&with_load(stops(0.3)));
    assert!(f.iter().any(|x| x.name == "server-bound"), "{f:?}");
    assert!(f.iter().all(|x| x.name != "latency-bound"), "{f:?}");
    let beside = f.iter().find(|x| x.name == "stalls").expect("said beside the bound");
    assert_eq!(beside.severity, Severity::Warning, "{beside:?}");

    let generator = two_sides(97, 30, 4, |_| 20_000);
    let (f, _) = generator.diagnose(&with_load(stops(0.3)));
    assert_eq!(f[0].name, "client-bound", "{f:?}");
    assert!(f.iter().all(|x| !is_stalls(x)), "{f:?}");
}

/// A VM whose hypervisor runs other guests on its CPUs: steal is named with its share, a
/// warning from 20% when a side was short of CPU (a server pinned to CPU 0 at 95% of it), info
/// at 23% when none was, and at 9%, and nothing at 0.5%.
#[test]
fn the_hypervisors_steal_is_named() {
    let stolen = |per_cpu: u64, busy: bool| {
        let mut run = Run::new(four_cpus());
        if busy {
            run.watch = vec![Watch { pid: 600, role: Role::Server }];
            write_process(run.dir.path(), 600, "srv", &[(600, 0)], 20, 20000).unwrap();
            write_affinity(run.dir.path(), 600, &[(600, "0")]);
        }
        run.restart();
        for k in 1..=3u64 {
            if busy {
                write_process(run.dir.path(), 600, "srv", &[(600, 95 * k)], 20, 20000).unwrap();
                write_affinity(run.dir.path(), 600, &[(600, "0")]);
            }
            run.step(|c, _| {
                if busy {
                    c.advance_cpus(
                        1000,
                        |cpu| if cpu == 0 { (95, 0, 0, 5) } else { (40, 10, 0, 50) },
                    );
                } else {
                    c.advance_cpus(1000, |_| (40, 10, 0, 50));
                }
                for t in &mut c.cpu {
                    t.steal += per_cpu;
                }
            });
        }
        run.findings()
    };
    let f = stolen(300, true);
    let s = named(&f, "cpu-steal").expect("cpu-steal");
    assert_eq!(s.severity, Severity::Warning, "{f:?}");
    assert!(s.summary.contains("gave 23% of this host's CPU time"), "{}", s.summary);
    assert!(s.evidence[0].contains("cpu0 23%"), "{:?}", s.evidence);
    assert_eq!(s.cause, Some(qpslab_doctor::Cause::Steal { share: 300.0 / 1300.0 }));
    // No side short of CPU: the steal took nothing the run wanted.
    assert_eq!(named(&stolen(300, false), "cpu-steal").map(|s| s.severity), Some(Severity::Info));
    // What this VM shows under load is said, not an alarm.
    assert_eq!(named(&stolen(100, true), "cpu-steal").map(|s| s.severity), Some(Severity::Info));
    assert!(named(&stolen(5, true), "cpu-steal").is_none());
}

/// Memory short of demand: PSI memory at 30% of the window is a warning with the faults and
/// reclaim; 0.5% is nothing; a kernel without PSI is judged by stalls and major faults.
#[test]
fn memory_pressure_is_named_by_psi_or_by_stalls_and_faults() {
    let pressed = |psi_us: u64, stalls: u64, faults: u64| {
        let mut run = Run::new(four_cpus());
        run.counters.memory_pressure_us = u64::from(psi_us > 0);
        run.restart();
        for _ in 0..2 {
            run.step(|c, _| {
                c.memory_pressure_us += psi_us;
                c.vm.alloc_stalls += stalls;
                c.vm.major_faults += faults;
                c.vm.direct_scans += 10 * faults;
            });
        }
        run.findings()
    };
    let f = pressed(300_000, 40, 5000);
    let m = named(&f, "memory-pressure").expect("memory-pressure");
    assert_eq!(m.severity, Severity::Warning);
    assert!(m.summary.contains("tasks waited for it 30% of the window"), "{}", m.summary);
    assert!(m.evidence[1].starts_with("5000 major faults/s"), "{:?}", m.evidence);
    assert!(named(&pressed(5_000, 0, 0), "memory-pressure").is_none());
    let no_psi = pressed(0, 40, 5000);
    assert_eq!(named(&no_psi, "memory-pressure").map(|m| m.severity), Some(Severity::Warning));
    assert!(named(&pressed(0, 0, 5000), "memory-pressure").is_none(), "faults alone: a cold cache");
}

/// The TIME_WAIT table overflowing (its counter moved) is named with the table's size and a
/// cause that raises it from tune's table.
#[test]
fn a_full_time_wait_table_is_named() {
    let mut run = Run::new(four_cpus());
    run.restart();
    run.step(|c, _| {
        *c.tcpext.get_mut("TCPTimeWaitOverflow").unwrap() += 900;
        c.sockstat.tcp_tw = 131_072;
    });
    let f = run.findings();
    let t = named(&f, "time-wait-overflow").expect("time-wait-overflow");
    assert_eq!(t.severity, Severity::Warning, "the load is not known: it may have opened them");
    assert!(t.summary.contains("900 closed connection(s) skipped TIME_WAIT"), "{}", t.summary);
    assert!(t.evidence[1].contains("net.ipv4.tcp_max_tw_buckets = 131072"), "{:?}", t.evidence);
    let settings = vec![("net.ipv4.tcp_max_tw_buckets".to_string(), "1048576".to_string())];
    assert_eq!(t.cause, Some(qpslab_doctor::Cause::HostSettings { settings, client_side: false }));
}

/// TCP's buffers at the pressure mark are a warning; connections dropped for memory are
/// critical.
#[test]
fn tcp_memory_pressure_is_named_and_dropped_connections_are_critical() {
    let mut run = Run::new(four_cpus());
    run.restart();
    run.step(|c, _| c.sockstat.tcp_mem = 390_000);
    let f = run.findings();
    let m = named(&f, "tcp-memory-pressure").expect("at the pressure mark");
    assert_eq!(m.severity, Severity::Warning);
    assert!(
        m.evidence[1].contains(
            "390000 pages (sockstat mem) against net.ipv4.tcp_mem = 287901 383869 575802"
        ),
        "{:?}",
        m.evidence
    );
    let mut run = Run::new(four_cpus());
    run.restart();
    run.step(|c, _| *c.tcpext.get_mut("TCPAbortOnMemory").unwrap() += 3);
    let f = run.findings();
    let m = named(&f, "tcp-memory-pressure").expect("aborts");
    assert_eq!(m.severity, Severity::Critical);
    assert!(m.summary.contains("3 connection(s) were dropped"), "{}", m.summary);
}

/// UDP datagrams dropped for full socket buffers (IPv4 and IPv6 counted together), in a tree
/// with no process's sockets to tell whose: a warning with no run known, said beside an HTTP/3
/// run's own datagrams, another's when the run spoke TCP (it sent no datagram to lose); a send
/// buffer's drops are named apart. (The ground truth in crates/cli/tests/ground_truth.rs
/// tells the run's own drops from another's by their sockets.)
#[test]
fn udp_buffer_drops_are_named_and_attributed_by_the_runs_protocol() {
    let dropping = |ctx: &Context| {
        let mut run = Run::new(four_cpus());
        run.restart();
        run.step(|c, _| {
            *c.udp.get_mut("InDatagrams").unwrap() += 50_000;
            *c.udp.get_mut("RcvbufErrors").unwrap() += 300;
            *c.udp6.get_mut("RcvbufErrors").unwrap() += 20;
        });
        run.findings_with(ctx)
    };
    let f = dropping(&Context::default());
    let u = named(&f, "udp-buffer-drops").expect("receive buffer drops");
    assert_eq!(u.severity, Severity::Warning, "whose is not known");
    assert!(u.summary.contains("receive buffer was full"), "{}", u.summary);
    assert!(u.evidence[0].starts_with("Udp UdpRcvbufErrors +320"), "{:?}", u.evidence);
    assert!(u.evidence[0].contains("InDatagrams +50000"), "{:?}", u.evidence);
    assert!(u.remedy.contains("net.core.rmem_max"), "{}", u.remedy);

    let tcp_run = dropping(&with_load(closed_loop(10, 0.001, 1.0)));
    let u = named(&tcp_run, "udp-buffer-drops").expect("said as the host's");
    assert_eq!(u.severity, Severity::Info);
    assert!(u.summary.starts_with("on this host but not in this run"), "{}", u.summary);

    let quic =
        qpslab_doctor::QuicFacts { datagrams_in: 9000, datagrams_out: 7000, send_dropped: 0 };
    let h3_run =
        dropping(&with_load(LoadFacts { quic: Some(quic), ..closed_loop(10, 0.001, 1.0) }));
    let u = named(&h3_run, "udp-buffer-drops").expect("beside the run's datagrams");
    assert_eq!(u.severity, Severity::Warning, "whose is not known");
    assert!(u.evidence[1].contains("9000 datagrams in and 7000 out"), "{:?}", u.evidence);

    let mut run = Run::new(four_cpus());
    run.restart();
    run.step(|c, _| *c.udp.get_mut("SndbufErrors").unwrap() += 1);
    let f = run.findings();
    let u = named(&f, "udp-buffer-drops").expect("send buffer drops");
    assert!(u.summary.contains("send buffer was full"), "{}", u.summary);
    assert_eq!(u.severity, Severity::Warning, "under 1/s");
    let quiet = Run::new(four_cpus());
    assert!(named(&quiet.findings(), "udp-buffer-drops").is_none());
}

/// A conntrack table that dropped packets is critical; one at 95% of its size a warning; a
/// host without conntrack, or with a table at half, has nothing to say.
#[test]
fn a_full_conntrack_table_is_named() {
    let tracked = |peak: u64, dropped: u64| {
        let mut run = Run::new(four_cpus());
        run.counters.conntrack =
            Some(qpslab_host::parse::Conntrack { entries: 10, max: 1000, dropped: 0 });
        run.restart();
        run.step(|c, _| {
            c.conntrack = Some(qpslab_host::parse::Conntrack { entries: peak, max: 1000, dropped });
        });
        run.findings()
    };
    let f = tracked(1000, 77);
    let c = named(&f, "conntrack-full").expect("drops");
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.summary.contains("77 packet(s)"), "{}", c.summary);
    assert!(c.evidence[0].contains("1000 entries at most of net.netfilter.nf_conntrack_max = 1000"));
    assert_eq!(
        named(&tracked(950, 0), "conntrack-full").map(|c| c.severity),
        Some(Severity::Warning)
    );
    assert!(named(&tracked(500, 0), "conntrack-full").is_none());
    assert!(named(&Run::new(four_cpus()).findings(), "conntrack-full").is_none());
}

/// Regression: a load's worker thread joined before the stop sample took its CPU time with it;
/// the generator (0.96 CPUs in all) was left with an idle main thread free to run on both
/// CPUs, so nginx's CPU looked shared with it and `shared-cpus` was said of sides pinned
/// apart. The process's own count keeps a gone thread's time: it is that thread's.
#[test]
fn a_thread_gone_before_the_last_sample_keeps_its_cpu() {
    let mut run = Run::new(Shape::small_virtio());
    run.watch =
        vec![Watch { pid: 600, role: Role::Server }, Watch { pid: 700, role: Role::Client }];
    let write = |dir: &std::path::Path, k: u64, worker: bool| {
        write_process(dir, 600, "nginx", &[(600, 85 * k)], 20, 20000).unwrap();
        write_affinity(dir, 600, &[(600, "0")]);
        let threads: &[(u32, u64)] = if worker { &[(700, k), (702, 95 * k)] } else { &[(700, k)] };
        write_process(dir, 700, "qpslab", threads, 20, 20000).unwrap();
        let affinity: &[(u32, &str)] =
            if worker { &[(700, "0-1"), (702, "1")] } else { &[(700, "0-1")] };
        write_affinity(dir, 700, affinity);
    };
    write(run.dir.path(), 0, true);
    run.samples.clear();
    run.sample();
    for k in 1..=3u64 {
        let gone = k == 3;
        write(run.dir.path(), k, !gone);
        if gone {
            std::fs::remove_dir_all(run.dir.path().join("proc/700/task/702")).unwrap();
            let total = k + 95 * k;
            std::fs::write(
                run.dir.path().join("proc/700/stat"),
                format!("700 (qpslab) S 1 1 1 0 -1 0 0 0 0 0 {total} 0 0 0 20 0 1 0 1 0 0\n"),
            )
            .unwrap();
        }
        run.step(|c, _| {
            c.advance_cpus(100, |cpu| if cpu == 0 { (86, 0, 0, 14) } else { (97, 0, 0, 3) })
        });
    }
    let roles: BTreeMap<u32, Role> = run.watch.iter().map(|w| (w.pid, w.role)).collect();
    let summary = summarize(&run.samples, &roles, 100.0);
    let generator = summary.processes.iter().find(|p| p.pid == 700).unwrap();
    assert_eq!(generator.busy_threads, 1, "{generator:?}");
    assert_eq!(generator.cpus.as_ref().map(|c| c.named()), Some("CPU 1".into()), "{generator:?}");
    assert!(generator.busiest_thread > 0.9, "{generator:?}");
    let f = run.findings();
    assert!(named(&f, "shared-cpus").is_none(), "{f:?}");
}

/// A tail at 200 ms with a median of 0.3 ms is TCP's retransmission timer when segments were
/// retransmitted in the window; the same tail without any is a server as slow for those
/// requests, not the timer. Connects at 1 s are the SYN's timer, with the queues' counters.
#[test]
fn a_tail_at_a_kernel_timer_is_named_with_its_mechanism() {
    let tail = |v: [f64; 6]| -> Vec<(f64, f64)> {
        [0.5, 0.9, 0.99, 0.999, 0.9999, 1.0].into_iter().zip(v).collect()
    };
    let lossy = |retrans: i64| {
        let mut run = Run::new(four_cpus());
        run.restart();
        run.step(|c, _| {
            c.retrans_segs += retrans;
            c.out_segs += 10_000;
        });
        let load = LoadFacts {
            latency_tail: tail([0.0003, 0.0009, 0.205, 0.21, 0.41, 0.42]),
            ..closed_loop(4, 0.006, 1.0)
        };
        run.findings_with(&with_load(load))
    };
    let f = lossy(150);
    let t = named(&f, "kernel-timer").expect("the retransmission timer");
    assert_eq!(t.severity, Severity::Warning, "1% x 200 ms of a 6 ms mean: a third of it");
    assert!(
        t.summary.starts_with("1% or more of the responses waited for the retransmission timeout (200 ms): p99 at 205.0 ms against a median of 0.30 ms"),
        "{}",
        t.summary
    );
    assert!(t.evidence[1].contains("RetransSegs +150"), "{:?}", t.evidence);
    assert!(named(&lossy(0), "kernel-timer").is_none(), "no retransmission: not the timer");

    let mut run = Run::new(four_cpus());
    run.restart();
    run.step(|c, _| *c.tcpext.get_mut("ListenOverflows").unwrap() += 40);
    let load = LoadFacts {
        mode: "conn-per-request".into(),
        mean_connect_s: 0.02,
        connect_tail: tail([0.0001, 0.0002, 1.003, 1.01, 3.0, 3.0]),
        ..closed_loop(4, 0.001, 1.0)
    };
    let f = run.findings_with(&with_load(load));
    let t = named(&f, "kernel-timer").expect("the SYN's timer");
    assert!(
        t.summary.starts_with(
            "1% or more of the connects waited for the SYN retransmission (1 s): p99 at 1003.0 ms"
        ),
        "{}",
        t.summary
    );
    assert!(t.evidence[1].contains("ListenOverflows +40"), "{:?}", t.evidence);

    // Regression: connects at 1 s with no SYN sent again and nothing dropped were named the
    // SYN's timer, a warning against a mean connect time of 0 (kept-alive connections).
    let syn = |retrans: i64| {
        let mut run = Run::new(four_cpus());
        run.restart();
        run.step(|c, _| *c.tcpext.get_mut("TCPSynRetrans").unwrap() += retrans);
        let load = LoadFacts {
            connect_tail: tail([0.05, 0.06, 0.063, 1.08, 1.09, 1.1]),
            ..closed_loop(1000, 0.1, 1.0)
        };
        run.findings_with(&with_load(load))
    };
    assert!(named(&syn(0), "kernel-timer").is_none());
    let f = syn(3);
    let t = named(&f, "kernel-timer").expect("SYNs sent again");
    assert_eq!(t.severity, Severity::Info, "0.1% x 1 s of a 100 ms mean");
    assert!(t.summary.starts_with("0.1% or more of the connects"), "{}", t.summary);
}

/// A server whose pool of numbered worker threads had one doing all the work, the others
/// idle with a CPU free for them: `worker-imbalance`, and the saturated server is not told to
/// add workers. The same pool sharing the work, and one numbered thread beside an unnumbered
/// main thread, are no imbalance.
#[test]
fn one_busy_worker_of_a_pool_is_an_imbalance() {
    // (worker 0's ticks a second, worker 1's): the pool's threads are tid 601 and 602.
    let run_with = |w0: u64, w1: u64, names: [&'static str; 2]| {
        let threads: &'static [(u32, u64, &'static str)] =
            Box::leak(vec![(600, 0, "0-1"), (601, w0, "0-1"), (602, w1, "0-1")].into_boxed_slice());
        let name = move |dir: &std::path::Path, k: u64| {
            for (tid, ticks, n) in [(601, w0, names[0]), (602, w1, names[1])] {
                let stat = format!(
                    "{tid} ({n}) S 1 1 1 0 -1 0 0 0 0 0 {} 0 0 0 20 0 1 0 1 0 0\n",
                    ticks * k
                );
                std::fs::write(dir.join(format!("proc/600/task/{tid}/stat")), stat).unwrap();
            }
        };
        with_procs_and(
            &[
                Proc { pid: 600, role: Role::Server, comm: "server", threads },
                Proc { pid: 500, role: Role::Client, comm: "client", threads: &[(500, 20, "0-1")] },
            ],
            3,
            |cpu| if cpu == 0 { (60, 37, 0, 3) } else { (10, 10, 0, 80) },
            &name,
        )
        .findings()
    };
    let f = run_with(95, 2, ["server-w-0", "server-w-1"]);
    let w = named(&f, "worker-imbalance").expect("worker-imbalance");
    assert_eq!(f[0].name, "worker-imbalance", "the headline: {f:?}");
    assert!(
        w.evidence[0].contains("server (pid 600)'s 2 worker threads: 0.95, 0.02"),
        "{:?}",
        w.evidence
    );
    assert!(matches!(w.cause, Some(Cause::WorkerImbalance { workers: 2, .. })), "{:?}", w.cause);
    let bound = named(&f, "server-bound").expect("server-bound");
    assert!(bound.remedy.starts_with("not more workers"), "{}", bound.remedy);
    // Sharing the work: no imbalance.
    let f = run_with(50, 48, ["server-w-0", "server-w-1"]);
    assert!(named(&f, "worker-imbalance").is_none(), "{f:?}");
    // A busy numbered thread and an idle one of another name: no pool.
    let f = run_with(95, 2, ["server-w-0", "timer"]);
    assert!(named(&f, "worker-imbalance").is_none(), "{f:?}");
}

/// nginx's stub_status over a window of `secs`: `requests` counted, `unhandled` of the
/// connections it accepted closed at once.
fn stub_window(requests: u64, unhandled: u64, secs: f64) -> qpslab_host::stub_status::Window {
    use qpslab_host::stub_status::{Location, Reading, Window};
    let first = Reading { accepts: 100, handled: 100, requests: 1000, ..Reading::default() };
    let last = Reading {
        accepts: 200 + unhandled,
        handled: 200,
        requests: 1000 + requests,
        writing: 3,
        ..Reading::default()
    };
    let at =
        Location { addr: "127.0.0.1:8080".into(), host: "localhost".into(), path: "/s".into() };
    Window { at, first, last, secs }
}

/// The server counted twice the run's requests a second: other clients shared it, said with
/// the share (and the run marked disturbed); within the margins, or when nginx proxies to its
/// own port (a request counts twice there), nothing is said.
#[test]
fn requests_the_run_did_not_send_are_other_traffic() {
    let run = two_sides(30, 30, 4, |_| 20_000);
    let load = closed_loop(10, 0.020, 4.0); // 500 responses/s over 4 s
    let ctx = |requests: u64, nginx: Option<qpslab_host::nginx::NginxConf>| Context {
        load: Some(load.clone()),
        stub_status: Some(stub_window(requests, 0, 4.0)),
        nginx,
        ..Context::default()
    };
    let f = run.findings_with(&ctx(4000, None));
    let o = named(&f, "other-traffic").unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(o.severity, Severity::Warning);
    assert!(o.summary.contains("nginx served 1000 requests/s and the run got 500/s: 50%"), "{o:?}");
    assert!(o.evidence[0].starts_with("nginx's stub_status (127.0.0.1:8080/s): accepts +100, handled +100, requests +4000 (1000/s)"), "{o:?}");
    assert!(
        matches!(o.cause, Some(Cause::OtherTraffic { share, .. }) if (share - 0.5).abs() < 1e-9)
    );
    assert_eq!(qpslab_doctor::run_mark(o.name, "warning"), Some("disturbed"));
    // 10% more, and 50 a second more of a small rate: a health check, not a neighbour.
    assert!(named(&run.findings_with(&ctx(2200, None)), "other-traffic").is_none());
    let itself = qpslab_host::nginx::parse(
        "http { server { listen 8080; location / { proxy_pass http://127.0.0.1:8081; } } server { listen 8081; } }",
    );
    assert!(named(&run.findings_with(&ctx(4000, Some(itself))), "other-traffic").is_none());
}

/// nginx closed connections it had accepted (handled behind accepts on its stub_status) with
/// a run whose connections fit its configured worker_connections (some were held by other
/// clients, or its log said nothing at its level): its connection limit is named from the
/// page; without unhandled connections, nothing is.
#[test]
fn connections_nginx_accepted_and_closed_are_its_connection_limit() {
    let run = two_sides(30, 30, 4, |_| 20_000);
    let load = LoadFacts { connections: 10, ..closed_loop(10, 0.020, 4.0) };
    let nginx = qpslab_host::nginx::parse(
        "events { worker_connections 64; } http { server { listen 8080; } }",
    );
    let ctx = |unhandled: u64| Context {
        load: Some(load.clone()),
        stub_status: Some(stub_window(2000, unhandled, 4.0)),
        nginx: Some(nginx.clone()),
        ..Context::default()
    };
    let f = run.findings_with(&ctx(37));
    let l = named(&f, "server-connection-limit").unwrap_or_else(|| panic!("{f:#?}"));
    assert!(l.summary.contains("nginx closed 37 connection(s) it had accepted: no worker connection was free (64 per worker)"), "{l:?}");
    assert!(l.evidence[0].contains("accepts +137, handled +100"), "{l:?}");
    assert!(matches!(l.cause, Some(Cause::WorkerConnections { limit: 64, wanted: 10 })), "{l:?}");
    assert!(named(&run.findings_with(&ctx(0)), "server-connection-limit").is_none());
}

/// Writes `text` at `rel` under `dir`, making its directories.
fn write_at(dir: &std::path::Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A server's cgroup memory limit (a fixture's v1 memory cgroup): hit with an OOM kill in the
/// window, critical; hit without reads from storage or memory waits, info; never hit, not
/// said.
#[test]
fn a_cgroup_memory_limit_is_named_by_its_hits_and_kills() {
    let run_with = |hits: u64, kills: u64| {
        let mut run = Run::new(Shape::small_virtio());
        let dir = run.dir.path().to_path_buf();
        write_process(&dir, 700, "app", &[(700, 0)], 10, 1024).unwrap();
        let w = |rel: &str, t: &str| write_at(&dir, rel, t);
        w(
            "proc/700/mountinfo",
            "31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        );
        w("proc/700/cgroup", "4:memory:/box\n");
        let m = "sys/fs/cgroup/memory/box";
        w(&format!("{m}/memory.limit_in_bytes"), "67108864\n");
        w(&format!("{m}/memory.usage_in_bytes"), "67000000\n");
        let counters = |failcnt: u64, oom: u64| {
            w(&format!("{m}/memory.failcnt"), &format!("{failcnt}\n"));
            w(
                &format!("{m}/memory.oom_control"),
                &format!("oom_kill_disable 0\nunder_oom 0\noom_kill {oom}\n"),
            );
        };
        counters(100, 0);
        run.watch = vec![Watch { pid: 700, role: Role::Server }];
        run.restart();
        counters(100 + hits, kills);
        run.step(|_, _| {});
        run.findings()
    };
    let f = run_with(5000, 1);
    let l = named(&f, "memory-limit").unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(l.severity, Severity::Critical, "{l:?}");
    assert!(l.summary.contains("memory limit of 64.0 MiB: it hit it 5000 times"), "{l:?}");
    assert!(l.evidence[0].contains("1 process(es) killed by the OOM killer"), "{l:?}");
    assert!(
        matches!(
            &l.cause,
            Some(Cause::MemoryLimit { pid: 700, limit: 67108864, hits: 5000, oom_kills: 1, .. })
        ),
        "{l:?}"
    );
    let quiet = run_with(5000, 0);
    assert_eq!(
        named(&quiet, "memory-limit").map(|x| x.severity),
        Some(Severity::Info),
        "{quiet:#?}"
    );
    assert!(named(&run_with(0, 0), "memory-limit").is_none());
}

/// A v2 cgroup's own memory waits (memory.pressure) make its limit's hits a warning without
/// reads from storage or the host's PSI: the waits are the cgroup's, said as such.
#[test]
fn a_v2_cgroups_own_memory_waits_make_its_limit_a_warning() {
    let mut run = Run::new(Shape::small_virtio());
    let dir = run.dir.path().to_path_buf();
    write_process(&dir, 700, "app", &[(700, 0)], 10, 1024).unwrap();
    let w = |rel: &str, t: &str| write_at(&dir, rel, t);
    w("proc/700/mountinfo", "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    w("proc/700/cgroup", "0::/pod\n");
    w("sys/fs/cgroup/pod/memory.max", "134217728\n");
    w("sys/fs/cgroup/pod/memory.current", "134000000\n");
    let counters = |max: u64, waited_us: u64| {
        w(
            "sys/fs/cgroup/pod/memory.events",
            &format!("low 0\nhigh 0\nmax {max}\noom 0\noom_kill 0\n"),
        );
        w(
            "sys/fs/cgroup/pod/memory.pressure",
            &format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={waited_us}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
        );
    };
    counters(10, 0);
    run.watch = vec![Watch { pid: 700, role: Role::Server }];
    run.restart();
    // 300 ms of waits in the one-second step.
    counters(900, 300_000);
    run.step(|_, _| {});
    let f = run.findings();
    let l = named(&f, "memory-limit").unwrap_or_else(|| panic!("{f:#?}"));
    assert_eq!(l.severity, Severity::Warning, "{l:?}");
    assert!(l.summary.contains("memory limit of 128.0 MiB: it hit it 890 times"), "{l:?}");
    assert!(
        l.evidence.iter().any(|e| e
            == "its cgroup's tasks waited for memory 30% of the window (memory.pressure some)"),
        "{l:?}"
    );
}

/// A gRPC run's calls turned away with RESOURCE_EXHAUSTED (their HTTP status 200): a limit
/// set the ok rate, named by the gRPC status, with no HTTP-only remedy; calls failing with
/// INTERNAL are a failed run naming that status; the same counts as HTTP 200s alone name
/// neither.
#[test]
fn a_grpc_limit_is_named_by_the_status_the_client_read() {
    let run = two_sides(30, 30, 4, |_| 10_000);
    let grpc = |ok: u64, code: &str, n: u64| LoadFacts {
        ok,
        bad_status: n,
        responses: ok + n,
        statuses: [("200".to_string(), ok + n)].into(),
        grpc_statuses: Some([("OK".to_string(), ok), (code.to_string(), n)].into()),
        ..closed_loop(16, 0.001, 4.0)
    };
    let f = run.findings_with(&with_load(grpc(8_000, "RESOURCE_EXHAUSTED", 2_000)));
    let limited = named(&f, "rate-limited").unwrap_or_else(|| panic!("{f:?}"));
    assert!(
        limited.summary.contains("answered grpc-status RESOURCE_EXHAUSTED (20%"),
        "{}",
        limited.summary
    );
    assert!(!limited.remedy.contains("--accept-status"), "{}", limited.remedy);
    match &limited.cause {
        Some(qpslab_doctor::Cause::RateLimit { status, grpc_status, .. }) => {
            assert_eq!((*status, grpc_status.as_deref()), (200, Some("RESOURCE_EXHAUSTED")));
        }
        other => panic!("{other:?}"),
    }
    let f = run.findings_with(&with_load(grpc(1_000, "INTERNAL", 9_000)));
    assert!(named(&f, "rate-limited").is_none(), "{f:?}");
    let failed = named(&f, "run-failed").unwrap_or_else(|| panic!("{f:?}"));
    assert!(failed.evidence[0].contains("(grpc-status INTERNAL: 9000)"), "{:?}", failed.evidence);
    // Without the gRPC statuses, 200s are no limit's.
    let http = LoadFacts { grpc_statuses: None, ..grpc(8_000, "RESOURCE_EXHAUSTED", 2_000) };
    assert!(named(&run.findings_with(&with_load(http)), "rate-limited").is_none());
}
