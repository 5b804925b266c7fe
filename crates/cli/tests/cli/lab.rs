//! The lab: `sweep` runs variants interleaved and stores every run, `runs` lists and shows them,
//! `compare` judges two sets of runs, `report` draws them in one HTML file that Debian's
//! chromium opens headless as a user would. Host variants run inside a network namespace the
//! test creates, on its own veth: the RPS mask is in force during each run and back afterwards,
//! also after SIGINT, after a variant that cannot be applied, and (through `tune revert`) after
//! kill -9.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{qpslab_command, Netns};

/// `qpslab ARGS --store STORE`.
fn lab(store: &Path, args: &[&str]) -> Output {
    qpslab_command().args(args).arg("--store").arg(store).output().expect("run qpslab")
}

fn ok_json(store: &Path, args: &[&str]) -> serde_json::Value {
    let out = lab(store, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The stored runs of a sweep, oldest first.
fn sweep_runs(store: &Path, sweep: i64) -> Vec<serde_json::Value> {
    let v = ok_json(store, &["runs", "--json", "--sweep", &sweep.to_string()]);
    v.as_array().unwrap().clone()
}

fn sweep_status(store: &Path, sweep: i64) -> String {
    let v = ok_json(store, &["runs", "sweeps", "--json"]);
    let s = v.as_array().unwrap().iter().find(|s| s["id"] == sweep).expect("the sweep is listed");
    s["status"].as_str().unwrap().to_string()
}

#[test]
fn a_sweep_interleaves_its_variants_stores_every_run_and_its_report_opens_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let file = write(
        dir.path(),
        "matrix.toml",
        "name = \"builtin vs nginx\"\nrepeat = 2\n[base]\nduration = \"1s\"\nwarmup = \"200ms\"\n\
         profile = true\n[axes]\ntarget = [\"builtin\", \"nginx\"]\nconnections = [10, 100]\n",
    );
    let v = ok_json(&store, &["sweep", file.to_str().unwrap(), "--json"]);
    assert_eq!(v["status"], "done");
    assert_eq!(v["runs"].as_array().unwrap().len(), 8);
    let sweep = v["sweep"].as_i64().unwrap();

    // Interleaved: A B C D A B C D by the stored start times, never A A B B.
    let runs = sweep_runs(&store, sweep);
    assert_eq!(runs.len(), 8);
    let mut by_time = runs.clone();
    by_time.sort_by_key(|r| r["started_at"].as_str().unwrap().to_string());
    let order: Vec<(String, u64)> = by_time
        .iter()
        .map(|r| (r["variant"].as_str().unwrap().to_string(), r["repeat"].as_u64().unwrap()))
        .collect();
    let names = [
        "target=builtin connections=10",
        "target=builtin connections=100",
        "target=nginx connections=10",
        "target=nginx connections=100",
    ];
    let expected: Vec<(String, u64)> =
        [1, 2].iter().flat_map(|r| names.iter().map(move |n| (n.to_string(), *r))).collect();
    assert_eq!(order, expected);
    for r in &runs {
        assert_eq!(r["sweep"], sweep);
        assert!(r["throughput_rps"].as_f64().unwrap() > 0.0, "{r}");
        let want =
            if r["variant"].as_str().unwrap().contains("nginx") { "nginx" } else { "builtin" };
        assert_eq!(r["config"]["target"], want, "the config as the sweep file names it");
        assert!([10, 100].contains(&r["config"]["connections"].as_u64().unwrap()));
    }

    // One run as bench printed it, and two variants compared.
    let first = runs[0]["id"].as_i64().unwrap().to_string();
    let out = lab(&store, &["runs", "show", &first]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("run {first} (bench) \u{b7} sweep {sweep}")), "{text}");
    assert!(text.contains("\nthroughput  "), "{text}");
    let out = lab(&store, &["compare", &format!("{sweep}/1"), &format!("{sweep}/3")]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("B is ") && text.contains("x A (pairs "),
        "sweep rounds, weighed in pairs: {text}"
    );

    // The report, as a user opens it.
    let html = dir.path().join("report.html");
    let out = lab(&store, &["report", &format!("sweep:{sweep}"), "-o", html.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    browser_check(&html, dir.path());
}

/// HTTP/2 as sweep keys: `h2` in the base and `streams` as an axis reach every run (the
/// built-in server speaks it), and the stored runs say so.
#[test]
fn http2_and_its_streams_are_sweep_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let file = write(
        dir.path(),
        "h2.toml",
        "name = \"h2 streams\"\nrepeat = 1\n[base]\nh2 = true\nduration = \"1s\"\n\
         warmup = \"200ms\"\n[axes]\nstreams = [1, 10]\n",
    );
    let v = ok_json(&store, &["sweep", file.to_str().unwrap(), "--json"]);
    assert_eq!(v["status"], "done");
    let runs = sweep_runs(&store, v["sweep"].as_i64().unwrap());
    assert_eq!(runs.len(), 2);
    for r in &runs {
        let id = r["id"].as_i64().unwrap().to_string();
        let shown = ok_json(&store, &["runs", "show", &id, "--json"]);
        let load = &shown["report"]["load"];
        assert_eq!(load["config"]["protocol"], "h2", "{id}");
        let streams = load["h2"]["streams_per_connection"].as_u64().unwrap();
        assert_eq!(r["variant"], format!("streams={streams}"));
        assert!(load["requests"]["ok"].as_u64().unwrap() > 0 && load["requests"]["failed"] == 0);
    }
}

/// Debian's chromium, headless, loads the report from disk: no console message, the DOM holds
/// the table and every chart, and a screenshot shows the series' colours and the heatmaps.
fn browser_check(html: &Path, dir: &Path) {
    let url = format!("file://{}", html.display());
    let chromium = |extra: &[&str]| {
        Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .args(["--enable-logging=stderr", "--v=0"])
            .arg(format!("--user-data-dir={}", dir.join("chromium-profile").display()))
            .args(extra)
            .arg(&url)
            .stdin(Stdio::null())
            .output()
            .expect("chromium (Debian's package) runs")
    };
    let dom = crate::common::chromium_dom(html, dir);
    assert_eq!(dom.matches("<tr data-variant=").count(), 4, "{}", &dom[..dom.len().min(2000)]);
    assert_eq!(dom.matches("class=\"repeat\"").count(), 8, "a dot per run");
    assert_eq!(dom.matches("class=\"spectrum\"").count(), 4, "a latency line per variant");
    assert_eq!(dom.matches("class=\"per-second\"").count(), 8, "a rate line per run");
    assert_eq!(dom.matches("<img class=\"heat\"").count(), 24, "user, system, softirq per run");
    assert_eq!(dom.matches("<table class=\"profile\">").count(), 8, "each run's profile table");
    assert!(dom.contains("<th>tcp-receive</th>"), "the categories as columns");
    assert!(!dom.contains("src=\"http") && !dom.contains("href=\"http"), "nothing fetched");

    let shot = dir.join("report.png");
    let out = chromium(&["--window-size=1280,4000", &format!("--screenshot={}", shot.display())]);
    assert!(shot.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    let (w, h, px) = decode_png(&shot);
    let at = |x: usize, y: usize| {
        let i = (y * w + x) * 3;
        [px[i], px[i + 1], px[i + 2]]
    };
    // The four variants' colours (lines, dots, legend), each in many pixels.
    for colour in [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40]] {
        let n = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .filter(|&(x, y)| at(x, y).iter().zip(colour).all(|(a, b)| a.abs_diff(b) <= 6))
            .count();
        assert!(n > 150, "colour {colour:?} in {n} pixels only");
    }
    // Heatmap cells: solid tinted blocks (not grey, not a series colour) at least 10x10.
    let tinted = |p: [u8; 3]| p.iter().max().unwrap() - p.iter().min().unwrap() > 12;
    let mut cells = 0;
    for y in (0..h.saturating_sub(10)).step_by(5) {
        for x in (0..w.saturating_sub(10)).step_by(5) {
            let p = at(x, y);
            if tinted(p) && (0..10).all(|dy| (0..10).all(|dx| at(x + dx, y + dy) == p)) {
                cells += 1;
            }
        }
    }
    assert!(cells >= 20, "heatmap cells seen: {cells}");
}

/// Width, height and RGB bytes of a PNG.
fn decode_png(path: &Path) -> (usize, usize, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap();
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let (w, h) = (info.width as usize, info.height as usize);
    let channels = info.color_type.samples();
    let rgb = buf[..w * h * channels]
        .chunks(channels)
        .flat_map(|c| if c.len() >= 3 { [c[0], c[1], c[2]] } else { [c[0]; 3] })
        .collect();
    (w, h, rgb)
}

/// A namespace's veth end, its rx-0 RPS mask (as a number) and its somaxconn.
struct Ns {
    ns: Netns,
    journal: PathBuf,
}

impl Ns {
    /// A namespace with its loopback up (the sweep's servers listen there).
    fn new(what: &str, dir: &Path) -> Ns {
        let ns = Netns::create(what);
        let out =
            Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Ns { ns, journal: dir.join("journal.json") }
    }

    fn rps_mask(&self) -> u64 {
        let text = self.ns.read(&format!("/sys/class/net/{}/queues/rx-0/rps_cpus", self.ns.ns_end));
        u64::from_str_radix(&text.replace(',', ""), 16).unwrap_or_else(|_| panic!("mask {text:?}"))
    }

    fn somaxconn(&self) -> String {
        self.ns.read("/proc/sys/net/core/somaxconn")
    }

    /// `qpslab sweep FILE --yes` inside the namespace, as a child.
    fn spawn_sweep(&self, file: &Path, store: &Path) -> std::process::Child {
        Command::new("ip")
            .args(["netns", "exec", &self.ns.name, env!("CARGO_BIN_EXE_qpslab"), "sweep"])
            .arg(file)
            .args(["--yes", "--json", "--journal"])
            .arg(&self.journal)
            .arg("--store")
            .arg(store)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Polls until `cond` holds (at most `limit`).
    fn wait_for(&self, limit: Duration, what: &str, cond: impl Fn(&Ns) -> bool) {
        let start = Instant::now();
        while !cond(self) {
            assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The RPS variant's file: `rps off`, then RPS on CPU 1 with a smaller accept queue.
fn rps_sweep(dir: &Path, ns_end: &str, repeat: u32, duration: &str) -> PathBuf {
    write(
        dir,
        "rps.toml",
        &format!(
            "name = \"rps masks\"\nrepeat = {repeat}\n[base]\nduration = \"{duration}\"\nwarmup = \"0s\"\n\
             connections = 10\n\n[[variant]]\nname = \"rps off\"\ntune = {{ rps = {{ \"{ns_end}/rx-0\" = \"\" }} }}\n\n\
             [[variant]]\nname = \"rps cpu 1\"\ntune = {{ rps = {{ \"{ns_end}/rx-0\" = \"1\" }}, sysctl = {{ \"net.core.somaxconn\" = 1024 }} }}\n"
        ),
    )
}

/// The queue's RPS CPUs a run's provenance recorded, as a CPU list.
fn recorded_rps(store: &Path, id: i64, iface: &str) -> String {
    let v = ok_json(store, &["runs", "show", &id.to_string(), "--json"]);
    let nic = v["provenance"]["host"]["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == iface)
        .unwrap_or_else(|| panic!("{iface} in {}", v["provenance"]["host"]["nics"]))
        .clone();
    nic["rx"][0]["rps_cpus"].as_str().unwrap().to_string()
}

#[test]
fn a_host_variant_is_in_force_during_its_runs_and_reverted_after_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let ns = Ns::new("swp", dir.path());
    let somaxconn = ns.somaxconn();
    let file = rps_sweep(dir.path(), &ns.ns.ns_end, 2, "1s");
    let child = ns.spawn_sweep(&file, &store);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = sweep_runs(&store, v["sweep"].as_i64().unwrap());
    assert_eq!(runs.len(), 4);
    for r in &runs {
        let id = r["id"].as_i64().unwrap();
        let want = if r["variant"] == "rps cpu 1" { "1" } else { "" };
        assert_eq!(recorded_rps(&store, id, &ns.ns.ns_end), want, "run {id} ({})", r["variant"]);
        let shown = ok_json(&store, &["runs", "show", &id.to_string(), "--json"]);
        let tune = &shown["provenance"]["tune"];
        if want == "1" {
            let states: Vec<&str> = tune["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["state"].as_str().unwrap())
                .collect();
            assert_eq!(states, ["applied", "applied"], "{tune}");
        } else {
            assert!(tune.is_null(), "nothing applied for rps off: {tune}");
        }
    }
    assert_eq!(ns.rps_mask(), 0, "RPS is off again");
    assert_eq!(ns.somaxconn(), somaxconn);
    assert!(!ns.journal.exists(), "the journal is gone once everything is reverted");
}

#[test]
fn sigint_mid_sweep_reverts_the_host_and_keeps_the_finished_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let ns = Ns::new("int", dir.path());
    let somaxconn = ns.somaxconn();
    let file = rps_sweep(dir.path(), &ns.ns.ns_end, 3, "2s");
    let child = ns.spawn_sweep(&file, &store);
    ns.wait_for(Duration::from_secs(60), "RPS on CPU 1", |n| n.rps_mask() == 2);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill() on the PID of our own child (`ip netns exec` execs qpslab in place).
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("sweep stopped by a signal"), "{stderr}");
    assert_eq!(ns.rps_mask(), 0);
    assert_eq!(ns.somaxconn(), somaxconn);
    assert!(!ns.journal.exists());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "stopped");
    let sweep = v["sweep"].as_i64().unwrap();
    assert_eq!(sweep_status(&store, sweep), "stopped");
    let runs = sweep_runs(&store, sweep);
    assert!(!runs.is_empty(), "the first variant's run finished before the signal");
    assert!(
        runs.iter().all(|r| r["variant"] == "rps off"),
        "the stopped run is not stored: {runs:?}"
    );
    for r in &runs {
        let shown = ok_json(&store, &["runs", "show", &r["id"].to_string(), "--json"]);
        assert!(shown["report"]["load"]["duration_s"].as_f64().unwrap() > 1.9, "whole runs only");
    }
}

#[test]
fn a_variant_that_cannot_be_applied_ends_the_sweep_with_everything_reverted() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let ns = Ns::new("bad", dir.path());
    let somaxconn = ns.somaxconn();
    let end = &ns.ns.ns_end;
    let file = write(
        dir.path(),
        "bad.toml",
        &format!(
            "name = \"bad\"\nrepeat = 1\n[base]\nduration = \"1s\"\nwarmup = \"0s\"\nconnections = 10\n\
             [[variant]]\nname = \"rps on\"\ntune = {{ rps = {{ \"{end}/rx-0\" = \"1\" }} }}\n\
             [[variant]]\nname = \"bad sysctl\"\ntune = {{ rps = {{ \"{end}/rx-0\" = \"0-1\" }}, sysctl = {{ \"net.core.somaxconn\" = \"lots\" }} }}\n"
        ),
    );
    let out = ns.spawn_sweep(&file, &store).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("variant \"bad sysctl\": cannot apply its host settings"), "{stderr}");
    assert_eq!(ns.rps_mask(), 0, "the first variant reverted, the second's RPS write undone");
    assert_eq!(ns.somaxconn(), somaxconn);
    assert!(!ns.journal.exists());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sweep = v["sweep"].as_i64().unwrap();
    assert_eq!(sweep_status(&store, sweep), "failed");
    assert_eq!(sweep_runs(&store, sweep).len(), 1);
}

/// Every descendant of `pid`, from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let mut all: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let Some(rest) = stat.rsplit_once(')').map(|r| r.1) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
            all.push((p, ppid));
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    out.remove(0);
    out
}

/// Alive and not a zombie waiting to be reaped.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|r| !r.1.trim_start().starts_with('Z')))
}

#[test]
fn kill_9_mid_sweep_keeps_the_finished_runs_leaves_no_server_and_leaves_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let ns = Ns::new("k9", dir.path());
    let end = &ns.ns.ns_end;
    let file = write(
        dir.path(),
        "k9.toml",
        &format!(
            "name = \"crash\"\nrepeat = 3\n[base]\nduration = \"2s\"\nwarmup = \"0s\"\nconnections = 10\n\
             [[variant]]\nname = \"builtin rps\"\ntune = {{ rps = {{ \"{end}/rx-0\" = \"1\" }} }}\n\
             [[variant]]\nname = \"nginx\"\ntarget = \"nginx\"\n"
        ),
    );
    let mut child = ns.spawn_sweep(&file, &store);
    let count = |s: &Path| {
        let out = lab(s, &["runs", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let start = Instant::now();
    while count(&store) < 2 {
        assert!(start.elapsed() < Duration::from_secs(60), "two runs stored in a minute");
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!("the sweep ended early: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first variant again: its RPS mask applied, its server running.
    ns.wait_for(Duration::from_secs(30), "the first variant's second run", |n| n.rps_mask() == 2);
    let start = Instant::now();
    let servers = loop {
        let d = descendants(child.id());
        if !d.is_empty() {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "a server started");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    let _ = child.wait();
    let start = Instant::now();
    while servers.iter().any(|p| running(*p)) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "servers outlived the sweep: {servers:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every finished run is whole; the sweep shows it ended without a word.
    let rows = ok_json(&store, &["runs", "--json"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let shown = ok_json(&store, &["runs", "show", &r["id"].to_string(), "--json"]);
        assert!(shown["report"]["load"]["requests"]["ok"].as_u64().unwrap() > 0);
    }
    assert_eq!(sweep_status(&store, rows[0]["sweep"].as_i64().unwrap()), "interrupted");
    // The journal stays for `tune revert`, which restores the mask.
    assert!(ns.journal.exists());
    assert_eq!(ns.rps_mask(), 2);
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.ns.name,
            env!("CARGO_BIN_EXE_qpslab"),
            "tune",
            "revert",
            "--journal",
        ])
        .arg(&ns.journal)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ns.rps_mask(), 0);
}

#[test]
fn bench_stores_its_run_unless_told_not_to_and_load_stores_with_save() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let out = lab(&store, &["bench", "-d", "1s", "--warmup", "0s", "-c", "10", "--label", "first"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stored as run 1 in "), "{stderr}");
    let runs = ok_json(&store, &["runs", "--json", "--label", "first"]);
    let r = &runs.as_array().unwrap()[0];
    assert_eq!(
        (r["kind"].as_str(), r["sweep"].as_i64(), r["variant"].as_str()),
        (Some("bench"), None, None)
    );
    assert_eq!(
        (r["config"]["target"].as_str(), r["config"]["connections"].as_u64()),
        (Some("builtin"), Some(10))
    );
    let shown = ok_json(&store, &["runs", "show", "1", "--json"]);
    assert!(shown["provenance"]["host"]["cpus"].is_array(), "the host at the time of the run");
    assert!(shown["provenance"]["version"]
        .as_str()
        .unwrap()
        .starts_with(env!("CARGO_PKG_VERSION")));

    let other = dir.path().join("other.sqlite");
    let out = lab(&other, &["bench", "-d", "1s", "--warmup", "0s", "-c", "10", "--no-save"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!other.exists(), "--no-save creates no store");

    let server = crate::common::ServeChild::start(&[], &["-w", "1"]);
    let out = lab(
        &store,
        &["load", "-c", "5", "-n", "200", "--save", "--label", "load", &server.url("/")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let runs = ok_json(&store, &["runs", "--json", "--since", "1h"]);
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert_eq!(runs[1]["kind"], "load");
    // What each ran against, in the JSON and as a column of the listing.
    assert_eq!(
        (runs[0]["target"].as_str(), runs[1]["target"].as_str()),
        (Some("builtin"), Some(server.url("/").as_str()))
    );
    let listing = lab(&store, &["runs"]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    let mut lines = listing.lines();
    assert!(lines.next().unwrap().contains("req/s  target"), "{listing}");
    assert!(lines.next().unwrap().contains(" builtin"), "{listing}");
    assert!(lines.next().unwrap().contains(&server.url("/")), "{listing}");
    let export = lab(&store, &["runs", "export"]);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(!lines[0]["histogram"].as_str().unwrap().is_empty(), "the exact histogram travels too");
    // Runs of no sweep are named in a report by number, kind and target (they were `run 1`,
    // `run 2`, with nothing to tell what they ran against).
    let html = lab(&store, &["report", "1", "2"]);
    let page = String::from_utf8_lossy(&html.stdout);
    assert!(
        page.contains("run 1 \u{b7} bench builtin (first)"),
        "{}",
        &page[..page.len().min(3000)]
    );
    assert!(page.contains(&format!("run 2 \u{b7} load {} (load)", server.url("/"))));
    let out = lab(&store, &["runs", "rm", "2"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "removed 1 run(s)\n");
}

/// Ctrl-C on a terminal signals the whole foreground process group. The servers bench starts
/// are in groups of their own, so the signal reaches the bench alone: it ends the measured
/// window, prints the summary marked as stopped early, stores the run and stops nginx itself
/// (nginx took the group's SIGINT as a fast shutdown before, and the run was lost with "the
/// nginx target exited during the run").
#[test]
fn ctrl_c_to_the_process_group_keeps_the_nginx_bench_run() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let child = qpslab_command()
        .args(["bench", "--target", "nginx", "-d", "30s", "--warmup", "0s", "--store"])
        .arg(&store)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill() on the process group of our own child.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGINT) };
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "it ended soon after the signal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("(stopped early by a signal)"), "{text}");
    let runs = ok_json(&store, &["runs", "--json"]);
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert!(runs[0]["throughput_rps"].as_f64().unwrap() > 0.0, "{runs}");
    assert_eq!(runs[0]["stopped_early"], true, "{runs}");
    let listing = lab(&store, &["runs"]);
    assert!(String::from_utf8_lossy(&listing.stdout).contains("(stopped early)"));
}

/// `bench HOST:PORT` takes the address as `load` does, as an http:// URL (it was refused as an
/// unknown kind of target), and finds the server listening there.
#[test]
fn bench_takes_a_url_without_its_scheme() {
    let server = crate::common::ServeChild::start(&[], &["-w", "1"]);
    let url = server.url("/");
    let bare = url.trim_start_matches("http://");
    let args = ["bench", bare, "-d", "1s", "--warmup", "0s", "-c", "5", "--json", "--no-save"];
    let out = crate::qpslab(&args);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["target"]["kind"], "url", "{}", v["target"]);
    assert_eq!(v["target"]["url"], url, "{}", v["target"]);
    assert_eq!(v["target"]["found_by"], "listening", "{}", v["target"]);
    assert!(v["load"]["requests"]["ok"].as_u64().unwrap() > 100, "{}", v["load"]["requests"]);
    crate::usage_error(&["bench", "ngnix"], "use builtin or nginx");
}

#[test]
fn bad_lab_input_is_named_with_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let one_line = |out: Output, needle: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{stderr:?} lacks {needle:?}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
    };
    let bad =
        write(dir.path(), "bad.toml", "name = \"x\"\n[base]\nduration = \"1s\"\nconections = 10\n");
    one_line(
        lab(&store, &["sweep", bad.to_str().unwrap()]),
        "bad.toml line 4: unknown field `conections`",
    );
    let host = write(dir.path(), "host.toml", "name = \"x\"\n[[variant]]\nname = \"a\"\ntune = { sysctl = { \"net.core.somaxconn\" = 1024 } }\n");
    one_line(lab(&store, &["sweep", host.to_str().unwrap()]), "pass --yes");
    let missing = write(
        dir.path(),
        "nic.toml",
        "name = \"x\"\n[[variant]]\nname = \"a\"\ntune = { rps = { \"nosuch0/rx-0\" = \"1\" } }\n",
    );
    one_line(
        lab(&store, &["sweep", missing.to_str().unwrap(), "--yes"]),
        "variant \"a\": tune: rps \"nosuch0/rx-0\": no interface nosuch0 on this host",
    );
    one_line(lab(&store, &["sweep", "/nonexistent.toml"]), "/nonexistent.toml: cannot read");
    one_line(lab(&store, &["runs", "show", "999"]), "run 999: no such run in");
    one_line(lab(&store, &["compare", "banana", "1"]), "A: \"banana\" names no runs");
    one_line(lab(&store, &["report", "--last"]), "no runs stored in");
    one_line(
        qpslab_command().args(["runs", "--store", "/proc/qpslab/runs.sqlite"]).output().unwrap(),
        "--store /proc/qpslab/runs.sqlite: cannot create /proc/qpslab",
    );
    one_line(lab(&store, &["runs", "--since", "yesterday"]), "--since \"yesterday\"");
    one_line(
        qpslab_command().args(["bench", "--store", "/proc/qpslab/runs.sqlite"]).output().unwrap(),
        "give a writable file (--store or QPSLAB_STORE), or pass --no-save",
    );
    // A store another process holds locked.
    let holder = rusqlite::Connection::open(&store).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    one_line(lab(&store, &["runs"]), "locked by another process");
    holder.execute_batch("COMMIT").unwrap();
}

#[test]
fn every_example_sweep_file_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sweeps");
    // These need their own set-up (a veth pair, a server host over ssh): the dry run checks
    // them as a real run would, and names what is missing here.
    let needs = [
        ("rps-masks-veth.toml", "no interface vq1 on this host"),
        ("server-host-rps.toml", "--server web1: cannot start the agent"),
    ];
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        let out = qpslab_command().args(["sweep", "--dry-run"]).arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = path.file_name().unwrap().to_str().unwrap();
        n += 1;
        if let Some((_, missing)) = needs.iter().find(|(f, _)| *f == name) {
            assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
            assert!(stderr.contains(missing), "{name}: {stderr}");
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{}: {stderr}", path.display());
        assert!(text.contains("variant(s) x 3 repeat(s), each checked"), "{text}");
    }
    assert!(n >= 6, "the example files: {n}");
}

/// Mistakes in a sweep file are refused before anything runs, by the dry run and by the real
/// sweep alike, with exit 2 (a zero connection count ran the first variant and failed the
/// second with exit 1; a misspelt target was taken as a URL and failed at run time; an RPS
/// key for an interface that is not there passed the dry run).
#[test]
fn sweep_mistakes_are_refused_before_the_first_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let cases = [
        ("zero.toml", "[axes]\nconnections = [10, 0]\n", "--connections: must be at least 1"),
        (
            "typo.toml",
            "[base]\ntarget = \"nginks\"\n",
            "--target \"nginks\": use builtin or nginx (or give a URL",
        ),
        (
            "pipe.toml",
            "[base]\nconn-per-request = true\npipeline = 4\n",
            "--pipeline: cannot pipeline with --conn-per-request",
        ),
        (
            "nic.toml",
            "[[variant]]\nname = \"x\"\ntune = { rps = { \"nosuch0/rx-0\" = \"1\" } }\n",
            "no interface nosuch0 on this host",
        ),
    ];
    for (file, body, said) in cases {
        let path = write(
            dir.path(),
            file,
            &format!(
                "name = \"m\"\nrepeat = 1\n[base]\nduration = \"1s\"\nwarmup = \"0s\"\n{body}"
            )
            .replace(
                "[base]\nduration = \"1s\"\nwarmup = \"0s\"\n[base]\n",
                "[base]\nduration = \"1s\"\nwarmup = \"0s\"\n",
            ),
        );
        for dry in [true, false] {
            let mut args = vec!["sweep", path.to_str().unwrap(), "--yes"];
            if dry {
                args.push("--dry-run");
            }
            let out = lab(&store, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{file} dry {dry}: {stderr}");
            assert!(stderr.contains(said), "{file} dry {dry}: {stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        }
    }
    // Nothing ran, so nothing was stored.
    let runs = lab(&store, &["runs", "--json"]);
    let text = String::from_utf8_lossy(&runs.stdout);
    assert_eq!(text.trim(), "[]", "{}", String::from_utf8_lossy(&runs.stderr));
}

#[test]
fn a_sweep_inside_a_namespace_refuses_host_wide_sysctls() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Ns::new("hw", dir.path());
    let file = write(
        dir.path(),
        "hw.toml",
        "name = \"x\"\n[[variant]]\nname = \"files\"\ntune = { sysctl = { \"fs.file-max\" = 100 } }\n",
    );
    let out = ns.spawn_sweep(&file, &dir.path().join("runs.sqlite")).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sysctl fs.file-max: host-wide, and this runs inside a network namespace"),
        "{stderr}"
    );
}

#[test]
fn a_run_that_fails_has_its_host_settings_reverted_too() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Ns::new("rf", dir.path());
    let end = &ns.ns.ns_end;
    // Nothing listens on port 9 in the namespace: the run fails after the mask is applied.
    let file = write(
        dir.path(),
        "dead.toml",
        &format!(
            "name = \"dead\"\nrepeat = 1\n[base]\ntarget = \"http://127.0.0.1:9/\"\nduration = \"1s\"\n\
             [[variant]]\nname = \"rps on\"\ntune = {{ rps = {{ \"{end}/rx-0\" = \"1\" }} }}\n"
        ),
    );
    let out = ns.spawn_sweep(&file, &dir.path().join("runs.sqlite")).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("variant \"rps on\", repeat 1: cannot connect"), "{stderr}");
    assert!(stderr.contains("every host setting is reverted"), "{stderr}");
    assert_eq!(ns.rps_mask(), 0);
    assert!(!ns.journal.exists());
}

/// The user's own before/after table: `bench --repeat 2 --label NAME` stores each label's
/// repeats, and `report label:v0 label:v1` draws one variant per label, in the order given,
/// its runs as repeats, with the ratio to the first (one connection against eight: the
/// second is faster, by Little's law on the built-in server).
#[test]
fn bench_repeats_by_label_are_one_variant_each_in_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    let bench = |label: &str, c: &str| {
        let args = ["bench", "--repeat", "2", "-d", "1s", "--warmup", "0", "-c", c, "--json"];
        let mut args = args.to_vec();
        args.extend(["--label", label]);
        ok_json(&store, &args)
    };
    let v0 = bench("v0", "1");
    assert_eq!(v0["repeat"], 2, "{v0}");
    let runs = v0["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let rates: Vec<f64> =
        runs.iter().map(|r| r["report"]["load"]["throughput_rps"].as_f64().unwrap()).collect();
    let s = &v0["throughput_rps"];
    let (lo, hi) = (rates[0].min(rates[1]), rates[0].max(rates[1]));
    assert_eq!((s["min"].as_f64().unwrap(), s["max"].as_f64().unwrap()), (lo, hi), "{s}");
    assert!((s["median"].as_f64().unwrap() - (lo + hi) / 2.0).abs() < 1e-6, "{s}");
    bench("v1", "8");
    let labelled = ok_json(&store, &["runs", "--json", "--label", "v1"]);
    assert_eq!(labelled.as_array().unwrap().len(), 2, "each repeat stored with its label");
    let html = lab(&store, &["report", "label:v1", "label:v0"]);
    let page = String::from_utf8_lossy(&html.stdout);
    let rows: Vec<&str> = page.split("<tr data-variant=\"").skip(1).collect();
    assert_eq!(rows.len(), 2, "one variant per label: {}", &page[..page.len().min(3000)]);
    assert!(rows[0].starts_with("label:v1\""), "in the order given: {}", rows[0]);
    assert!(rows[1].starts_with("label:v0\""), "{}", rows[1]);
    // Columns: #, variant, runs, median, min-max, ratio.
    let cells = |row: &str| -> Vec<String> {
        row.split("<td")
            .skip(1)
            .map(|c| c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()].to_string())
            .collect()
    };
    assert_eq!(cells(rows[0])[2], "2", "its two repeats");
    assert_eq!(cells(rows[0])[5], "1.00x", "the first is the baseline");
    let ratio: f64 = cells(rows[1])[5].trim_end_matches('x').parse().unwrap();
    assert!(ratio < 0.8, "one connection against eight: {ratio}");
}

/// A sweep over a server's own workers through `[server-config]`: the template filled in per
/// variant, written to the server's file and put in force by its reload command before each
/// run; two workers serve twice what one does (the worker-pool server's law), and after the
/// sweep the file is the user's again, byte for byte, with nothing beside it.
#[test]
fn a_sweep_varies_a_servers_workers_through_its_template() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.sqlite");
    write(dir.path(), "pool.tmpl", "workers = {{workers}}\n");
    let original = "workers = 3  # the user's\n";
    let conf = write(dir.path(), "pool.conf", original);
    let mut server = crate::common::pool_server(&conf, 18141);
    let file = write(
        dir.path(),
        "workers.toml",
        &format!(
            "name = \"pool workers\"\nrepeat = 2\n[base]\ntarget = \"http://127.0.0.1:18141/\"\n\
             duration = \"1s\"\nwarmup = \"300ms\"\nconnections = 4\n[server-config]\n\
             template = \"pool.tmpl\"\nfile = \"pool.conf\"\nreload = \"kill -HUP {}\"\n\
             [axes]\nserver-workers = [1, 2]\n",
            server.id()
        ),
    );
    let v = ok_json(&store, &["sweep", file.to_str().unwrap(), "--json"]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(v["status"], "done", "{v}");
    let sweep = v["sweep"].as_i64().unwrap();
    let c = ok_json(&store, &["compare", &format!("{sweep}/1"), &format!("{sweep}/2"), "--json"]);
    let ratio = c["verdict"]["ratio"].as_f64().unwrap_or_else(|| panic!("{c}"));
    assert!((1.7..=2.3).contains(&ratio), "two workers against one: {c}");
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), original, "the user's file back");
    assert!(!dir.path().join("pool.conf.qpslab-original").exists());
    // Without the table, the key is refused with the fix.
    let bad = write(
        dir.path(),
        "bad.toml",
        "name = \"x\"\n[base]\nduration = \"1s\"\n[axes]\nserver-workers = [1, 2]\n",
    );
    let out = lab(&store, &["sweep", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("add a [server-config] table"), "{err}");
}
