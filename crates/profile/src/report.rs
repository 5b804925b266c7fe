//! A profile as reports show it: for each CPU, the share of its samples in each category, its
//! share in the receive softirq, its top kernel and user symbols (self time: the leaf frame);
//! for each process that mattered (the followed server and generator, ksoftirqd, anything
//! above half a percent), the same; and the folded stacks flame-graph tools read.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::category::{self, Category};
use crate::sampler::RawProfile;
use crate::symbols::Symbols;

/// Top symbols kept per CPU or process.
const TOP: usize = 10;
/// A process below this share of all samples is left out unless it is followed.
const MIN_PROCESS_SHARE: f64 = 0.005;

/// Samples of one kind, and their share of the whole they belong to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub name: String,
    pub samples: u64,
    pub share: f64,
}

/// One CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuProfile {
    pub cpu: usize,
    pub samples: u64,
    /// Every category with samples, largest first (shares add up to 1).
    pub categories: Vec<Share>,
    /// Samples inside the NET_RX softirq, whatever their category.
    pub net_rx_share: f64,
    /// Leaf kernel symbols.
    pub top_kernel: Vec<Share>,
    /// Leaf user symbols, as `comm symbol`.
    pub top_user: Vec<Share>,
    /// Samples spinning on a lock under a socket wake-up (a spinlock leaf with a wake-up
    /// above it), whatever else: the write-up's `perf top` signature.
    pub wakeup_lock_share: f64,
    /// The commonest stacks of its spinlock-under-wake-up samples, leaf first
    /// (`_raw_spin_unlock_irqrestore <- __wake_up_sync_key <- sock_def_readable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakeup_lock_stacks: Vec<Share>,
}

/// One process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessProfile {
    pub pid: u32,
    pub comm: String,
    /// `server` or `generator` (followed), `ksoftirqd`, `idle` (the idle task), or `other`.
    pub role: String,
    pub samples: u64,
    /// Its share of all samples.
    pub share: f64,
    pub categories: Vec<Share>,
    pub top_kernel: Vec<Share>,
    pub top_user: Vec<Share>,
}

/// A stack as flame-graph tools read it: `comm;root;...;leaf`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Folded {
    pub stack: String,
    pub samples: u64,
}

/// The profile of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// False when there is no profile; `reason` says why.
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub event: String,
    pub frequency_hz: u64,
    pub duration_s: f64,
    pub samples: u64,
    /// Samples the kernel dropped (a ring buffer full): the shares are of what arrived.
    pub lost: u64,
    pub throttled: u64,
    /// CPU seconds the profiler's reading thread used.
    #[serde(default)]
    pub reader_cpu_s: f64,
    pub cpus: Vec<CpuProfile>,
    pub processes: Vec<ProcessProfile>,
    /// Only when asked for (`--profile-out`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded: Vec<Folded>,
}

impl Profile {
    /// No profile, and why.
    pub fn unavailable(reason: impl Into<String>) -> Profile {
        Profile { reason: Some(reason.into()), event: "cpu-clock".into(), ..Profile::default() }
    }

    /// The profile of `raw`, with its frames named by `symbols`; `roles` names the followed
    /// processes (`server`, `generator`); `folded` keeps the folded stacks.
    pub fn build(
        raw: &RawProfile,
        symbols: &Symbols,
        roles: &HashMap<u32, &str>,
        folded: bool,
    ) -> Profile {
        let mut cpus: BTreeMap<usize, Tally> =
            raw.cpus.iter().map(|&c| (c, Tally::default())).collect();
        let mut procs: HashMap<u32, Tally> = HashMap::new();
        let mut stacks: HashMap<String, u64> = HashMap::new();
        for (s, &n) in &raw.stacks {
            let kernel: Vec<&str> = s.kernel.iter().map(|&a| symbols.kernel(a)).collect();
            let user: Vec<&str> = s.user.iter().map(|&a| symbols.user(s.pid, a)).collect();
            let cat = category::classify(&kernel, user.first().copied());
            let comm = comm(raw, s.pid);
            let user_leaf = user.first().map(|u| format!("{comm} {u}"));
            let seen = Seen { n, cat, kernel: &kernel, user_leaf: user_leaf.as_deref() };
            cpus.entry(s.cpu as usize).or_default().add(&seen);
            procs.entry(s.pid).or_default().add(&seen);
            if folded {
                let mut frames = vec![comm.to_string()];
                frames.extend(user.iter().rev().map(|f| f.to_string()));
                frames.extend(kernel.iter().rev().map(|f| f.to_string()));
                *stacks.entry(frames.join(";")).or_insert(0) += n;
            }
        }
        let total = raw.samples.max(1) as f64;
        let mut processes: Vec<ProcessProfile> = procs
            .into_iter()
            .map(|(pid, t)| {
                let role = match roles.get(&pid) {
                    Some(r) => r.to_string(),
                    None if pid == 0 => "idle".into(),
                    None if comm(raw, pid).starts_with("ksoftirqd/") => "ksoftirqd".into(),
                    None => "other".into(),
                };
                ProcessProfile {
                    pid,
                    comm: comm(raw, pid).to_string(),
                    role,
                    samples: t.samples,
                    share: t.samples as f64 / total,
                    categories: t.categories(),
                    top_kernel: t.top(&t.kernel_leaf),
                    top_user: t.top(&t.user_leaf),
                }
            })
            .filter(|p| p.share >= MIN_PROCESS_SHARE || roles.contains_key(&p.pid))
            .collect();
        processes.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
        let mut folded: Vec<Folded> =
            stacks.into_iter().map(|(stack, samples)| Folded { stack, samples }).collect();
        folded.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.stack.cmp(&b.stack)));
        Profile {
            available: true,
            reason: None,
            event: raw.event.into(),
            frequency_hz: raw.frequency_hz,
            duration_s: raw.duration.as_secs_f64(),
            samples: raw.samples,
            lost: raw.lost,
            throttled: raw.throttled,
            reader_cpu_s: raw.reader_cpu.as_secs_f64(),
            cpus: cpus
                .into_iter()
                .map(|(cpu, t)| CpuProfile {
                    cpu,
                    samples: t.samples,
                    categories: t.categories(),
                    net_rx_share: t.net_rx as f64 / t.samples.max(1) as f64,
                    wakeup_lock_share: t.share(t.wakeup_lock.values().sum()),
                    top_kernel: t.top(&t.kernel_leaf),
                    top_user: t.top(&t.user_leaf),
                    wakeup_lock_stacks: t.top(&t.wakeup_lock).into_iter().take(3).collect(),
                })
                .collect(),
            processes,
            folded,
        }
    }

    /// The share of `cpu`'s samples in `c` (0 when the CPU or the category has none).
    pub fn cpu_share(&self, cpu: usize, c: Category) -> f64 {
        self.cpus
            .iter()
            .find(|p| p.cpu == cpu)
            .and_then(|p| p.categories.iter().find(|s| s.name == c.name()))
            .map_or(0.0, |s| s.share)
    }

    /// The processes with this role (`server`, `generator`).
    pub fn with_role<'a>(&'a self, role: &'a str) -> impl Iterator<Item = &'a ProcessProfile> + 'a {
        self.processes.iter().filter(move |p| p.role == role)
    }

    /// The folded stacks, one `stack count` line each.
    pub fn folded_text(&self) -> String {
        let mut out = String::new();
        for f in &self.folded {
            let _ = writeln!(out, "{} {}", f.stack, f.samples);
        }
        out
    }

    /// The text: the category table of every CPU, then the top symbols of `detail` (the
    /// saturated CPUs) and of the followed processes.
    pub fn render_text(&self, detail: &[usize]) -> String {
        let mut o = String::new();
        let Some(cpus) = self.available.then_some(&self.cpus) else {
            let _ =
                writeln!(o, "profile: none ({})", self.reason.as_deref().unwrap_or("not taken"));
            return o;
        };
        let _ = writeln!(
            o,
            "profile: {} at {} Hz on {} CPU(s), {} samples in {:.1} s, {} lost{}",
            self.event,
            self.frequency_hz,
            cpus.len(),
            self.samples,
            self.duration_s,
            self.lost,
            if self.throttled > 0 {
                format!(", throttled {} time(s)", self.throttled)
            } else {
                String::new()
            }
        );
        let _ = write!(o, "  {:>4} {:>8}", "CPU", "samples");
        for c in Category::ALL {
            let _ = write!(o, " {:>8}", short(c));
        }
        let _ = writeln!(o, " {:>8}", "in-netrx");
        for c in cpus {
            let _ = write!(o, "  {:>4} {:>8}", c.cpu, c.samples);
            for cat in Category::ALL {
                let _ = write!(o, " {:>8}", pct(self.cpu_share(c.cpu, cat)));
            }
            let _ = writeln!(o, " {:>8}", pct(c.net_rx_share));
        }
        for c in cpus.iter().filter(|c| detail.contains(&c.cpu)) {
            let _ = writeln!(o, "  CPU {} kernel: {}", c.cpu, list(&c.top_kernel, 5));
            if !c.top_user.is_empty() {
                let _ = writeln!(o, "  CPU {} user:   {}", c.cpu, list(&c.top_user, 5));
            }
        }
        for p in self.processes.iter().filter(|p| p.role == "server" || p.role == "generator") {
            let _ = writeln!(
                o,
                "  {} {} (pid {}), {} of all samples: {}",
                p.role,
                p.comm,
                p.pid,
                pct(p.share),
                list(&p.categories, 4)
            );
        }
        o
    }
}

/// Column heads of the category table.
fn short(c: Category) -> &'static str {
    match c {
        Category::SoftirqNetRx => "net-rx",
        Category::TcpReceive => "tcp-rx",
        Category::TcpTransmit => "tcp-tx",
        Category::Syscall => "syscall",
        Category::Epoll => "epoll",
        Category::WakeupLock => "wake+lk",
        Category::Scheduler => "sched",
        Category::Idle => "idle",
        Category::Clock => "clock",
        Category::Copy => "copy",
        Category::Connection => "conn",
        Category::User => "user",
        Category::OtherKernel => "other",
    }
}

fn pct(x: f64) -> String {
    if x == 0.0 {
        "-".into()
    } else {
        format!("{:.1}%", x * 100.0)
    }
}

fn list(shares: &[Share], n: usize) -> String {
    let items: Vec<String> =
        shares.iter().take(n).map(|s| format!("{} {}", s.name, pct(s.share))).collect();
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

fn comm(raw: &RawProfile, pid: u32) -> &str {
    match raw.processes.get(&pid) {
        _ if pid == 0 => "swapper",
        Some(p) if !p.comm.is_empty() => &p.comm,
        _ => "[exited]",
    }
}

/// One stack's samples as a tally sees them.
struct Seen<'a> {
    n: u64,
    cat: Category,
    kernel: &'a [&'a str],
    user_leaf: Option<&'a str>,
}

/// Counts for one CPU or process.
#[derive(Default)]
struct Tally {
    samples: u64,
    net_rx: u64,
    by_category: BTreeMap<Category, u64>,
    kernel_leaf: HashMap<String, u64>,
    user_leaf: HashMap<String, u64>,
    wakeup_lock: HashMap<String, u64>,
}

impl Tally {
    fn add(&mut self, s: &Seen<'_>) {
        self.samples += s.n;
        *self.by_category.entry(s.cat).or_insert(0) += s.n;
        if category::in_net_rx(s.kernel) {
            self.net_rx += s.n;
        }
        match (s.kernel.first(), s.user_leaf) {
            (Some(k), _) => *self.kernel_leaf.entry((*k).to_string()).or_insert(0) += s.n,
            (None, Some(u)) => *self.user_leaf.entry(u.to_string()).or_insert(0) += s.n,
            (None, None) => {}
        }
        if category::is_wakeup_lock(s.kernel) {
            let chain: Vec<&str> = s.kernel.iter().take(4).copied().collect();
            *self.wakeup_lock.entry(chain.join(" <- ")).or_insert(0) += s.n;
        }
    }

    fn categories(&self) -> Vec<Share> {
        let mut v: Vec<Share> = self
            .by_category
            .iter()
            .map(|(c, &n)| Share { name: c.name().into(), samples: n, share: self.share(n) })
            .collect();
        v.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
        v
    }

    fn top(&self, counts: &HashMap<String, u64>) -> Vec<Share> {
        let mut v: Vec<Share> = counts
            .iter()
            .map(|(name, &n)| Share { name: name.clone(), samples: n, share: self.share(n) })
            .collect();
        v.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
        v.truncate(TOP);
        v
    }

    fn share(&self, n: u64) -> f64 {
        n as f64 / self.samples.max(1) as f64
    }
}
