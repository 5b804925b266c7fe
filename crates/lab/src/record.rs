//! What the store keeps of a run: the figures `runs`, `compare` and `report` read ([`RunFacts`]),
//! taken from a bench or a load report, and the run's provenance (version, command, kernel, CPU
//! model, the host's topology, NIC queues and sysctls, and the tune state in force).

use qpslab_doctor::Severity;
use qpslab_host::{Host, Root};
use qpslab_load::Report;
use qpslab_tune::{self as tune, RootFiles};
use serde::Serialize;

use crate::bench::{BenchOptions, BenchReport};
use crate::settings::BenchSettings;
use qpslab_runs::store::{
    CpuCategories, CpuSeries, FindingFact, NewRun, Percentiles, QuicFacts, RunFacts, Store,
    StoreError,
};

/// The figures of a bench.
pub fn bench_facts(r: &BenchReport) -> RunFacts {
    let target =
        if r.target.kind == "url" { r.target.url.clone() } else { r.target.kind.to_string() };
    let cpu = &r.doctor.summary.intervals;
    RunFacts {
        target,
        server_cpu: r.server_cpu,
        generator_cpu: Some(r.generator_cpu),
        requests_per_server_cpu_s: r.requests_per_server_cpu_s,
        cpu: CpuSeries {
            cpus: cpu.first().map(|i| i.cpus.clone()).unwrap_or_default(),
            t_s: cpu.iter().map(|i| i.t_s).collect(),
            user: cpu.iter().map(|i| i.user.clone()).collect(),
            system: cpu.iter().map(|i| i.system.clone()).collect(),
            softirq: cpu.iter().map(|i| i.softirq.clone()).collect(),
            idle: cpu.iter().map(|i| i.cpu_busy.iter().map(|b| 1.0 - b).collect()).collect(),
        },
        findings: r
            .doctor
            .findings
            .iter()
            .map(|f| FindingFact {
                name: f.name.to_string(),
                severity: severity_name(f.severity).to_string(),
                summary: f.summary.clone(),
                evidence: f.evidence.clone(),
                remedy: f.remedy.clone(),
            })
            .collect(),
        profile: r
            .doctor
            .profile
            .iter()
            .flat_map(|p| &p.cpus)
            .map(|c| CpuCategories {
                cpu: c.cpu,
                samples: c.samples,
                shares: c.categories.iter().map(|s| (s.name.clone(), s.share)).collect(),
            })
            .collect(),
        ..load_facts(&r.load)
    }
}

/// The figures of a load run (no doctor: no CPU figures, no findings).
pub fn load_facts(l: &Report) -> RunFacts {
    let lat = &l.latency_us;
    RunFacts {
        target: l.targets.join(" "),
        duration_s: l.duration_s,
        throughput_rps: l.throughput_rps,
        ok: l.requests.ok,
        failed: l.requests.failed,
        latency_us: Percentiles {
            p50: lat.p50,
            p90: lat.p90,
            p99: lat.p99,
            p999: lat.p999,
            max: lat.max,
        },
        rps: l.intervals.iter().map(|i| i.rps).collect(),
        errors: l.intervals.iter().map(|i| i.failed).collect(),
        quic: l.h3.as_ref().map(|h| QuicFacts {
            datagrams_per_send_call: h.datagrams_per_send_call,
            datagrams_per_recv_call: h.datagrams_per_recv_call,
            lost_packets: h.lost_packets,
            packet_loss: if h.datagrams_out == 0 {
                0.0
            } else {
                h.lost_packets as f64 / h.datagrams_out as f64
            },
        }),
        grpc: l.grpc.as_ref().map(|g| g.status.clone()),
        ..RunFacts::default()
    }
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

/// Where a run came from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Provenance {
    /// qpslab's version and git commit.
    pub version: String,
    pub command: Vec<String>,
    pub kernel: String,
    pub cpu_model: String,
    /// The host as `qpslab host --json` reads it: topology, NICs and their queues (RPS/XPS
    /// masks, IRQs and their CPUs), clocksource, the sysctls that matter.
    pub host: Option<Host>,
    /// The tune journal in force (what was changed and whether it still holds), if any.
    pub tune: Option<tune::apply::Status>,
    /// What the sweep's variant asked of the host, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tune_asked: Option<serde_json::Value>,
    /// The server host (`server`), read there as `host` above is here, with the variant's
    /// settings in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_host: Option<serde_json::Value>,
}

impl Provenance {
    /// Reads the host now (call it while the run's settings are in force).
    pub fn read(meta: &qpslab_load::report::RunMeta, journal: Option<&std::path::Path>) -> Self {
        let root = Root::live();
        let journal = tune::journal_path(&root, journal);
        Provenance {
            version: meta.version.clone(),
            command: meta.command.clone(),
            kernel: meta.host.kernel.clone(),
            cpu_model: meta.host.cpu_model.clone(),
            host: Host::read(&root).ok(),
            tune: tune::status(&mut RootFiles(root), &journal).ok().flatten(),
            tune_asked: None,
            server_host: None,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Where a bench run belongs in a sweep.
#[derive(Debug, Clone, Copy)]
pub struct InSweep<'a> {
    pub sweep: i64,
    pub variant: &'a str,
    pub repeat: u32,
}

/// Stores a bench run (in a transaction of its own); returns its id.
pub fn store_bench(
    store: &mut Store,
    opts: &BenchOptions,
    report: &BenchReport,
    in_sweep: Option<InSweep<'_>>,
    label: Option<&str>,
    provenance: &Provenance,
) -> Result<i64, StoreError> {
    let config = serde_json::to_value(BenchSettings::of_options(opts)).unwrap_or_default();
    store.insert_run(&NewRun {
        kind: "bench",
        sweep: in_sweep.map(|s| s.sweep),
        variant: in_sweep.map(|s| s.variant),
        repeat: in_sweep.map(|s| s.repeat),
        label,
        started_at: &report.load.started_at,
        config: &config,
        facts: &bench_facts(report),
        report: &serde_json::to_value(report).unwrap_or_default(),
        text: &crate::render_text(report),
        histogram: &report.load.latency_hdr,
        provenance: &provenance.to_json(),
    })
}

/// Stores a load run; returns its id.
pub fn store_load(
    store: &mut Store,
    report: &Report,
    text: &str,
    label: Option<&str>,
    provenance: &Provenance,
) -> Result<i64, StoreError> {
    store.insert_run(&NewRun {
        kind: "load",
        sweep: None,
        variant: None,
        repeat: None,
        label,
        started_at: &report.started_at,
        config: &serde_json::to_value(&report.config).unwrap_or_default(),
        facts: &load_facts(report),
        report: &serde_json::to_value(report).unwrap_or_default(),
        text,
        histogram: &report.latency_hdr,
        provenance: &provenance.to_json(),
    })
}
