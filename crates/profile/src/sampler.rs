//! The sampler: one `perf_event_open` event per online CPU, any process, with kernel and user
//! call chains, read from each CPU's memory-mapped ring buffer by one thread every
//! [`ProfileOptions::drain_every`]. The software `cpu-clock` event works where there is no PMU
//! (virtual machines); its samples land at `frequency_hz` per CPU, idle or not.
//!
//! Samples are counted by stack as they arrive (a run's millions of samples are a few thousand
//! stacks). A process's name and mappings are read under the root when its first sample comes
//! (and the mappings again when an address falls outside them), so its user frames can be
//! symbolized at the end from its files, even if it exited. Samples the kernel dropped because
//! a ring was full arrive as lost-records and are counted, never hidden.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use perf_event::data::Record;
use perf_event::events::{Event, Hardware, Software};
use perf_event::{Builder, SampleFlag, Sampler as Ring};
use qpslab_sys::root::Root;

use crate::maps::{self, Mapping};

/// How to sample.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfileOptions {
    /// Samples per second per CPU.
    pub frequency_hz: u64,
    /// Each CPU's ring buffer, in pages (a power of two; 32 pages hold about a second of
    /// samples at 499 Hz with deep stacks).
    pub ring_pages: usize,
    /// How often the rings are read.
    pub drain_every: Duration,
    /// Keep the folded stacks (`comm;frame;...;frame count`) for `--profile-out`.
    pub folded: bool,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            frequency_hz: 499,
            ring_pages: 32,
            drain_every: Duration::from_millis(100),
            folded: false,
        }
    }
}

/// Why there is no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// Not allowed: the message says why and what would allow it.
    #[error("{0}")]
    Permission(String),
    #[error("{0}")]
    Other(String),
}

/// One call chain: its CPU, task, and frames (leaf first).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stack {
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub kernel: Vec<u64>,
    pub user: Vec<u64>,
}

/// A process seen in the samples.
#[derive(Debug, Clone, Default)]
pub struct Process {
    pub comm: String,
    pub maps: Vec<Mapping>,
    /// The drain pass its mappings were last read in (at most once a pass: frames unwound
    /// without frame pointers may hold addresses no mapping has).
    read_in: u64,
}

/// What the sampler gathered.
#[derive(Debug, Clone, Default)]
pub struct RawProfile {
    pub frequency_hz: u64,
    pub cpus: Vec<usize>,
    pub duration: Duration,
    /// Samples by stack.
    pub stacks: HashMap<Stack, u64>,
    pub samples: u64,
    /// `cycles` (the PMU) or `cpu-clock` (no PMU, as in most VMs).
    pub event: &'static str,
    /// Samples the kernel could not write (a full ring).
    pub lost: u64,
    /// Times the kernel throttled the event (too many samples per second).
    pub throttled: u64,
    /// CPU time of the thread that read the rings (the sampling interrupts themselves are
    /// not in it).
    pub reader_cpu: Duration,
    pub processes: HashMap<u32, Process>,
    /// Thread names, by thread ID.
    pub threads: HashMap<u32, String>,
}

/// Sampling in progress.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<RawProfile>,
}

/// perf's markers between the parts of a call chain (`PERF_CONTEXT_*`, as u64).
const CONTEXT_KERNEL: u64 = -128_i64 as u64;
const CONTEXT_USER: u64 = -512_i64 as u64;
const CONTEXT_MAX: u64 = -4095_i64 as u64;

/// Splits a call chain into its kernel and user frames (each leaf first).
pub fn split_chain(chain: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let (mut kernel, mut user) = (Vec::new(), Vec::new());
    let mut in_user = false;
    for &ip in chain {
        match ip {
            CONTEXT_KERNEL => in_user = false,
            CONTEXT_USER => in_user = true,
            // Hypervisor and guest contexts: not ours to symbolize.
            x if x >= CONTEXT_MAX => in_user = false,
            _ if in_user => user.push(ip),
            _ => kernel.push(ip),
        }
    }
    (kernel, user)
}

impl Sampler {
    /// Opens an event on each of `cpus` (all of them, or an error: a permission error says
    /// what would allow it) and starts reading them. The event is the PMU's `cycles` where
    /// there is one, else the software `cpu-clock` (which also samples idle CPUs).
    pub fn start(root: &Root, cpus: &[usize], o: &ProfileOptions) -> Result<Sampler, ProfileError> {
        let (event, rings) = match open_all(Hardware::CPU_CYCLES, cpus, o) {
            Ok(rings) => ("cycles", rings),
            // No PMU (ENOENT, ENODEV, EOPNOTSUPP): the software clock.
            Err((_, e)) if matches!(e.raw_os_error(), Some(2 | 19 | 95)) => {
                let rings = open_all(Software::CPU_CLOCK, cpus, o)
                    .map_err(|(cpu, e)| open_error(root, cpu, &e))?;
                ("cpu-clock", rings)
            }
            Err((cpu, e)) => return Err(open_error(root, cpu, &e)),
        };
        let mut rings = rings;
        for r in &mut rings {
            r.enable().map_err(|e| ProfileError::Other(format!("enabling the sampler: {e}")))?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut raw = RawProfile {
            frequency_hz: o.frequency_hz,
            cpus: cpus.to_vec(),
            event,
            ..RawProfile::default()
        };
        let (root, every) = (root.clone(), o.drain_every);
        let thread = std::thread::Builder::new()
            .name("qpslab-profile".into())
            .spawn(move || {
                let began = Instant::now();
                let cpu0 = qpslab_sys::thread::CpuTime::of_current_thread();
                let mut reader = Reader { root, raw: &mut raw, pass: 0 };
                while !flag.load(Ordering::Relaxed) {
                    let next = Instant::now() + every;
                    while Instant::now() < next && !flag.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20).min(every));
                    }
                    reader.pass += 1;
                    for r in &mut rings {
                        reader.drain(r);
                    }
                }
                reader.pass += 1;
                for r in &mut rings {
                    let _ = r.disable();
                    reader.drain(r);
                }
                raw.duration = began.elapsed();
                raw.reader_cpu =
                    qpslab_sys::thread::CpuTime::of_current_thread().since(cpu0).total();
                raw
            })
            .map_err(|e| ProfileError::Other(format!("cannot start the sampling thread: {e}")))?;
        Ok(Sampler { stop, thread })
    }

    /// Stops sampling and returns what was gathered.
    pub fn stop(self) -> RawProfile {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One sampling event per CPU, or the CPU whose event could not be opened and why.
fn open_all<E: Event + Clone>(
    event: E,
    cpus: &[usize],
    o: &ProfileOptions,
) -> Result<Vec<Ring>, (usize, std::io::Error)> {
    let mut rings = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let ring = Builder::new(event.clone())
            .one_cpu(cpu)
            .any_pid()
            .sample_frequency(o.frequency_hz)
            .sample(
                SampleFlag::IP
                    | SampleFlag::TID
                    | SampleFlag::TIME
                    | SampleFlag::CPU
                    | SampleFlag::CALLCHAIN,
            )
            .include_kernel()
            .exclude_hv(true)
            .build()
            .and_then(|c| c.sampled(o.ring_pages.max(1) * 4096))
            .map_err(|e| (cpu, e))?;
        rings.push(ring);
    }
    Ok(rings)
}

/// perf_event_open refused: say why, and what would allow it.
fn open_error(root: &Root, cpu: usize, e: &std::io::Error) -> ProfileError {
    let denied = matches!(e.raw_os_error(), Some(1 | 13));
    if !denied {
        return ProfileError::Other(format!("perf_event_open on CPU {cpu}: {e}"));
    }
    let paranoid = root
        .read_opt("proc/sys/kernel/perf_event_paranoid")
        .map_or("unknown".to_string(), |v| v.trim().to_string());
    ProfileError::Permission(format!(
        "perf_event_open on CPU {cpu}: {e}; kernel.perf_event_paranoid is {paranoid}: sampling \
         every CPU needs root, CAP_PERFMON (or CAP_SYS_ADMIN), or perf_event_paranoid <= 0"
    ))
}

/// Turns records into counts.
struct Reader<'a> {
    root: Root,
    raw: &'a mut RawProfile,
    pass: u64,
}

impl Reader<'_> {
    fn drain(&mut self, ring: &mut Ring) {
        while let Some(record) = ring.next_record() {
            match record.parse_record() {
                Ok(Record::Sample(s)) => {
                    let (Some(pid), Some(tid), Some(cpu)) = (s.pid(), s.tid(), s.cpu()) else {
                        continue;
                    };
                    let (kernel, user) = match s.callchain() {
                        Some(chain) => split_chain(chain),
                        None => (s.ip().into_iter().collect(), Vec::new()),
                    };
                    self.note_task(pid, tid, &user);
                    *self.raw.stacks.entry(Stack { cpu, pid, tid, kernel, user }).or_insert(0) += 1;
                    self.raw.samples += 1;
                }
                Ok(Record::Lost(l)) => self.raw.lost += l.lost,
                Ok(Record::LostSamples(l)) => self.raw.lost += l.lost,
                Ok(Record::Throttle(_)) => self.raw.throttled += 1,
                _ => {}
            }
        }
    }

    /// Reads a new task's names, and its process's mappings when an address is not in them.
    fn note_task(&mut self, pid: u32, tid: u32, user: &[u64]) {
        if pid == 0 {
            return;
        }
        if !self.raw.threads.contains_key(&tid) {
            let comm = self.root.read_opt(&format!("proc/{pid}/task/{tid}/comm"));
            self.raw.threads.insert(tid, comm.map(|c| c.trim().to_string()).unwrap_or_default());
        }
        let root = &self.root;
        let p = self.raw.processes.entry(pid).or_insert_with(|| Process {
            comm: root
                .read_opt(&format!("proc/{pid}/comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_default(),
            maps: Vec::new(),
            read_in: 0,
        });
        if p.read_in == self.pass {
            return;
        }
        let unmapped = user.iter().any(|&a| !p.maps.iter().any(|m| m.start <= a && a < m.end));
        if unmapped {
            p.read_in = self.pass;
            // An exited process (a zombie not reaped yet) has an empty maps file: keep what
            // was read while it ran.
            let fresh = root.read_opt(&format!("proc/{pid}/maps")).map(|t| maps::parse(&t));
            if let Some(m) = fresh.filter(|m| !m.is_empty()) {
                p.maps = m;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    /// A process that exits (a zombie until its parent reaps it) reads as empty mappings; a late
    /// sample of it must not wipe the ones read while it ran (its user frames were all
    /// `[unknown]` when the load under `doctor -- qpslab load` exited).
    #[test]
    fn mappings_read_while_a_process_ran_survive_its_exit() {
        let dir = std::env::temp_dir().join(format!("qpslab-maps-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/42")).unwrap();
        let maps = dir.join("proc/42/maps");
        std::fs::write(&maps, "5600-5700 r-xp 00001000 fe:01 9 /usr/bin/load\n").unwrap();
        std::fs::write(dir.join("proc/42/comm"), "load\n").unwrap();
        let mut raw = RawProfile::default();
        let mut r = Reader { root: Root::new(&dir), raw: &mut raw, pass: 1 };
        r.note_task(42, 42, &[0x5610]);
        std::fs::write(&maps, "").unwrap();
        r.pass = 2;
        r.note_task(42, 42, &[0x9999]);
        let p = &raw.processes[&42];
        assert_eq!(p.comm, "load");
        assert_eq!(crate::maps::locate(&p.maps, 0x5610), Some(("/usr/bin/load", 0x1010)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_chain_splits_at_perfs_context_markers() {
        let chain = [
            CONTEXT_KERNEL,
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0020,
            CONTEXT_USER,
            0x5555_0000_1000,
            0x5555_0000_2000,
        ];
        let (k, u) = split_chain(&chain);
        assert_eq!(k, [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020]);
        assert_eq!(u, [0x5555_0000_1000, 0x5555_0000_2000]);
        let (k, u) = split_chain(&[CONTEXT_USER, 0x4000]);
        assert!(k.is_empty());
        assert_eq!(u, [0x4000]);
    }
}
