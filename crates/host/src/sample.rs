//! One sample of the kernel counters the doctor reads, taken under an injectable root. A sample
//! is plain data; the doctor compares the first and last and looks at each interval.

use crate::cpuset::CpuSet;
use crate::parse::{self, CpuTimes, IfCounters, IrqLine, SockStat, SoftnetRow};
use qpslab_sys::root::{ReadError, Root};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Which side of the experiment a watched process is on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    Server,
    Client,
}

impl Role {
    /// The suffix that names the interfaces of a namespace a process of this side lives in
    /// ([`crate::links::SERVER_NS`], [`crate::links::GENERATOR_NS`]).
    pub fn ns_suffix(self) -> &'static str {
        match self {
            Role::Server => crate::links::SERVER_NS,
            Role::Client => crate::links::GENERATOR_NS,
        }
    }
}

/// A process the doctor follows (all its threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    pub pid: u32,
    pub role: Role,
}

/// A watched process at one instant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProcSample {
    pub pid: u32,
    pub comm: String,
    /// Its parent (a server's workers have its master as theirs).
    pub ppid: u32,
    /// CPU ticks of the whole process, exited threads included (/proc/PID/stat); an exited
    /// process that was not reaped yet still shows its final total.
    pub ticks: u64,
    /// Every live thread.
    pub threads: Vec<ThreadSample>,
    pub open_fds: Option<usize>,
    pub nofile_soft: Option<u64>,
    /// The CPUs the process (its main thread) may run on.
    pub allowed: Option<CpuSet>,
    /// The CPU quotas of its cgroup and their ancestors, with their throttling counters.
    pub cpu_limits: Vec<qpslab_sys::cgroup::CpuLimit>,
    /// What it caused to be read from and written to storage so far (/proc/PID/io).
    pub io: Option<parse::ProcIo>,
    /// At the window's first and last samples: the memory limits of its cgroup and their
    /// ancestors, with how often each was hit.
    pub memory_limits: Vec<qpslab_sys::memlimit::MemoryLimit>,
    /// At the window's first and last samples: datagrams dropped on arrival at the UDP
    /// sockets it holds (the `drops` of /proc/PID/net/udp and udp6, as `ss -uamp` shows them);
    /// None when it holds none.
    pub udp_drops: Option<u64>,
}

/// One thread of a watched process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadSample {
    pub tid: u32,
    /// Its name (/proc/PID/task/TID/comm: a worker pool's are alike, `qpslab-serve-0`, ...).
    pub name: String,
    /// CPU ticks (utime + stime).
    pub ticks: u64,
    /// The CPUs it may run on (a pinned worker's differ from its process's).
    pub cpus: Option<CpuSet>,
    /// Time it spent runnable and waiting for a CPU, in nanoseconds
    /// (/proc/PID/task/TID/schedstat's second field); None without schedstats.
    pub run_delay_ns: Option<u64>,
    /// Its state at this instant (`R`, `S`, `D`: uninterruptible, waiting on I/O, ...).
    pub state: char,
}

/// TcpExt counters (from /proc/net/netstat) the doctor reads.
pub const TCPEXT: &[&str] = &[
    "ListenOverflows",
    "ListenDrops",
    "TCPReqQFullDoCookies",
    "TCPReqQFullDrop",
    "TCPBacklogDrop",
    "TCPTimeouts",
    "TCPTimeWaitOverflow",
    "TCPMemoryPressures",
    "TCPMemoryPressuresChrono",
    "TCPAbortOnMemory",
    "TCPSynRetrans",
];

/// UDP counters (/proc/net/snmp's `Udp`, and /proc/net/snmp6's `Udp6` added to them) the doctor
/// reads, kept beside TcpExt's under `Udp` + the name (`UdpRcvbufErrors`): datagrams dropped
/// for a full socket buffer each way, what QUIC (HTTP/3) loses in the host.
pub const UDP: &[&str] =
    &["InDatagrams", "OutDatagrams", "InErrors", "RcvbufErrors", "SndbufErrors"];

/// The network counters of one namespace: /proc/net's files, or /proc/PID/net's for a
/// process's namespace (the files show the namespace of the process named).
#[derive(Debug, Clone, Default)]
pub struct NetCounters {
    /// The namespace as the kernel names it (`net:[4026531840]`); empty for our own.
    pub ns: String,
    /// Whose namespace it is (ours: the server's).
    pub role: Role,
    /// TcpExt's counters of [`TCPEXT`], and UDP's of [`UDP`] (IPv4 and IPv6 together).
    pub tcpext: BTreeMap<String, i64>,
    pub retrans_segs: i64,
    pub out_segs: i64,
    pub sockstat: SockStat,
    pub dev: Vec<IfCounters>,
}

impl NetCounters {
    /// Reads the counters under `dir` (`proc/net`, `proc/PID/net`).
    pub fn read(root: &Root, dir: &str, ns: String, role: Role) -> NetCounters {
        let keyed = |f: &str| {
            root.read_opt(&format!("{dir}/{f}"))
                .map(|t| parse::keyed_counters(&t))
                .unwrap_or_default()
        };
        let (netstat, snmp) = (keyed("netstat"), keyed("snmp"));
        let tcp = snmp.get("Tcp");
        NetCounters {
            ns,
            role,
            tcpext: netstat
                .get("TcpExt")
                .into_iter()
                .flatten()
                .filter(|(k, _)| TCPEXT.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), *v))
                .chain(udp_counters(snmp.get("Udp"), root.read_opt(&format!("{dir}/snmp6"))))
                .collect(),
            retrans_segs: tcp.and_then(|t| t.get("RetransSegs").copied()).unwrap_or(0),
            out_segs: tcp.and_then(|t| t.get("OutSegs").copied()).unwrap_or(0),
            sockstat: root
                .read_opt(&format!("{dir}/sockstat"))
                .map(|t| parse::sockstat(&t))
                .unwrap_or_default(),
            dev: root
                .read_opt(&format!("{dir}/dev"))
                .map(|t| parse::net_dev(&t))
                .unwrap_or_default(),
        }
    }
}

/// UDP's counters of [`UDP`], from snmp's `Udp` table and snmp6's `Udp6` lines, summed.
fn udp_counters(v4: Option<&BTreeMap<String, i64>>, snmp6: Option<String>) -> Vec<(String, i64)> {
    let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
    for name in UDP {
        if let Some(v) = v4.and_then(|t| t.get(*name)) {
            *sums.entry(name).or_default() += v;
        }
    }
    for line in snmp6.iter().flat_map(|t| t.lines()) {
        let mut words = line.split_ascii_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else { continue };
        let Some(name) = key.strip_prefix("Udp6") else { continue };
        if let (Some(name), Ok(v)) = (UDP.iter().find(|n| **n == name), value.parse::<i64>()) {
            *sums.entry(name).or_default() += v;
        }
    }
    sums.into_iter().map(|(k, v)| (format!("Udp{k}"), v)).collect()
}

/// A network namespace other than ours that a watched process lives in (a container's, a
/// pod's, a load run with `ip netns exec`): one process of it, and whose side it is (the
/// server's when both sides live there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    pub pid: u32,
    pub ns: String,
    pub role: Role,
}

/// The namespaces other than ours that the watched processes live in, each once, the
/// servers' first.
pub fn foreign_namespaces(root: &Root, watch: &[Watch]) -> Vec<Foreign> {
    let ns = |p: &str| root.read_link(&format!("proc/{p}/ns/net")).map(|l| l.display().to_string());
    let Some(ours) = ns("self") else { return Vec::new() };
    let mut seen = BTreeSet::new();
    let servers = watch.iter().filter(|w| w.role == Role::Server);
    servers
        .chain(watch.iter().filter(|w| w.role != Role::Server))
        .filter_map(|w| Some(Foreign { pid: w.pid, ns: ns(&w.pid.to_string())?, role: w.role }))
        .filter(|f| f.ns != ours && seen.insert(f.ns.clone()))
        .collect()
}

/// Everything read at one instant.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Time since sampling began.
    pub at: Duration,
    pub cpu: Vec<CpuTimes>,
    pub net_rx: BTreeMap<usize, u64>,
    pub net_tx: BTreeMap<usize, u64>,
    /// The NIC queue IRQs asked for.
    pub irqs: Vec<IrqLine>,
    /// smp_affinity of those IRQs, as read.
    pub irq_affinity: BTreeMap<u32, CpuSet>,
    pub softnet: Vec<SoftnetRow>,
    pub tcpext: BTreeMap<String, i64>,
    pub retrans_segs: i64,
    pub out_segs: i64,
    pub sockstat: SockStat,
    pub dev: Vec<IfCounters>,
    /// The counters of the namespaces the watched servers live in when not ours (a
    /// container's), each read through one of its processes' /proc/PID/net.
    pub namespaces: Vec<NetCounters>,
    /// Watched processes that still exist, by PID.
    pub procs: BTreeMap<u32, ProcSample>,
    /// fs.file-nr: allocated handles and the maximum.
    pub file_nr: Option<(u64, u64)>,
    /// Every process's name and CPU ticks, at the first and the last sample only: who else
    /// used the CPUs.
    pub census: BTreeMap<u32, (String, u64)>,
    /// At the last sample, when the sockets could fill half the ephemeral port range: the
    /// destinations holding most of this host's ephemeral ports.
    pub dest_ports: Vec<DestPorts>,
    /// /proc/pressure/cpu `some total=`: microseconds in which at least one runnable task
    /// waited for a CPU (the CPUs' saturation); None without PSI.
    pub cpu_pressure_us: Option<u64>,
    /// /proc/pressure/io `some total=`: microseconds in which at least one task waited for
    /// I/O; None without PSI.
    pub io_pressure_us: Option<u64>,
    /// At the first and the last sample: /proc/pressure/memory `some total=`, microseconds in
    /// which at least one task waited for memory (reclaim, a fault from storage); None
    /// without PSI.
    pub memory_pressure_us: Option<u64>,
    /// At the first and the last sample: /proc/vmstat's faults, direct reclaim and allocation
    /// stalls.
    pub vm: Option<parse::VmStat>,
    /// At the first and the last sample: the conntrack table, where netfilter's conntrack is
    /// loaded.
    pub conntrack: Option<parse::Conntrack>,
    /// Block devices that did any I/O (/proc/diskstats).
    pub disks: Vec<parse::DiskStat>,
    /// The interfaces' qdiscs and driver limit counters.
    pub links: crate::links::Links,
    /// At the last sample: the listeners with connections waiting in their accept queue.
    pub listen_queues: Vec<ListenQueue>,
    /// Listeners whose accept queue was at its backlog at this instant or, when sampled over
    /// a window, at any of the sampler's polls since the previous sample (every 100 ms):
    /// where a listen overflow can have happened.
    pub listen_full: Vec<qpslab_sys::netlink::Listener>,
    /// At the last sample: the processes holding the listeners any sample saw full, by
    /// listener inode (PID, comm).
    pub listen_full_holders: BTreeMap<u64, Vec<(u32, String)>>,
    /// On a live host, every TCP connection with what it lost so far (sock_diag), for the
    /// run's own share of the host's losses: at the first sample, as they were; at the last,
    /// every connection seen at any sample, as last seen (a connection closed before the end
    /// keeps its last reading).
    pub connections: Option<Vec<qpslab_sys::netlink::Connection>>,
    /// At each sample that read the connections during the window (not at its stop), TCP's
    /// account of the run's own (those of the ports [`sample_until`] was given): the
    /// server's side and the generator's.
    pub tcp: Option<TcpSides>,
}

/// The run's connections at one instant, by side: the server's (local port one of the run's)
/// and the generator's (remote port one of the run's). On loopback a connection has both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSides {
    pub server: TcpTally,
    pub client: TcpTally,
}

impl TcpSides {
    /// The sides' tallies summed over the samples after the first (the first is the window's
    /// start, before the load's requests are in flight) and before the stop (the sampler
    /// tallies none there: the load has ended); None when no sample tallied them.
    pub fn over_window(samples: &[Sample]) -> Option<TcpSides> {
        let mut a = TcpSides::default();
        let mut any = false;
        for t in samples.iter().skip(1).filter_map(|s| s.tcp.as_ref()) {
            a.server.absorb(&t.server);
            a.client.absorb(&t.client);
            any = true;
        }
        any.then_some(a)
    }
}

/// How many connections of one side were in each state TCP can wait in, at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpTally {
    pub connections: u64,
    /// Bytes received that the process has not read (it is behind its input).
    pub unread: u64,
    /// Less than a segment written and not sent while the congestion window and the peer's
    /// window had room, with a segment unacknowledged: Nagle holds a small write for an ACK.
    pub nagle_held: u64,
    /// Bytes written and not sent with the congestion window full.
    pub cwnd_full: u64,
    /// Bytes written and not sent with the peer's receive window smaller than them.
    pub rwnd_full: u64,
    /// Sums over the connections, in microseconds, of the smoothed round trip, its variation
    /// and the delayed-ACK timeout.
    pub rtt_us: u64,
    pub rttvar_us: u64,
    pub ato_us: u64,
}

impl TcpTally {
    fn add(&mut self, c: &qpslab_sys::netlink::Connection) {
        self.connections += 1;
        self.unread += u64::from(c.rqueue > 0);
        let held = c.notsent > 0;
        let cwnd_full = held && c.unacked >= c.cwnd.max(1);
        let rwnd_full = held && !cwnd_full && c.snd_wnd < c.notsent;
        self.cwnd_full += u64::from(cwnd_full);
        self.rwnd_full += u64::from(rwnd_full);
        let small = c.notsent < c.mss.max(1);
        self.nagle_held += u64::from(held && small && !cwnd_full && !rwnd_full && c.unacked > 0);
        self.rtt_us += u64::from(c.rtt_us);
        self.rttvar_us += u64::from(c.rttvar_us);
        self.ato_us += u64::from(c.ato_us);
    }

    /// Adds another instant's tally (the doctor sums them over the window).
    pub fn absorb(&mut self, o: &TcpTally) {
        self.connections += o.connections;
        self.unread += o.unread;
        self.nagle_held += o.nagle_held;
        self.cwnd_full += o.cwnd_full;
        self.rwnd_full += o.rwnd_full;
        self.rtt_us += o.rtt_us;
        self.rttvar_us += o.rttvar_us;
        self.ato_us += o.ato_us;
    }
}

/// The tally of the connections of `ports` among `all`.
pub fn tcp_sides(all: &[qpslab_sys::netlink::Connection], ports: &[u16]) -> TcpSides {
    let mut t = TcpSides::default();
    for c in all {
        if ports.contains(&c.local_port) {
            t.server.add(c);
        }
        if ports.contains(&c.remote_port) {
            t.client.add(c);
        }
    }
    t
}

/// A listener with connections waiting to be accepted, at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenQueue {
    pub local: std::net::SocketAddr,
    /// Connections in the accept queue.
    pub queued: u64,
    /// The queue's limit (the listen backlog, capped by net.core.somaxconn).
    pub backlog: u64,
    /// The processes holding the listener.
    pub holders: Vec<String>,
}

/// Sockets from this host's ephemeral ports to one destination address and port, at one
/// instant. The port budget is per destination: a source port may serve any number of
/// destinations at once, so only sockets to the same destination compete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestPorts {
    pub dest: std::net::SocketAddr,
    /// Not in TIME_WAIT: open, opening or closing.
    pub open: u64,
    pub time_wait: u64,
    /// Of `time_wait`: for under 1 s (not reusable even with tcp_tw_reuse).
    pub tw_young: u64,
    /// Of `time_wait`: closed within the window (connections made and closed during the run).
    pub tw_in_window: u64,
}

/// Destinations named in [`Sample::dest_ports`].
const DEST_PORTS_KEPT: usize = 3;

/// The destinations of sockets bound to local ports in `range`, most ports first.
pub fn dest_ports(
    sockets: &[qpslab_sys::sockets::TcpSocket],
    range: (u16, u16),
    window: Duration,
    hz: f64,
) -> Vec<DestPorts> {
    use qpslab_sys::sockets::{LISTEN, TIME_WAIT, TIME_WAIT_LEN};
    // A server's own port may lie in the range: its accepted connections are not a client's.
    let listening: BTreeSet<u16> =
        sockets.iter().filter(|s| s.state == LISTEN).map(|s| s.local.port()).collect();
    let mut by: BTreeMap<std::net::SocketAddr, DestPorts> = BTreeMap::new();
    for s in sockets {
        let port = s.local.port();
        if s.state == LISTEN
            || port < range.0
            || port > range.1
            || s.remote.port() == 0
            || listening.contains(&port)
        {
            continue;
        }
        let d = by.entry(s.remote).or_insert(DestPorts {
            dest: s.remote,
            open: 0,
            time_wait: 0,
            tw_young: 0,
            tw_in_window: 0,
        });
        if s.state == TIME_WAIT {
            let left = Duration::from_secs_f64(s.timer_left as f64 / hz.max(1.0));
            let age = TIME_WAIT_LEN.saturating_sub(left);
            d.time_wait += 1;
            d.tw_young += u64::from(age < Duration::from_secs(1));
            d.tw_in_window += u64::from(age <= window);
        } else {
            d.open += 1;
        }
    }
    let mut v: Vec<DestPorts> = by.into_values().collect();
    v.sort_by_key(|d| std::cmp::Reverse(d.open + d.time_wait));
    v.truncate(DEST_PORTS_KEPT);
    v
}

/// `net.ipv4.ip_local_port_range` under the root.
pub fn port_range(root: &Root) -> Option<(u16, u16)> {
    let t = root.read_opt("proc/sys/net/ipv4/ip_local_port_range")?;
    let mut it = t.split_ascii_whitespace().filter_map(|v| v.parse().ok());
    Some((it.next()?, it.next()?))
}

impl Sample {
    /// Reads a sample under `root`. Only /proc/stat is required.
    pub fn read(
        root: &Root,
        nic_irqs: &BTreeSet<u32>,
        watch: &[Watch],
        at: Duration,
    ) -> Result<Sample, ReadError> {
        let cpu = parse::proc_stat(&root.read("proc/stat")?);
        let softirqs =
            root.read_opt("proc/softirqs").map(|t| parse::softirqs(&t)).unwrap_or_default();
        let irqs: Vec<IrqLine> = root
            .read_opt("proc/interrupts")
            .map(|t| parse::interrupts(&t))
            .unwrap_or_default()
            .into_iter()
            .filter(|l| nic_irqs.contains(&l.irq))
            .collect();
        let irq_affinity = nic_irqs
            .iter()
            .filter_map(|irq| {
                let m = root.read_opt(&format!("proc/irq/{irq}/smp_affinity"))?;
                Some((*irq, CpuSet::parse_mask(&m).ok()?))
            })
            .collect();
        let own = NetCounters::read(root, "proc/net", String::new(), Role::Server);
        let foreign = foreign_namespaces(root, watch);
        Ok(Sample {
            at,
            cpu,
            net_rx: softirqs.get("NET_RX").cloned().unwrap_or_default(),
            net_tx: softirqs.get("NET_TX").cloned().unwrap_or_default(),
            irqs,
            irq_affinity,
            softnet: root
                .read_opt("proc/net/softnet_stat")
                .map(|t| parse::softnet_stat(&t))
                .unwrap_or_default(),
            tcpext: own.tcpext,
            retrans_segs: own.retrans_segs,
            out_segs: own.out_segs,
            sockstat: own.sockstat,
            dev: own.dev,
            namespaces: foreign
                .iter()
                .map(|f| {
                    NetCounters::read(root, &format!("proc/{}/net", f.pid), f.ns.clone(), f.role)
                })
                .collect(),
            procs: watch.iter().filter_map(|w| Some((w.pid, read_proc(root, w.pid)?))).collect(),
            file_nr: root.read_opt("proc/sys/fs/file-nr").and_then(|t| {
                let v: Vec<u64> =
                    t.split_ascii_whitespace().filter_map(|f| f.parse().ok()).collect();
                Some((*v.first()?, *v.get(2)?))
            }),
            census: BTreeMap::new(),
            dest_ports: Vec::new(),
            cpu_pressure_us: root
                .read_opt("proc/pressure/cpu")
                .and_then(|t| parse::pressure_some(&t)),
            io_pressure_us: root
                .read_opt("proc/pressure/io")
                .and_then(|t| parse::pressure_some(&t)),
            memory_pressure_us: None,
            vm: None,
            conntrack: None,
            disks: root
                .read_opt("proc/diskstats")
                .map(|t| parse::diskstats(&t))
                .unwrap_or_default(),
            links: links(root, &foreign),
            listen_queues: Vec::new(),
            listen_full: full_listeners(root, &foreign),
            listen_full_holders: BTreeMap::new(),
            connections: None,
            tcp: None,
        })
    }
}

/// The conntrack table's size, use and refusals; None where netfilter's conntrack is not
/// loaded.
fn conntrack(root: &Root) -> Option<parse::Conntrack> {
    let n = |f: &str| root.read_opt(&format!("proc/sys/net/netfilter/{f}"))?.trim().parse().ok();
    Some(parse::Conntrack {
        entries: n("nf_conntrack_count")?,
        max: n("nf_conntrack_max")?,
        dropped: root
            .read_opt("proc/net/stat/nf_conntrack")
            .map_or(0, |t| parse::conntrack_dropped(&t)),
    })
}

/// The listeners whose accept queue is at its backlog now: from sock_diag on a live host
/// (cheap however many connections are open), ours and those of the `foreign` servers'
/// namespaces ([`foreign_namespaces`]); from the socket tables of a fixture tree.
pub fn full_listeners(root: &Root, foreign: &[Foreign]) -> Vec<qpslab_sys::netlink::Listener> {
    let all = if crate::is_live(root.dir()) {
        let mut all = qpslab_sys::netlink::listeners().unwrap_or_default();
        for f in foreign.iter().filter(|f| f.role == Role::Server) {
            let theirs = qpslab_sys::netns::run_in(f.pid, qpslab_sys::netlink::listeners);
            all.extend(theirs.ok().and_then(Result::ok).into_iter().flatten());
        }
        all
    } else {
        qpslab_sys::sockets::tcp_sockets(root)
            .into_iter()
            .filter(|s| s.state == qpslab_sys::sockets::LISTEN)
            .map(|s| qpslab_sys::netlink::Listener {
                local: s.local,
                queued: s.rx_queue as u32,
                backlog: s.tx_queue as u32,
                inode: s.inode,
            })
            .collect()
    };
    all.into_iter().filter(|l| l.backlog > 0 && l.queued >= l.backlog).collect()
}

impl Sample {
    /// Reads every TCP connection's losses so far ([`Sample::connections`]), on a live host;
    /// and those of each namespace other than ours that a watched process lives in (a
    /// server in a container, a load run with `ip netns exec`: its side of the run's
    /// connections is there), dumped from a thread that joined it. A socket's cookie is the
    /// kernel's, unique across namespaces.
    pub fn take_connections(&mut self, root: &Root, watch: &[Watch]) {
        if !crate::is_live(root.dir()) {
            return;
        }
        self.connections = qpslab_sys::netlink::connections().ok();
        let Some(all) = self.connections.as_mut() else { return };
        for f in foreign_namespaces(root, watch) {
            let theirs = qpslab_sys::netns::run_in(f.pid, qpslab_sys::netlink::connections);
            all.extend(theirs.ok().and_then(Result::ok).into_iter().flatten());
        }
    }

    /// Whether a listen queue overflowed since `first`, in our namespace or a followed
    /// server's.
    pub fn listens_overflowed_since(&self, first: &Sample) -> bool {
        let moved = |a: &BTreeMap<String, i64>, b: &BTreeMap<String, i64>| {
            ["ListenOverflows", "ListenDrops"].iter().any(|k| a.get(*k) != b.get(*k))
        };
        moved(&first.tcpext, &self.tcpext)
            || self.namespaces.iter().any(|n| {
                first.namespaces.iter().any(|m| m.ns == n.ns && moved(&m.tcpext, &n.tcpext))
            })
    }

    /// Reads the socket tables for [`Sample::dest_ports`] when the sockets of the namespace
    /// could fill half the ephemeral range (reading tens of thousands of rows costs
    /// milliseconds; a quiet host is not read).
    pub fn take_port_census(&mut self, root: &Root, hz: f64) {
        let Some(range) = port_range(root) else { return };
        let size = u64::from(range.1.saturating_sub(range.0)) + 1;
        if (self.sockstat.tcp_tw + self.sockstat.tcp_inuse) * 2 < size {
            return;
        }
        let sockets = qpslab_sys::sockets::tcp_sockets(root);
        self.dest_ports = dest_ports(&sockets, range, self.at, hz);
    }

    /// Notes the listeners whose accept queue holds connections ([`Sample::listen_queues`]):
    /// connections the kernel completed that no process took.
    /// The listeners of the `foreign` servers' namespaces are read there (a live host).
    pub fn take_listen_queues(&mut self, root: &Root, foreign: &[Foreign]) {
        use qpslab_sys::sockets::{holders, LISTEN};
        let mut all = crate::tcp_sockets_in(root, 1 << LISTEN);
        if crate::is_live(root.dir()) {
            for f in foreign.iter().filter(|f| f.role == Role::Server) {
                let theirs = qpslab_sys::netns::run_in(f.pid, || {
                    qpslab_sys::netlink::tcp_sockets(1 << LISTEN)
                });
                all.extend(theirs.ok().and_then(Result::ok).into_iter().flatten());
            }
        }
        self.listen_queues = all
            .into_iter()
            .filter(|s| s.rx_queue > 0)
            .take(8)
            .map(|s| ListenQueue {
                local: s.local,
                queued: s.rx_queue,
                backlog: s.tx_queue,
                holders: holders(root, &BTreeSet::from([s.inode]))
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            })
            .collect();
    }

    /// Notes which of the processes `watch` hold the listeners `inodes`
    /// ([`Sample::listen_full_holders`]). Only they are read: every process's descriptors
    /// would be tens of thousands of links on a loaded host, and only the server's listeners
    /// make an overflow the run's.
    pub fn take_listen_full_holders(
        &mut self,
        root: &Root,
        inodes: &BTreeSet<u64>,
        watch: &[Watch],
    ) {
        if inodes.is_empty() {
            return;
        }
        for w in watch {
            let held = qpslab_sys::sockets::holders_among(root, &[w.pid], inodes);
            for (pid, inode) in held {
                let comm = root.read_opt(&format!("proc/{pid}/comm")).unwrap_or_default();
                let entry = self.listen_full_holders.entry(inode).or_default();
                entry.push((pid, comm.trim().to_string()));
            }
        }
    }

    /// Notes every process's name and CPU ticks ([`Sample::census`]).
    pub fn take_census(&mut self, root: &Root) {
        self.take_host_limits(root);
        for (pid, p) in &mut self.procs {
            p.memory_limits = qpslab_sys::memlimit::memory_limits(root, *pid);
            p.udp_drops = udp_drops(root, *pid);
        }
        self.census = root
            .pids()
            .into_iter()
            .filter_map(|pid| {
                let st = parse::task_stat(&root.read_opt(&format!("proc/{pid}/stat"))?)?;
                Some((pid, (st.comm, st.ticks)))
            })
            .collect();
    }
}

impl Sample {
    /// Reads the counters only the window's ends need (their deltas and last values): memory
    /// pressure, /proc/vmstat, the conntrack table. [`Sample::take_census`] takes them.
    fn take_host_limits(&mut self, root: &Root) {
        self.memory_pressure_us =
            root.read_opt("proc/pressure/memory").and_then(|t| parse::pressure_some(&t));
        self.vm = root.read_opt("proc/vmstat").map(|t| parse::vmstat(&t));
        self.conntrack = conntrack(root);
    }
}

/// The interfaces' qdiscs and counters, with the qdiscs of the `foreign` namespaces the
/// watched processes live in (on a live host).
fn links(root: &Root, foreign: &[Foreign]) -> crate::links::Links {
    let mut l = crate::links::read(root);
    if crate::is_live(root.dir()) {
        for f in foreign {
            l.qdiscs.extend(crate::links::namespace_qdiscs(f.pid, f.role.ns_suffix()));
        }
    }
    l
}

/// A process's threads and descriptors; None when it is gone.
fn read_proc(root: &Root, pid: u32) -> Option<ProcSample> {
    let base = format!("proc/{pid}");
    let comm = root.read_opt(&format!("{base}/comm"))?;
    let threads = root
        .list(&format!("{base}/task"))
        .iter()
        .filter_map(|tid| {
            let stat = parse::task_stat(&root.read_opt(&format!("{base}/task/{tid}/stat"))?)?;
            let status = root.read_opt(&format!("{base}/task/{tid}/status"));
            Some(ThreadSample {
                tid: tid.parse().ok()?,
                name: stat.comm,
                ticks: stat.ticks,
                cpus: status.and_then(|t| parse::cpus_allowed(&t)),
                run_delay_ns: root
                    .read_opt(&format!("{base}/task/{tid}/schedstat"))
                    .and_then(|t| t.split_ascii_whitespace().nth(1)?.parse().ok()),
                state: stat.state,
            })
        })
        .collect();
    let stat = root.read_opt(&format!("{base}/stat")).and_then(|t| parse::task_stat(&t));
    Some(ProcSample {
        pid,
        comm,
        ppid: stat.as_ref().map_or(0, |t| t.ppid),
        ticks: stat.map_or(0, |t| t.ticks),
        threads,
        open_fds: root.count(&format!("{base}/fd")),
        nofile_soft: root
            .read_opt(&format!("{base}/limits"))
            .and_then(|t| parse::max_open_files(&t)),
        allowed: root.read_opt(&format!("{base}/status")).and_then(|t| parse::cpus_allowed(&t)),
        cpu_limits: qpslab_sys::cgroup::cpu_limits(root, pid),
        io: root.read_opt(&format!("{base}/io")).and_then(|t| parse::proc_io(&t)),
        memory_limits: Vec::new(),
        udp_drops: None,
    })
}

/// Datagrams dropped on arrival at the UDP sockets `pid` holds, from its namespace's
/// /proc/PID/net/udp and udp6 (a socket's inode and its `drops`, the last column); None when
/// it holds none. Its descriptors are read only when the namespace has UDP sockets.
fn udp_drops(root: &Root, pid: u32) -> Option<u64> {
    let mut drops: BTreeMap<u64, u64> = BTreeMap::new();
    for table in ["udp", "udp6"] {
        let Some(text) = root.read_opt(&format!("proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            if let (Some(inode), Some(d)) = (f.get(9), f.get(12)) {
                if let (Ok(inode), Ok(d)) = (inode.parse(), d.parse()) {
                    drops.insert(inode, d);
                }
            }
        }
    }
    if drops.is_empty() {
        return None;
    }
    let mut held = None::<u64>;
    for fd in root.list(&format!("proc/{pid}/fd")) {
        let inode = root
            .read_link(&format!("proc/{pid}/fd/{fd}"))
            .and_then(|l| qpslab_sys::sockets::socket_inode(&l.to_string_lossy()));
        if let Some(d) = inode.and_then(|i| drops.remove(&i)) {
            *held.get_or_insert(0) += d;
        }
    }
    held
}

/// The TCP sockets in use up to which every sample reads the connections' losses (about 8 ms
/// of a CPU a sample at this count); past it only the first and the last sample do.
const CONNECTIONS_READ_EACH_SAMPLE: u64 = 4000;

/// How often the listeners are polled for a full accept queue between samples. A dump of
/// them walks the kernel's socket tables: every 20 ms it was a third of the doctor's own CPU.
const LISTEN_POLL: Duration = Duration::from_millis(100);

/// Whether the first sample read the connections (a live host with sock_diag).
fn first_read(samples: &[Sample]) -> bool {
    samples.first().is_some_and(|f| f.connections.is_some())
}

/// Samples every `interval` until `stop()` says so (checked every 20 ms), then takes a last
/// sample; at least two samples are returned. The first is taken at once.
/// `ports`: the run's (its server's and those behind it), whose connections each sample
/// tallies ([`Sample::tcp`]).
pub fn sample_until(
    root: &Root,
    nic_irqs: &BTreeSet<u32>,
    watch: &[Watch],
    ports: &[u16],
    interval: Duration,
    mut stop: impl FnMut() -> bool,
) -> Result<Vec<Sample>, ReadError> {
    let start = std::time::Instant::now();
    let foreign = foreign_namespaces(root, watch);
    let mut first = Sample::read(root, nic_irqs, watch, Duration::ZERO)?;
    first.take_census(root);
    first.take_connections(root, watch);
    let tally = |s: &mut Sample| {
        if let Some(all) = s.connections.as_ref().filter(|_| !ports.is_empty()) {
            s.tcp = Some(tcp_sides(all, ports));
        }
    };
    tally(&mut first);
    // Every connection seen so far, as last seen, by cookie.
    let mut seen: BTreeMap<u64, qpslab_sys::netlink::Connection> = BTreeMap::new();
    let mut samples = vec![first];
    let mut next = interval;
    // Listeners seen full at a poll since the last sample, by inode.
    let mut full: BTreeMap<u64, qpslab_sys::netlink::Listener> = BTreeMap::new();
    let mut next_poll = Duration::ZERO;
    loop {
        let stopping = stop();
        let now = start.elapsed();
        if now >= next_poll {
            for l in full_listeners(root, &foreign) {
                full.insert(l.inode, l);
            }
            next_poll = now + LISTEN_POLL;
        }
        if stopping || now >= next {
            let mut s = Sample::read(root, nic_irqs, watch, now)?;
            // A dump costs about 2 us a connection (40 ms at 18,000): past a few thousand
            // only the window's first and last samples read them.
            if stopping || s.sockstat.tcp_inuse <= CONNECTIONS_READ_EACH_SAMPLE {
                s.take_connections(root, watch);
            }
            // At the stop the load has ended: its connections hold what they were sent last,
            // unread, which says nothing of the run.
            if !stopping {
                tally(&mut s);
            }
            for c in s.connections.take().into_iter().flatten() {
                seen.insert(c.cookie, c);
            }
            for l in std::mem::take(&mut full).into_values() {
                if !s.listen_full.iter().any(|x| x.inode == l.inode) {
                    s.listen_full.push(l);
                }
            }
            if stopping {
                if first_read(&samples) {
                    s.connections = Some(std::mem::take(&mut seen).into_values().collect());
                }
                s.take_census(root);
                s.take_port_census(root, qpslab_sys::system::clock_ticks());
                s.take_listen_queues(root, &foreign);
                // Whose the full listeners were matters only when listens overflowed.
                let overflowed = samples.first().is_some_and(|f| s.listens_overflowed_since(f));
                let full = samples.iter().chain([&s]).flat_map(|x| &x.listen_full);
                let inodes: BTreeSet<u64> = full.map(|l| l.inode).filter(|_| overflowed).collect();
                s.take_listen_full_holders(root, &inodes, watch);
            }
            samples.push(s);
            next += interval;
            if stopping {
                return Ok(samples);
            }
        }
        std::thread::sleep(
            Duration::from_millis(20)
                .min(next.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(1)),
        );
    }
}
