//! `qpslab climb` against real servers on loopback: the first step of a dry run, a climb that
//! keeps what Little's law says must help, a user's nginx with its known costs on edited and
//! restored byte for byte, a failing target it refuses to climb, bad flags, and the decision
//! rule against induced ground truth (a change with no effect, and one worth exactly +10%). A
//! test binary of its own, one climb at a time: each judges rates.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

#[path = "common/mod.rs"]
mod common;

use std::sync::Mutex;

use common::{json_of as json, ns_settings as settings, qpslab_command, same, ServeChild};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn slow_server() -> ServeChild {
    ServeChild::start(&[], &["-w", "1", "--cpus", "0"])
}

/// `qpslab climb ARGS --store DB URL`, with one-second runs; its JSON and exit code.
fn climb(args: &[&str], db: &std::path::Path, url: &str) -> (Value, Option<i32>) {
    let out = qpslab_command()
        .args(["climb", "--json", "-d", "1s", "--warmup", "200ms"])
        .args(args)
        .arg("--store")
        .arg(db)
        .arg(url)
        .output()
        .unwrap();
    (json(&out), out.status.code())
}

/// One connection to a server answering in 20 ms: the dry run measures once and names the
/// first change, more connections, without making it or storing anything.
#[test]
fn a_dry_run_names_the_first_change_and_makes_none() {
    let _one = one_at_a_time();
    let server = slow_server();
    let store = tempfile::tempdir().unwrap();
    let db = store.path().join("runs.sqlite");
    let (v, code) = climb(&["--dry-run", "-c", "1"], &db, &server.url("/?t=20"));
    assert_eq!(code, Some(0), "{v}");
    let step = &v["steps"][0];
    assert_eq!(step["finding"], "latency-bound", "{v}");
    assert_eq!(step["change"], "connections 1 -> 2", "{v}");
    assert_eq!(step["knob"], serde_json::json!({"knob": "connections", "from": 1, "to": 2}));
    assert_eq!(step["verdict"], "planned");
    let rps = v["start_rps"].as_f64().unwrap();
    assert!((40.0..=50.0).contains(&rps), "one connection, 20 ms: {rps}");
    assert!(!db.exists(), "a dry run stores nothing");
}

/// From one connection to a server answering in 20 ms, each doubling doubles the rate
/// (Little's law): the climb keeps them, each with its ratio, for the two steps `--steps`
/// allows, and stores every run as one sweep.
#[test]
fn a_climb_keeps_what_the_rate_law_says_must_help() {
    let _one = one_at_a_time();
    let server = slow_server();
    let store = tempfile::tempdir().unwrap();
    let db = store.path().join("runs.sqlite");
    let (v, code) = climb(&["--steps", "2", "-c", "1"], &db, &server.url("/?t=20"));
    assert_eq!(code, Some(0), "{v}");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{v:#}");
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["finding"], "latency-bound", "{s}");
        assert_eq!(s["verdict"], "kept", "{s}");
        let (from, to) = (1u64 << i, 2u64 << i);
        assert_eq!(s["change"], format!("connections {from} -> {to}"), "{s}");
        let ratio = s["ratio"].as_f64().unwrap();
        assert!((1.8..=2.2).contains(&ratio), "doubling the connections: {s}");
        let before = s["before"]["rps"].as_f64().unwrap();
        assert!((before / (50.0 * from as f64) - 1.0).abs() < 0.15, "{from} connections: {s}");
    }
    let (start, last) = (v["start_rps"].as_f64().unwrap(), v["final_rps"].as_f64().unwrap());
    assert!(last / start > 3.4, "{start} -> {last}");
    assert!(v["ended"].as_str().unwrap().contains("2 step(s) measured"), "{}", v["ended"]);
    let flag = format!("-c {}", 2u64 << (steps.len() - 1));
    assert_eq!(v["plan"], serde_json::json!([flag]), "{v:#}");
    // Every run is stored, under the climb's sweep: the start's 3, and 8 per step.
    let id = v["sweep"].as_i64().unwrap();
    let listed = qpslab_command()
        .args(["runs", "--json", "--store"])
        .arg(&db)
        .args(["--sweep", &id.to_string()])
        .output()
        .unwrap();
    let runs = json(&listed);
    assert_eq!(runs.as_array().unwrap().len(), 3 + 8 * steps.len(), "{runs:#}");
    // Its report, as a user opens it: the staircase first, a green candidate per kept step
    // and its rise, and a row per step.
    let html = store.path().join("climb.html");
    let out = qpslab_command()
        .args(["report", &format!("sweep:{id}"), "--store"])
        .arg(&db)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = common::chromium_dom(&html, store.path());
    assert!(dom.contains("<svg id=\"staircase\""), "{}", &dom[..dom.len().min(3000)]);
    assert_eq!(dom.matches("class=\"stair-kept\"").count(), steps.len());
    assert_eq!(dom.matches("class=\"stair-reverted\"").count(), 0);
    assert_eq!(dom.matches("<tr data-verdict=\"kept\"").count(), steps.len());
    let rise = format!("step {}: connections", steps.len());
    assert!(dom.contains(&rise), "{rise}");
}

/// A budget that holds the start and no step (8 runs of over a second): the climb measures the
/// start, says why it ends there, and exits 0 with an empty plan.
#[test]
fn a_budget_that_holds_no_step_ends_after_the_start() {
    let _one = one_at_a_time();
    let server = slow_server();
    let store = tempfile::tempdir().unwrap();
    let db = store.path().join("runs.sqlite");
    let (v, code) = climb(&["--budget", "8s", "-c", "1"], &db, &server.url("/?t=20"));
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["ended"], "the budget (8s) does not hold another step", "{v:#}");
    assert!(v["steps"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(v["plan"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(v["start_rps"].as_f64().unwrap() > 40.0, "{v}");
}

/// A target answering 404: the climb measures the start, says the run fails and stops there
/// (no change is worth measuring), and exits 1.
#[test]
fn a_failing_target_is_not_climbed() {
    let _one = one_at_a_time();
    let server = slow_server();
    let store = tempfile::tempdir().unwrap();
    let (v, code) = climb(&[], &store.path().join("runs.sqlite"), &server.url("/?c=404"));
    assert_eq!(code, Some(1), "{v}");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{v:#}");
    assert_eq!(steps[0]["finding"], "run-failed");
    assert_eq!(steps[0]["verdict"], "stopped");
    assert!(steps[0]["why"].as_str().unwrap().contains("fix the target first"), "{v:#}");
    assert!(v["plan"].as_array().unwrap().is_empty());
}

/// Flags the climb cannot work with are refused before anything runs, naming them.
#[test]
fn bad_flags_are_named_before_anything_runs() {
    for (args, says) in [
        (&["--repeats", "2"][..], "--repeats 2: the noise rule needs 3 runs"),
        (&["--min-gain", "150%"][..], "\"150%\": give a percentage from 0 to under 100"),
        (&["--budget", "soon"][..], "soon"),
        (&["--steps", "0"][..], "--steps"),
        (&["--server-config", "a.tmpl:a.conf", "--server-reload", "true"][..], "--apply-server"),
        (
            &["--apply-server", "--server-config", "nocolon", "--server-reload", "true"][..],
            "--server-config \"nocolon\": give TEMPLATE:FILE",
        ),
        (
            &["--apply-server", "--server-config", "/no/such.tmpl:/x", "--server-reload", "true"][..],
            "--server-config /no/such.tmpl: cannot read the template",
        ),
        (&["--keep"][..], "--apply-host"),
    ] {
        let out = qpslab_command()
            .args(["climb", "--no-save"])
            .args(args)
            .arg("http://127.0.0.1:9/")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The rule that decides a step, against induced ground truth, on real runs of a server
/// answering in 20 ms: 10 connections against 10 (a change with no effect) is kept in at
/// most 1 of 10 climbs; 11 against 10 (exactly +10% by Little's law) in at least 9 of 10.
/// Each climb runs as the climb does: A B three times, weighed in pairs, then the re-check
/// pair. Runs of 300 ms are enough: the connections keep step with the server's 20 ms, so the
/// rates repeat to 0.1 req/s (466.6 and 513.2 req/s when measured). The two series run side by side, each on
/// a server of its own: about 500 requests a second each leaves both CPUs nearly idle.
#[test]
fn the_decision_rule_keeps_a_real_gain_and_not_noise() {
    let _one = one_at_a_time();
    let series = |b: &str| {
        let server = slow_server();
        let url = server.url("/?t=20");
        let ok_rps = |c: &str| {
            let out = qpslab_command()
                .args(["bench", "--no-save", "--json", "-d", "300ms", "--warmup", "100ms"])
                .args(["-c", c])
                .arg(&url)
                .output()
                .unwrap();
            let v = json(&out);
            let ok = v["load"]["requests"]["ok"].as_f64().unwrap();
            ok / v["load"]["duration_s"].as_f64().unwrap()
        };
        let climb = || {
            let (mut a_runs, mut b_runs) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                a_runs.push(ok_rps("10"));
                b_runs.push(ok_rps(b));
            }
            qpslab_lab::climb::decide::<()>(&a_runs, &b_runs, 0.03, || {
                Ok(Some((ok_rps("10"), ok_rps(b))))
            })
            .unwrap()
            .unwrap()
        };
        (0..10).filter(|_| climb()).count()
    };
    let (same, gain) = std::thread::scope(|s| {
        let same = s.spawn(|| series("10"));
        let gain = series("11");
        (same.join().unwrap(), gain)
    });
    assert!(same <= 1, "a change with no effect kept in {same} of 10 climbs");
    assert!(gain >= 9, "+10% kept in only {gain} of 10 climbs");
}

/// A user's nginx with Debian's habits and more (three access logs written per request,
/// `keepalive_requests 100`), one worker on CPU 0: with --apply-server the climb turns the logs
/// off (one log alone is worth about 1.3x with a release generator, within the noise of this
/// debug build's), keeps it (`--steps 1`: that step is the test's), and at the end the
/// configuration file is what it was, byte for byte, and nothing is left beside it.
#[test]
fn a_users_nginx_is_changed_where_it_pays_and_restored_byte_for_byte() {
    let _one = one_at_a_time();
    let nginx = common::NginxWithCosts::start(3);
    let (url, conf, original) = (&nginx.url, &nginx.conf, &nginx.original);
    let dir = nginx.dir.path();
    let db = dir.join("runs.sqlite");
    let (v, code) = climb(&["--apply-server", "--steps", "1", "--budget", "60s"], &db, url);
    assert_eq!(code, Some(0), "{v:#}");
    let steps = v["steps"].as_array().unwrap();
    let log = steps
        .iter()
        .find(|s| s["change"] == "nginx access_log off")
        .unwrap_or_else(|| panic!("no access_log step: {v:#}"));
    assert_eq!(log["finding"], "nginx-config", "{log}");
    assert!(v["ended"].as_str().unwrap().contains("1 step(s) measured"), "{v:#}");
    assert_eq!(log["verdict"], "kept", "{log}");
    assert!(log["ratio"].as_f64().unwrap() > 1.1, "{log}");
    assert!(v["plan"].as_array().unwrap().contains(&"nginx: access_log off;".into()), "{v:#}");
    assert_eq!(&std::fs::read_to_string(conf).unwrap(), original, "restored byte for byte");
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("qpslab-original"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// One climb step on `nginx` with `--apply-server` and `args`: it exits 0, its first step is
/// `change` and kept, and nginx's file is back byte for byte. Its JSON.
fn kept_on_nginx(nginx: &common::NginxWithCosts, args: &[&str], change: &str) -> Value {
    let db = nginx.dir.path().join("runs.sqlite");
    let (v, code) = climb(&[args, &["--steps", "1", "--apply-server"]].concat(), &db, &nginx.url);
    assert_eq!(code, Some(0), "{v:#}");
    let step = &v["steps"][0];
    assert_eq!(step["change"], change, "{v:#}");
    assert_eq!(step["verdict"], "kept", "{step}");
    let now = std::fs::read_to_string(&nginx.conf).unwrap();
    assert_eq!(now, nginx.original, "restored byte for byte");
    v
}

/// A failing start the climb can fix: nginx out of worker connections (256 for the load's
/// 1,000, the field reports' "worker_connections are not enough"). With --apply-server the
/// first step raises worker_connections (and worker_rlimit_nofile to hold them) to tune's
/// value, measured on ok responses, kept; the file comes back byte for byte. Without it, the
/// climb stops and says how to let it.
#[test]
fn nginx_out_of_worker_connections_is_climbed_from() {
    let _one = one_at_a_time();
    let nginx = common::NginxWithCosts::start_with(0, "worker_connections 256;", "", "");
    let load = ["-c", "1000", "-t", "2", "--budget", "90s"];
    let v = kept_on_nginx(&nginx, &load, "nginx worker_connections 256 -> 2048");
    let step = &v["steps"][0];
    // From a start with no ok response at all the ratio has no value: the row says so.
    match step["ratio"].as_f64() {
        Some(r) => assert!(r > 1.5, "{step}"),
        None => assert!(step["why"].as_str().unwrap().contains("answered no request ok"), "{step}"),
    }
    let plan = v["plan"].as_array().unwrap();
    assert!(
        plan.contains(&"nginx: worker_connections 2048; worker_rlimit_nofile 4096;".into()),
        "{v:#}"
    );
    let db = nginx.dir.path().join("runs.sqlite");
    let (v, code) = climb(&[&load[..], &["--steps", "1"]].concat(), &db, &nginx.url);
    assert_eq!(code, Some(1), "{v:#}");
    let why = v["steps"][0]["why"].as_str().unwrap();
    assert!(why.contains("pass --apply-server"), "{v:#}");
}

/// A rate limit is the user's to lift, not the climb's: nginx's `limit_req` at 200 r/s
/// answers the rest 503, and the climb stops there and says so, naming `--allow-limits`.
/// With it, the limit is removed from nginx's file for the change's runs, kept (many times
/// the limit's rate), and the file is back byte for byte at the end.
#[test]
fn a_rate_limit_is_lifted_only_when_allowed() {
    let _one = one_at_a_time();
    let nginx = common::rate_limited_nginx();
    let db = nginx.dir.path().join("runs.sqlite");
    let load = ["-c", "8", "--budget", "60s"];
    let (v, code) =
        climb(&[&load[..], &["--steps", "1", "--apply-server"]].concat(), &db, &nginx.url);
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["steps"][0]["verdict"], "stopped", "{v:#}");
    assert!(v["steps"][0]["why"].as_str().unwrap().contains("--allow-limits"), "{v:#}");
    let allowed = [&load[..], &["--allow-limits"]].concat();
    let v = kept_on_nginx(&nginx, &allowed, "nginx limit_req off (--allow-limits)");
    assert!(v["steps"][0]["ratio_range"][0].as_f64().unwrap() > 3.0, "{v:#}");
}

/// A gRPC server's own limit (grpcio taking two calls at once, the others RESOURCE_EXHAUSTED)
/// is the user's to lift too: the climb over gRPC calls stops at once and says so.
#[test]
fn a_grpc_servers_limit_stops_the_climb() {
    let _one = one_at_a_time();
    let server = qpslab_testkit::grpcio::Grpcio::start_with(&["--limit", "2"]);
    let db = tempfile::tempdir().unwrap();
    let db = db.path().join("runs.sqlite");
    let args = ["--grpc", "test.Echo/Echo", "-c", "8", "--streams", "4", "--steps", "1"];
    let (v, code) = climb(&[&args[..], &["--budget", "60s"]].concat(), &db, &server.url());
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["steps"][0]["verdict"], "stopped", "{v:#}");
    let why = v["steps"][0]["why"].as_str().unwrap();
    assert!(why.contains("a limit sets the rate") && why.contains("RESOURCE_EXHAUSTED"), "{v:#}");
}

/// nginx out of descriptors (worker_rlimit_nofile 40, 100 connections) fails the run: its log
/// says "Too many open files" and heads; the worker's full table follows. The run fails, but
/// a finding names a limit in the climb's hands, so the climb raises `worker_rlimit_nofile`
/// (tune's value) and keeps it from the failing start.
#[test]
fn nginx_out_of_descriptors_is_climbed_from() {
    let _one = one_at_a_time();
    let nginx = common::descriptor_starved_nginx();
    kept_on_nginx(
        &nginx,
        &["-c", "100", "--budget", "90s"],
        "nginx worker_rlimit_nofile 40 -> 8192",
    );
}

/// nginx closing every connection after its response (`keepalive_timeout 0`): the doctor
/// names the connection per response, and the climb turns keep-alive on in nginx's file and
/// keeps it.
#[test]
fn nginx_without_keep_alive_is_given_it() {
    let _one = one_at_a_time();
    let nginx = common::NginxWithCosts::start_with(
        0,
        "worker_connections 1024;",
        "keepalive_timeout 0;",
        "",
    );
    kept_on_nginx(&nginx, &["-c", "8", "--budget", "60s"], "nginx keepalive_timeout 0 -> 75s");
}

/// nginx asking the kernel for a listen queue of 8 (`listen ... backlog=8`), in front of an
/// application answering in 100 ms, under a storm of new connections (256, a connection per
/// request): the SYNs past its queue are dropped and wait a second for their retransmission,
/// so most of the load's connections answer nothing. The doctor names the queue (the SYN
/// queue's drops, or the accept queue's overflows), whose host cap (`net.core.somaxconn`) is
/// not the climb's here (no --apply-host), so it raises nginx's own `backlog=` to tune's value
/// and keeps it: every connection in service again, several times the rate by Little's law.
#[test]
fn nginx_with_a_short_listen_queue_gets_a_longer_one() {
    let _one = one_at_a_time();
    let app = slow_server();
    let location = format!("proxy_pass http://{};", app.addr);
    let nginx = common::NginxWithCosts::start_listen("backlog=8", &location);
    let db = nginx.dir.path().join("runs.sqlite");
    let load = ["--conn-per-request", "-c", "256", "--steps", "1", "--budget", "90s"];
    let (v, code) =
        climb(&[&load[..], &["--apply-server"]].concat(), &db, &format!("{}?t=100", nginx.url));
    assert_eq!(code, Some(0), "{v:#}");
    let step = &v["steps"][0];
    assert!(
        ["syn-queue-full", "accept-queue-overflow"].contains(&step["finding"].as_str().unwrap()),
        "{v:#}"
    );
    assert_eq!(step["change"], "nginx listen ... backlog 8 -> 65535", "{v:#}");
    assert_eq!(step["verdict"], "kept", "{step}");
    assert!(step["ratio_range"][0].as_f64().unwrap() > 2.0, "{step}");
    let plan = v["plan"].as_array().unwrap();
    assert!(plan.iter().any(|p| p == "nginx: listen ... backlog=65535;"), "{plan:?}");
    let now = std::fs::read_to_string(&nginx.conf).unwrap();
    assert_eq!(now, nginx.original, "restored byte for byte");
}

/// The workers of nginx's master `pid`, each with the CPUs it may run on.
fn nginx_workers(pid: u32) -> Vec<String> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let mut cpus: Vec<String> = children
        .split_whitespace()
        .map(|w| {
            let status = std::fs::read_to_string(format!("/proc/{w}/status")).unwrap_or_default();
            let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:"));
            line.map_or("?".into(), |l| l.split_whitespace().last().unwrap_or("?").to_string())
        })
        .collect();
    cpus.sort();
    cpus
}

/// nginx's workers with their CPUs, `accept_mutex` and `reuseport`, edited as the climb edits
/// them on a real nginx (this 2-CPU host cannot show more workers paying: the generator needs
/// the other CPU, and the doctor rightly names the shared CPUs instead): each state is checked
/// by `nginx -t` on a copy and put in force by a reload (two workers, one on each CPU; a listen
/// socket per worker), a state nginx refuses is named and never written, and the original
/// comes back byte for byte with one worker again.
#[test]
fn nginx_workers_affinity_and_reuseport_are_real_edits_and_restored() {
    use qpslab_lab::climb::{server, Change};
    let _one = one_at_a_time();
    let nginx = common::NginxWithCosts::start(1);
    let master = nginx.master.id();
    let mut s = server::UserServer::nginx(&[master]).unwrap().expect("nginx in hand");
    assert_eq!(nginx_workers(master), ["0"]);
    let workers = Change::NginxWorkers { from: 1, to: 2, affinity: "auto".into() };
    let mut text = nginx.original.clone();
    for c in [workers, Change::NginxAcceptMutexOff, Change::NginxReuseport] {
        text = server::edit(&text, &c.nginx_edit().unwrap()).unwrap();
        s.check(&text).unwrap();
        s.put(&text).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&nginx.conf).unwrap(), text);
    assert_eq!(nginx_workers(master), ["0", "1"], "two workers, one per CPU: {text}");
    let port = nginx.url.trim_end_matches('/').rsplit(':').next().unwrap().to_string();
    let ss = std::process::Command::new("ss")
        .args(["-Hltn", "sport", "=", &format!(":{port}")])
        .output()
        .unwrap();
    let listening = String::from_utf8(ss.stdout).unwrap();
    assert_eq!(listening.lines().count(), 2, "a listen socket per worker: {listening}");
    let refused = format!("qpslab_nonesuch on;\n{text}");
    let e = s.check(&refused).unwrap_err();
    assert!(e.starts_with("nginx -t refused it") && e.contains("qpslab_nonesuch"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&nginx.conf).unwrap(),
        text,
        "a refused state is not written"
    );
    s.restore().unwrap();
    assert_eq!(std::fs::read_to_string(&nginx.conf).unwrap(), nginx.original);
    assert_eq!(nginx_workers(master), ["0"]);
    assert!(!s.backup().exists());
}

/// Waits until `path` exists (at most 30 s): the climb's first write to nginx's configuration.
fn wait_for(path: &std::path::Path) {
    for _ in 0..300 {
        if path.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{} never appeared", path.display());
}

/// A climb of a user's nginx stopped mid-step: by Ctrl-C, it ends the run in progress, puts
/// the original configuration back byte for byte and says it was stopped (exit 1); by kill -9,
/// the original is left beside the file, byte for byte, to copy back.
#[test]
fn a_climb_stopped_mid_step_leaves_nginx_restored_or_restorable() {
    let _one = one_at_a_time();
    for signal in ["INT", "KILL"] {
        let nginx = common::NginxWithCosts::start(3);
        let dir = nginx.dir.path();
        let backup = dir.join("nginx.conf.qpslab-original");
        let child = qpslab_command()
            .args(["climb", "--json", "--apply-server", "-d", "1s", "--warmup", "200ms"])
            .arg("--store")
            .arg(dir.join("runs.sqlite"))
            .arg(&nginx.url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&backup);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let out = child.wait_with_output().unwrap();
        if signal == "INT" {
            assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
            assert!(json(&out)["ended"].as_str().unwrap().starts_with("stopped"));
            assert_eq!(std::fs::read_to_string(&nginx.conf).unwrap(), nginx.original);
            assert!(!backup.exists(), "the copy is removed once the original is back");
        } else {
            assert_eq!(std::fs::read_to_string(&backup).unwrap(), nginx.original);
        }
    }
}

/// The namespace rig: `qpslab serve` (one worker, CPU 1) in one namespace, the climb and its
/// generator (CPU 0) in the other, a veth between, started from poor settings: one connection,
/// and RPS off with all receive work on one CPU.
struct Rig {
    pair: common::NsPair,
    server: std::process::Child,
    /// The generator's veth, in `pair.b`.
    dev: String,
    url: String,
    dir: tempfile::TempDir,
}

impl Rig {
    fn start(n: u8) -> Rig {
        let pair = common::NsPair::create("cl", n);
        let dev = format!("qcl{}b", std::process::id() % 100_000);
        let listen = format!("10.77.{n}.1:18080");
        let server = std::process::Command::new("ip")
            .args(["netns", "exec", &pair.a, "taskset", "-c", "1", env!("CARGO_BIN_EXE_qpslab")])
            .args(["serve", "-w", "1", "-l", &listen])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let dir = tempfile::tempdir().unwrap();
        Rig { pair, server, dev, url: format!("http://{listen}/"), dir }
    }

    fn journal(&self) -> std::path::PathBuf {
        self.dir.path().join("journal.json")
    }

    /// `qpslab ARGS` in the generator's namespace on CPU 0.
    fn qpslab(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.pair.b, "taskset", "-c", "0", env!("CARGO_BIN_EXE_qpslab")])
            .args(args);
        c
    }

    /// The climb with host changes, short runs, journaled in the test's directory.
    fn climb(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.qpslab(&["climb", "--apply-host", "--no-save", "-d", "1s"]);
        c.args(["--warmup", "200ms", "--journal"]).arg(self.journal());
        // The server is in another namespace, where no socket of the URL's names it: named,
        // its CPU is the server side's, not other work on the host.
        c.arg("--server-pid").arg(self.server.id().to_string()).args(args).arg(&self.url);
        c
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// On the rig, from 64 connections (the generator's CPU full), the climb tries the host change
/// the single receive queue names (RPS/RFS/XPS on the generator's veth) and reverts it: on
/// this 2-CPU VM steering receive work to the other CPU costs more than it saves (0.72x when
/// measured), so the test's rig makes it useless. After the climb every setting of the
/// namespace is byte-identical to before and the journal is gone. (From fewer connections the
/// climb doubles them first, as the rate-law test shows, and where the steering comes among
/// those steps depends on how near the generator's CPU is to full: one step from 64 is exact.)
#[test]
fn on_a_namespace_pair_a_host_change_that_costs_is_reverted_exactly() {
    let _one = one_at_a_time();
    let rig = Rig::start(31);
    let before = settings(&rig.pair.b, &rig.dev);
    let out =
        rig.climb(&["--json", "-c", "64", "--steps", "1", "--budget", "60s"]).output().unwrap();
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{v:#}");
    let steer = &steps[0];
    assert_eq!(steer["knob"], serde_json::json!({"knob": "steering", "iface": rig.dev}), "{v:#}");
    assert_eq!(steer["finding"], "single-rx-queue", "{steer}");
    assert_eq!(steer["verdict"], "reverted", "{v:#}");
    assert!(v["ended"].as_str().unwrap().contains("1 step(s) measured"), "{}", v["ended"]);
    same(&settings(&rig.pair.b, &rig.dev), &before, "after the climb");
    assert!(!rig.journal().exists(), "no journal left");
    assert!(v["plan"].as_array().unwrap().iter().all(|p| !p.as_str().unwrap().starts_with("host")));
}

/// Stopped while a host change is in force: Ctrl-C reverts it before the climb exits (1);
/// kill -9 leaves the journal, and `qpslab tune revert` with it restores every setting byte
/// for byte. Starting at 64 connections the first change is the host's.
#[test]
fn a_climb_stopped_with_a_host_change_in_force_leaves_the_host_restorable() {
    let _one = one_at_a_time();
    let rig = Rig::start(32);
    let before = settings(&rig.pair.b, &rig.dev);
    for signal in [libc::SIGINT, libc::SIGKILL] {
        let child = rig
            .climb(&["-c", "64", "--budget", "60s"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        until_steered(&rig, std::time::Duration::from_secs(60));
        // `ip netns exec` and taskset exec: the child is the climb.
        // SAFETY: kill() on the PID of our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if signal == libc::SIGINT {
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(!rig.journal().exists(), "reverted before exit: {err}");
        } else {
            assert!(rig.journal().exists(), "kill -9 leaves the journal");
            let revert = rig.qpslab(&["tune", "revert", "--journal"]).arg(rig.journal()).output();
            let revert = revert.unwrap();
            assert!(revert.status.success(), "{}", String::from_utf8_lossy(&revert.stderr));
        }
        same(&settings(&rig.pair.b, &rig.dev), &before, &format!("after signal {signal}: {err}"));
    }
}

/// A host change that pays, kept, and the final state as a file for another host. In a
/// namespace whose listen queues hold 2 connections (`net.core.somaxconn = 2`, the
/// namespace's own), a connection per request from 256 at once overflows them: dropped SYNs
/// wait a second to be sent again. The climb, there with the built-in server it starts per run
/// (each run listens anew, under the setting in force), raises the queue where the overflow
/// names it and keeps it (about 1.2x when measured by hand). Its state file, applied by `tune
/// apply --from` in a second namespace of the same shape, sets the same value there, and
/// `tune revert` puts it back; both namespaces' settings are byte-identical after.
#[test]
fn a_host_change_that_pays_is_kept_and_its_state_file_applies_elsewhere() {
    let _one = one_at_a_time();
    let pair = common::NsPair::create("st", 33);
    let id = std::process::id() % 100_000;
    let (dev_a, dev_b) = (format!("qst{id}a"), format!("qst{id}b"));
    for ns in [&pair.a, &pair.b] {
        common::NsPair::run(ns, &["sysctl", "-qw", "net.core.somaxconn=2"]);
    }
    let before = (settings(&pair.a, &dev_a), settings(&pair.b, &dev_b));
    let dir = tempfile::tempdir().unwrap();
    let (file, journal) = (dir.path().join("state.toml"), dir.path().join("journal.json"));
    let in_ns = |ns: &str, args: &[&str]| {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_qpslab")]).args(args);
        if args[0] != "tune" || args[1] != "plan" {
            c.arg("--journal").arg(&journal);
        }
        c
    };
    let out = in_ns(&pair.b, &["climb", "--apply-host", "--no-save", "--json", "--steps", "1"])
        .args([
            "--target",
            "builtin",
            "--conn-per-request",
            // 32 connections, not 256: with 256 the debug generator is at its CPU either way
            // and the change gained 1.09-1.13x (a CI run's pairs 0.95-1.22: within noise);
            // with 32 each connection waiting out a SYN's timer is a larger share: 1.29-1.31x,
            // pairs 1.23-1.44.
            "-c",
            "32",
            // 2 s runs: with 1 s, one run slowed by this VM (13.9k/s among 19.3k/s) once put
            // the change's gain within noise, and the climb rightly reverted it.
            "-d",
            "2s",
            "--warmup",
            "200ms",
        ])
        // Seven pairs: a SYN waiting out its 1 s timer makes runs of this setting uneven (pairs
        // from 1.04x to 1.75x; with five, 0.94x to 1.34x in a CI run), and three all-faster
        // pairs can be noise (1 in 8).
        .args(["--repeats", "7", "--budget", "150s", "--state-file"])
        .arg(&file)
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    let step = &v["steps"][0];
    // Both queues overflow (the SYN queue too, when cookies pass its rate): either names
    // somaxconn first, which caps both.
    let finding = step["finding"].as_str().unwrap();
    assert!(["accept-queue-overflow", "syn-queue-full"].contains(&finding), "{v:#}");
    assert_eq!(
        step["knob"],
        serde_json::json!({"knob": "sysctl", "name": "net.core.somaxconn", "from": "2", "to": "65535"})
    );
    assert_eq!(step["verdict"], "kept", "{v:#}");
    assert!(step["ratio_range"][0].as_f64().unwrap() > 1.0, "{step}");
    assert_eq!(v["host_settings"]["sysctl"]["net.core.somaxconn"], "65535", "{v:#}");
    same(&settings(&pair.b, &dev_b), &before.1, "the climb's namespace after it");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"net.core.somaxconn\" = \"65535\""), "{text}");
    let plan = in_ns(&pair.a, &["tune", "plan", "--json", "--from"]).arg(&file).output().unwrap();
    let plan = json(&plan);
    let change =
        plan["changes"].as_array().unwrap().iter().find(|c| c["setting"] == "net.core.somaxconn");
    let change = change.unwrap_or_else(|| panic!("{plan:#}"));
    assert_eq!((&change["current"], &change["planned"]), (&"2".into(), &"65535".into()));
    let apply =
        in_ns(&pair.a, &["tune", "apply", "--yes"]).arg("--from").arg(&file).output().unwrap();
    assert!(apply.status.success(), "{}", String::from_utf8_lossy(&apply.stderr));
    let now = common::NsPair::run(&pair.a, &["sysctl", "-n", "net.core.somaxconn"]);
    assert_eq!(String::from_utf8_lossy(&now.stdout).trim(), "65535");
    let revert = in_ns(&pair.a, &["tune", "revert"]).output().unwrap();
    assert!(revert.status.success(), "{}", String::from_utf8_lossy(&revert.stderr));
    same(&settings(&pair.a, &dev_a), &before.0, "the other namespace after tune revert");
}

/// Waits until the rig's generator veth has RPS on (the climb's host change in force), or
/// fails after `limit`.
fn until_steered(rig: &Rig, limit: std::time::Duration) {
    let path = format!("/sys/class/net/{}/queues/rx-0/rps_cpus", rig.dev);
    let deadline = std::time::Instant::now() + limit;
    loop {
        let out = common::NsPair::run(&rig.pair.b, &["cat", &path]);
        let mask = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if u64::from_str_radix(&mask, 16).is_ok_and(|m| m != 0) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "RPS never on: {mask}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `--server-config TEMPLATE:FILE --server-reload CMD` on a server of the user's own kind: the
/// start's one worker is written into its file and put in force; one connection more gains
/// nothing (it serves a request at a time per worker), so the climb gives it a worker through
/// its template, which doubles the rate, and keeps it (the second step; `--steps 2`); at the end the user's file is back byte
/// for byte with nothing beside it.
#[test]
fn a_users_server_gets_workers_through_its_template_and_its_file_back() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (template, file) = (dir.path().join("pool.tmpl"), dir.path().join("pool.conf"));
    std::fs::write(&template, "workers = {{workers}}\n").unwrap();
    let original = "workers = 1   # as the user left it\n";
    std::fs::write(&file, original).unwrap();
    let mut server = common::pool_server(&file, 18131);
    let reload = format!("kill -HUP {}", server.id());
    let config = format!("{}:{}", template.display(), file.display());
    let out = qpslab_command()
        .args(["climb", "--json", "--no-save", "-d", "1s", "--warmup", "300ms", "-c", "4"])
        .args(["--steps", "2", "--budget", "45s", "--apply-server", "-w", "1"])
        .args(["--server-config", &config])
        .args(["--server-reload", &reload, "http://127.0.0.1:18131/"])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    let steps = v["steps"].as_array().unwrap();
    let more = steps
        .iter()
        .find(|s| s["knob"]["knob"] == "server-workers")
        .unwrap_or_else(|| panic!("a step of the server's workers: {v:#}"));
    assert_eq!(more["change"], "server workers (its template) 1 -> 2", "{more}");
    assert_eq!(more["verdict"], "kept", "{more}");
    let ratio = more["ratio"].as_f64().unwrap();
    assert!((1.7..=2.3).contains(&ratio), "a second serial worker doubles the rate: {more}");
    assert!(
        v["plan"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().starts_with("server: {{workers}} = ")),
        "{v}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original, "the user's file back");
    let beside = dir.path().join("pool.conf.qpslab-original");
    assert!(!beside.exists(), "nothing left beside it");
}

/// A server of the user's kind whose descriptor limit comes from its file (`nofile = N`, put
/// in force at start and on SIGHUP, as nginx's `worker_rlimit_nofile` is), each answer after
/// 20 ms of waiting (asyncio, which stops accepting for a second when accept() fails for
/// descriptors). Bounded: it exits by itself after 600 s.
const LIMITED_SERVER: &str = r#"
import asyncio, resource, signal, sys
conf, port = sys.argv[1], int(sys.argv[2])
def limit():
    n = int(open(conf).read().split('=')[1].split()[0])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
async def serve(r, w):
    try:
        while True:
            await r.readuntil(b'\r\n\r\n')
            await asyncio.sleep(0.02)
            w.write(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def main():
    limit()
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, limit)
    s = await asyncio.start_server(serve, '127.0.0.1', port, backlog=1024)
    print('ready', flush=True)
    try:
        await asyncio.wait_for(s.serve_forever(), 600)
    except asyncio.TimeoutError:
        pass
asyncio.run(main())
"#;

/// The soft descriptor limit of process `pid` (`Max open files` in its limits).
fn nofile_of(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
    line.split_whitespace().nth(3).unwrap().to_string()
}

/// A failing start of the user's own server, through its template's `{{nofile}}`: at a limit
/// of 48 descriptors it holds about 40 of the load's 100 connections and the other 60 wait
/// in its accept queue without an answer. The doctor names the server's own descriptors
/// (fd-limit-close on its pid), the climb raises the limit through the template, and keeps it
/// (every connection answered: 2.5 times the rate by Little's law). At the end the user's file
/// is back byte for byte and in force: the server's limit is 48 again. A template naming
/// `{{nofile}}` without `--server-nofile` (the limit to start from) is refused before any run.
#[test]
fn a_users_server_out_of_descriptors_gets_them_through_its_template() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (template, file) = (dir.path().join("limit.tmpl"), dir.path().join("limit.conf"));
    std::fs::write(&template, "nofile = {{nofile}}\n").unwrap();
    let original = "nofile = 48   # as the user left it\n";
    std::fs::write(&file, original).unwrap();
    let port = common::free_port();
    let mut server = std::process::Command::new("python3")
        .args(["-c", LIMITED_SERVER, &file.display().to_string(), &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    let mut ready = String::new();
    let out = server.stdout.take().expect("its stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let pid = server.id();
    assert_eq!(nofile_of(pid), "48");
    let reload = format!("kill -HUP {pid}");
    let config = format!("{}:{}", template.display(), file.display());
    let url = format!("http://127.0.0.1:{port}/");
    let climb = |extra: &[&str]| {
        qpslab_command()
            .args(["climb", "--json", "--no-save", "-d", "1s", "--warmup", "300ms", "-c", "100"])
            .args(["--steps", "1", "--budget", "60s", "--apply-server"])
            .args(["--server-config", &config, "--server-reload", &reload])
            .args(extra)
            .arg(&url)
            .output()
            .unwrap()
    };
    let refused = climb(&[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("{{nofile}}") && err.contains("--server-nofile"), "{err}");
    let out = climb(&["--server-nofile", "48"]);
    // The server reloads on SIGHUP in its own time: its limit is read until it is the original
    // again, for 3 s at most.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut after = nofile_of(pid);
    while after != "48" && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
        after = nofile_of(pid);
    }
    let _ = server.kill();
    let _ = server.wait();
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    let step = &v["steps"][0];
    assert_eq!(step["finding"], "fd-limit-close", "{v:#}");
    assert_eq!(step["change"], "server descriptor limit (its template) 48 -> 8192", "{step}");
    assert_eq!(step["verdict"], "kept", "{step}");
    assert!(step["ratio"].as_f64().unwrap() >= 2.0, "every connection answered: {step}");
    let plan = v["plan"].as_array().unwrap();
    assert!(plan.iter().any(|p| p == "server: {{nofile}} = 8192"), "{plan:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original, "the user's file back");
    assert_eq!(after, "48", "the original in force again");
    assert!(!dir.path().join("limit.conf.qpslab-original").exists(), "nothing left beside it");
}
