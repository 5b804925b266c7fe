//! One doctor pipeline for every command that examines a run (`qpslab doctor`, `qpslab
//! bench`): read the host, follow the server's and the generator's processes, sample the
//! kernel's counters until told to stop, then summarise and diagnose. The caller only decides
//! when to stop and what else it knows about the run ([`Context`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::doctor::{diagnose, summarize, Context, Finding, Summary, JOURNAL};
use crate::host::Host;
use crate::sample::{sample_until, Role, Sample, Watch};
use qpslab_sys::root::{ReadError, Root};

/// What the doctor says about a run: the summary and the findings, worst first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Diagnosis {
    pub summary: Summary,
    pub findings: Vec<Finding>,
}

/// An examination of the host under a root, following some processes.
#[derive(Debug)]
pub struct Examination {
    root: Root,
    host: Host,
    irqs: BTreeSet<u32>,
    watch: Vec<Watch>,
    interval: Duration,
}

impl Examination {
    /// Reads the host under `root`; samples will be `interval` apart.
    pub fn new(root: &Root, interval: Duration) -> Result<Self, ReadError> {
        let host = Host::read(root)?;
        let irqs = host.nics.iter().flat_map(|n| n.irq_numbers()).collect();
        Ok(Self { root: root.clone(), host, irqs, watch: Vec::new(), interval })
    }

    /// The host as read at the start.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Follows process `pid` (all its threads) as one side of the run.
    pub fn follow(&mut self, pid: u32, role: Role) {
        if !self.watch.iter().any(|w| w.pid == pid) {
            self.watch.push(Watch { pid, role });
        }
    }

    /// The processes followed, by PID.
    pub fn followed(&self) -> BTreeMap<u32, Role> {
        self.watch.iter().map(|w| (w.pid, w.role)).collect()
    }

    /// Samples at once, then every interval until `stop()` says so (checked every 20 ms), then
    /// once more.
    pub fn record(&self, stop: impl FnMut() -> bool) -> Result<Vec<Sample>, ReadError> {
        sample_until(&self.root, &self.irqs, &self.watch, self.interval, stop)
    }

    /// Summarises the samples and applies every rule; whether a tune journal is active is
    /// read from the root.
    pub fn diagnose(&self, samples: &[Sample], mut ctx: Context) -> Diagnosis {
        let summary = summarize(samples, &self.followed(), qpslab_sys::system::clock_ticks());
        ctx.journal_active = self.root.exists(JOURNAL);
        let findings = diagnose(&self.host, samples, &summary, &ctx);
        Diagnosis { summary, findings }
    }
}
