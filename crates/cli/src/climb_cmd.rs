//! `qpslab climb`: the tuning walk from bench's starting options, with the sweep's progress
//! line; prints the steps as a table (or JSON) and where the runs are stored.

use qpslab_lab::climb::{self, ClimbError, ClimbOptions};
use qpslab_lab::{render_text as bench_text, BenchError};
use qpslab_live::RunInfo;
use qpslab_load::feed::Feed;
use qpslab_runs::select::Selector;

use crate::args::ClimbArgs;
use crate::sweep_cmd::Line;
use crate::{bench_cmd, live_cmd, output, store_cmd, Outcome, UsageError};

pub fn run(a: ClimbArgs) -> anyhow::Result<Outcome> {
    let b = &a.bench;
    if b.profile.profile_out.is_some() {
        return Err(UsageError(
            "--profile-out: a climb runs many benches; profile one with qpslab bench".into(),
        )
        .into());
    }
    let mut start = bench_cmd::options(b)?;
    let server_config = server_config(&a, &mut start)?;
    let o = ClimbOptions {
        start,
        budget: a.budget,
        min_gain: a.min_gain,
        repeats: u32::try_from(a.repeats)
            .map_err(|_| UsageError(format!("--repeats {}: too many", a.repeats)))?,
        max_steps: a.steps,
        label: b.label.clone(),
        apply_server: a.apply_server,
        allow_limits: a.allow_limits,
        apply_host: a.apply_host,
        keep: a.keep,
        journal: a.journal.clone(),
        server_config,
    };
    if let Some(f) = &a.state_file {
        // Before the climb: a file it cannot write must not cost the climb's work.
        std::fs::OpenOptions::new().append(true).create(true).open(f).map_err(|e| {
            UsageError(format!(
                "--state-file {}: cannot write it ({e}); name a writable file",
                f.display()
            ))
        })?;
    }
    if let Some(d) = &a.state_dir {
        std::fs::create_dir_all(d).map_err(|e| {
            UsageError(format!(
                "--state-dir {}: cannot make it ({e}); name a directory you can write",
                d.display()
            ))
        })?;
    }
    let stop = qpslab_sys::signals::stop_flag()?;
    if a.dry_run {
        return dry_run(&o, b.json, stop);
    }
    let mut store = if b.no_save { None } else { Some(store_cmd::open(&b.store)?) };
    let live = live_cmd::start(
        &b.live,
        RunInfo::new("climb", std::slice::from_ref(&o.start.target), false),
    )?;
    let mut line = Line::new();
    let result = {
        let mut tee = live.as_ref().map(|l| l.tee(&mut line));
        let feed: &mut dyn Feed = match &mut tee {
            Some(t) => t,
            None => &mut line,
        };
        climb::climb(&o, store.as_mut(), stop, feed)
    };
    line.clear();
    let c = result.map_err(error)?;
    output::emit(b.json, &c, || text(&c, &a, store.as_ref()))?;
    if let Some(f) = &a.state_file {
        std::fs::write(f, climb::state_file(&c))
            .map_err(|e| anyhow::anyhow!("--state-file {}: cannot write it: {e}", f.display()))?;
    }
    if let Some(d) = &a.state_dir {
        for (name, text) in climb::state_files(&c) {
            let f = d.join(name);
            std::fs::write(&f, text)
                .map_err(|e| anyhow::anyhow!("--state-dir: cannot write {}: {e}", f.display()))?;
        }
    }
    let html = live.as_ref().and_then(|l| l.url()).and_then(|_| {
        let (s, id) = (store.as_ref()?, c.sweep?);
        live_cmd::report_of(s, &Selector::Sweep(id), "qpslab climb".into())
    });
    let summary = format!(
        "climb: {:.0} -> {:.0} ok req/s in {} step(s); {}",
        c.start_rps,
        c.final_rps,
        c.steps.len(),
        c.ended
    );
    // A signal, or a run that fails (the climb stops at it): the climb did not complete.
    let failed = c.ended.starts_with("stopped") || c.steps.iter().any(|s| s.verdict == "stopped");
    live_cmd::finish(live, !failed, summary, html);
    Ok(if failed { Outcome::ChecksFailed } else { Outcome::Passed })
}

/// `--server-config TEMPLATE:FILE` with `--server-reload CMD`: the user's server in the climb's
/// hands, starting from `-w` workers (taken from the options: bench starts no server here).
fn server_config(
    a: &ClimbArgs,
    start: &mut qpslab_lab::BenchOptions,
) -> anyhow::Result<Option<climb::ServerConfig>> {
    let (Some(tf), Some(reload)) = (&a.server_config, &a.server_reload) else {
        return Ok(None);
    };
    let (t, f) = tf.split_once(':').filter(|(t, f)| !t.is_empty() && !f.is_empty()).ok_or_else(|| {
        UsageError(format!(
            "--server-config {tf:?}: give TEMPLATE:FILE, the template and the server's configuration file it is written to"
        ))
    })?;
    if a.bench.url.is_none() {
        return Err(UsageError(
            "--server-config is for your own server: give its URL (bench starts the built-in server or nginx otherwise)".into(),
        )
        .into());
    }
    // -w is the template's starting workers here, not a server bench starts.
    let workers = start.workers.take().unwrap_or(1);
    Ok(Some(climb::ServerConfig {
        template: t.into(),
        file: f.into(),
        reload: reload.clone(),
        workers,
        threads: a.server_threads,
        nofile: a.server_nofile.map(|n| n as u64),
    }))
}

/// The climb's table, and where its kept settings and runs are.
fn text(c: &climb::Climb, a: &ClimbArgs, store: Option<&qpslab_runs::store::Store>) -> String {
    let mut t = climb::render_text(c);
    let host_kept = c.plan.iter().any(|p| p.starts_with("host: "));
    match &a.state_file {
        Some(f) => {
            t += &format!(
                "state file  {} (`qpslab tune apply --from {}` puts its host settings in force on a host of this shape)\n",
                f.display(),
                f.display()
            );
        }
        None if host_kept => {
            t += "state file  --state-file FILE writes these host settings for `qpslab tune apply --from FILE` on a host of this shape\n";
        }
        None => {}
    }
    if let Some(d) = &a.state_dir {
        t += &format!(
            "state dir   {} (server-host.toml for `qpslab tune apply --from`, the server's file, load.txt, climb.json)\n",
            d.display()
        );
    }
    if let Some(j) = &c.kept_journal {
        t += &format!(
            "host        the kept settings stay in force; `qpslab tune revert --journal {}` undoes them\n",
            j.display()
        );
    }
    if let (Some(id), Some(s)) = (c.sweep, store) {
        t += &format!(
            "stored      sweep {id} in {} (qpslab report sweep:{id} -o climb.html draws it)\n",
            s.path().display()
        );
    }
    t
}

/// `--dry-run`: one run of the starting state, its summary and the first step the climb would
/// take (or why none).
fn dry_run(
    o: &ClimbOptions,
    json: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Outcome> {
    let mut line = Line::new();
    let (report, rows) = climb::first_step(o, stop, &mut line).map_err(error)?;
    line.clear();
    let doc = serde_json::json!({ "start_rps": climb::ok_rps(&report), "steps": rows });
    output::emit(json, &doc, || {
        let mut t = bench_text(&report);
        t += "\nfirst step (dry run: nothing changed, nothing stored)\n";
        for s in &rows {
            t += &format!(
                "  {}: {}\n  change: {}\n  {}\n",
                s.finding,
                s.evidence.first().map_or("", String::as_str),
                s.change.as_deref().unwrap_or("none"),
                s.why
            );
        }
        t
    })?;
    Ok(Outcome::Passed)
}

fn error(e: ClimbError) -> anyhow::Error {
    match e {
        ClimbError::Usage(m) | ClimbError::Run { source: BenchError::Usage(m), .. } => {
            UsageError(m).into()
        }
        ClimbError::Store(s) => store_cmd::store_error(s),
        other => anyhow::Error::new(other),
    }
}
