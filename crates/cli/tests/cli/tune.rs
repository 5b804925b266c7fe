//! `qpslab tune` end to end: on synthetic trees (plan, apply, status, revert, refusals, a real
//! failed write) and on the real kernel inside a network namespace this test creates.

use super::common::Netns;
use super::{qpslab, usage_error};
use qpslab_testkit::Shape;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn synthetic(shape: &Shape) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    shape.write(dir.path()).unwrap();
    dir
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    qpslab_testkit::snapshot(dir).unwrap()
}

fn with_stdin(args: &[&str], input: &str) -> Output {
    let mut child = crate::common::qpslab_command()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tune_plan_apply_status_revert_on_a_synthetic_tree() {
    let dir = synthetic(&Shape::two_nodes_two_nics());
    let root = dir.path().to_str().unwrap();
    let jdir = tempfile::tempdir().unwrap();
    let journal = jdir.path().join("journal.json");
    let journal = journal.to_str().unwrap();
    let before = snapshot(dir.path());

    let plan: serde_json::Value =
        serde_json::from_str(&ok(&qpslab(&["tune", "plan", "--root", root, "--json"]))).unwrap();
    let changes = plan["changes"].as_array().unwrap();
    assert!(changes.len() > 10);
    assert!(changes.iter().all(|c| c["reason"].is_string() && c["source"].is_string()));
    assert_eq!(plan["command"], "qpslab serve --workers 24 --cpus 2-7,10-15,18-23,26-31");
    let text = ok(&qpslab(&["tune", "plan", "--root", root]));
    assert!(text.contains("eth0 rx-0 IRQ 100 affinity") && text.contains("0-31 -> 0"), "{text}");
    assert!(text.contains("net.ipv4.tcp_tw_recycle: never set"), "{text}");
    let serve = ok(&qpslab(&["tune", "plan", "--root", root, "--emit", "serve"]));
    assert_eq!(serve, "qpslab serve --workers 24 --cpus 2-7,10-15,18-23,26-31\n");

    // Without --yes: asks; "n" leaves everything as it was, a closed stdin is a usage error.
    let out = with_stdin(&["tune", "apply", "--root", root, "--journal", journal], "n\n");
    assert!(ok(&out).contains("Not applied."));
    let out = with_stdin(&["tune", "apply", "--root", root, "--journal", journal], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --yes"));
    assert!(snapshot(dir.path()) == before && !Path::new(journal).exists());

    let out = with_stdin(&["tune", "apply", "--root", root, "--journal", journal], "y\n");
    let text = ok(&out);
    assert!(text.contains(&format!("Applied {} changes", changes.len())), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("proc/irq/100/smp_affinity")).unwrap(),
        "00000001\n"
    );
    let again = ok(&qpslab(&["tune", "plan", "--root", root]));
    assert!(again.contains("Nothing to change"), "{again}");
    // A second apply is refused while the journal is active.
    usage_error(
        &["tune", "apply", "--root", root, "--journal", journal, "--yes"],
        "already active",
    );

    let status: serde_json::Value = serde_json::from_str(&ok(&qpslab(&[
        "tune",
        "status",
        "--root",
        root,
        "--journal",
        journal,
        "--json",
    ])))
    .unwrap();
    let entries = status["entries"].as_array().unwrap();
    assert_eq!(entries.len(), changes.len());
    assert!(entries.iter().all(|e| e["state"] == "applied"));

    // Someone else changes a value: revert keeps it and exits 1; --force restores it.
    let budget = dir.path().join("proc/sys/net/core/netdev_budget");
    std::fs::write(&budget, "900\n").unwrap();
    let out = qpslab(&["tune", "revert", "--root", root, "--journal", journal]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("kept")
            && text.contains("net.core.netdev_budget")
            && text.contains("now 900"),
        "{text}"
    );
    let text = ok(&qpslab(&["tune", "status", "--root", root, "--journal", journal]));
    assert!(text.contains("changed"), "{text}");
    let text = ok(&qpslab(&["tune", "revert", "--root", root, "--journal", journal, "--force"]));
    assert!(text.contains("journal") && text.contains("removed"), "{text}");
    assert!(snapshot(dir.path()) == before, "apply then revert is byte-identical");
    let text = ok(&qpslab(&["tune", "revert", "--root", root, "--journal", journal]));
    assert!(text.contains("nothing to revert"), "{text}");
    let text = ok(&qpslab(&["tune", "status", "--root", root, "--journal", journal]));
    assert!(text.contains("No active tune journal"), "{text}");
}

#[test]
fn tune_bad_flags_and_refusals() {
    let dir = synthetic(&Shape::two_nodes_two_nics());
    let root = dir.path().to_str().unwrap();
    usage_error(&["tune", "plan", "--root", root, "--irq-cpus", "0-99"], "--irq-cpus");
    usage_error(&["tune", "plan", "--root", root, "--irq-cpus", "x"], "--irq-cpus");
    usage_error(&["tune", "plan", "--root", root, "--workers", "0"], "--workers 0");
    usage_error(&["tune", "plan", "--root", root, "--iface", "eth9"], "--iface eth9");
    usage_error(&["tune", "plan", "--root", root, "--role", "proxy"], "--role");
    usage_error(&["tune", "plan", "--root", root, "--emit", "apache"], "--emit");
    usage_error(&["tune", "plan", "--root", "/nonexistent-root"], "--root /nonexistent-root");
    usage_error(&["tune", "frobnicate"], "frobnicate");
    // A state file: missing, not TOML, an unknown key, a setting the host lacks, and mixed
    // with the planner's flags.
    let states = tempfile::tempdir().unwrap();
    let state = |name: &str, text: &str| {
        let p = states.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    usage_error(
        &["tune", "plan", "--root", root, "--from", "/nonexistent.toml"],
        "--from /nonexistent.toml",
    );
    let bad = state("bad.toml", "[sysctl\n");
    usage_error(&["tune", "plan", "--root", root, "--from", &bad], &format!("--from {bad}"));
    let unknown = state("unknown.toml", "rsp = {}\n");
    usage_error(&["tune", "plan", "--root", root, "--from", &unknown], "unknown field `rsp`");
    let missing = state("missing.toml", "[sysctl]\n\"net.core.nonesuch\" = 1\n");
    usage_error(&["tune", "plan", "--root", root, "--from", &missing], "net.core.nonesuch");
    let ok_file = state("ok.toml", "[sysctl]\n\"net.core.somaxconn\" = 65535\n");
    usage_error(
        &["tune", "plan", "--root", root, "--from", &ok_file, "--workers", "2"],
        "--workers",
    );

    // irqbalance in the tree: refused, or journaled with --stop-irqbalance (not a live host, so
    // nothing is signalled).
    std::fs::create_dir_all(dir.path().join("proc/4242")).unwrap();
    std::fs::write(dir.path().join("proc/4242/comm"), "irqbalance\n").unwrap();
    let jdir = tempfile::tempdir().unwrap();
    let journal = jdir.path().join("j.json");
    let journal = journal.to_str().unwrap();
    usage_error(
        &["tune", "apply", "--root", root, "--journal", journal, "--yes"],
        "irqbalance (pid 4242)",
    );
    let text = ok(&qpslab(&[
        "tune",
        "apply",
        "--root",
        root,
        "--journal",
        journal,
        "--yes",
        "--stop-irqbalance",
    ]));
    assert!(text.contains("irqbalance (pid 4242) stopped"), "{text}");
    ok(&qpslab(&["tune", "revert", "--root", root, "--journal", journal]));

    // Not root on the live host: refused before anything is read or written.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_qpslab")])
        .args(["tune", "apply", "--yes", "--journal", "/nonexistent/j.json"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run it as root"));
}

/// Removes the immutable flag on drop, so a failed assertion does not leave an undeletable file.
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: PathBuf) -> Option<Self> {
        let ok = Command::new("chattr").arg("+i").arg(&path).status().is_ok_and(|s| s.success());
        ok.then_some(Self(path))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn a_write_the_filesystem_refuses_rolls_back_and_exits_1() {
    let dir = synthetic(&Shape::small_virtio());
    let root = dir.path().to_str().unwrap();
    let jdir = tempfile::tempdir().unwrap();
    let journal = jdir.path().join("j.json");
    let before = snapshot(dir.path());
    // The last planned write (a sysctl) cannot be written, even by root.
    let Some(_guard) = Immutable::set(dir.path().join("proc/sys/net/core/netdev_budget")) else {
        panic!("chattr +i failed: this test needs a filesystem with immutable files (ext4, xfs, btrfs)");
    };
    let out =
        qpslab(&["tune", "apply", "--root", root, "--journal", journal.to_str().unwrap(), "--yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write") && stderr.contains("netdev_budget"), "{stderr}");
    assert!(
        stderr.contains("Operation not permitted") && stderr.contains("were restored"),
        "{stderr}"
    );
    assert!(snapshot(dir.path()) == before, "byte-identical after the roll-back");
    assert!(!journal.exists());
}

#[test]
fn tune_emit_nginx_is_a_valid_nginx_configuration() {
    let dir = synthetic(&Shape::two_packages_24_queues());
    let snippet = ok(&qpslab(&[
        "tune",
        "plan",
        "--root",
        dir.path().to_str().unwrap(),
        "--workers",
        "16",
        "--emit",
        "nginx",
    ]));
    assert!(snippet.contains("worker_processes 16;"), "{snippet}");
    let prefix = tempfile::tempdir().unwrap();
    let p = prefix.path().display();
    std::fs::create_dir_all(prefix.path().join("logs")).unwrap();
    let conf = prefix.path().join("nginx.conf");
    std::fs::write(&conf, format!("pid {p}/nginx.pid;\nerror_log {p}/error.log;\n{snippet}"))
        .unwrap();
    let out = Command::new("nginx")
        .args(["-t", "-p", &p.to_string(), "-c", conf.to_str().unwrap()])
        .output()
        .expect("nginx on PATH (scripts/test installs nginx-light)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn tune_in_a_network_namespace_changes_only_the_namespace() {
    let host_values = || {
        [
            "/proc/sys/net/core/somaxconn",
            "/proc/sys/net/ipv4/tcp_max_syn_backlog",
            "/proc/sys/net/core/netdev_max_backlog",
            "/proc/sys/net/core/rps_sock_flow_entries",
            "/proc/sys/fs/nr_open",
        ]
        .map(|p| std::fs::read_to_string(p).unwrap())
    };
    let host_before = host_values();
    let ns = Netns::create("tune");
    let ns_end = ns.ns_end.clone();
    let rps = format!("/sys/class/net/{ns_end}/queues/rx-0/rps_cpus");
    let (rps0, somax0, syn0) = (
        ns.read(&rps),
        ns.read("/proc/sys/net/core/somaxconn"),
        ns.read("/proc/sys/net/ipv4/tcp_max_syn_backlog"),
    );
    let jdir = tempfile::tempdir().unwrap();
    let journal = jdir.path().join("j.json");
    let journal = journal.to_str().unwrap();

    let plan: serde_json::Value =
        serde_json::from_str(&ok(&ns.exec(&["tune", "plan", "--json"]))).unwrap();
    assert!(plan["net_namespace"].as_str().unwrap().starts_with("net:["), "{plan}");
    assert_eq!(plan["interfaces"][0].as_str(), Some(ns_end.as_str()));
    let text = ok(&ns.exec(&["tune", "apply", "--yes", "--journal", journal]));
    assert!(text.contains(&format!("{ns_end} rx-0 rps_cpus")), "{text}");

    let online = qpslab_host::CpuSet::parse_list(
        &std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap(),
    )
    .unwrap();
    assert_eq!(qpslab_host::CpuSet::parse_mask(&ns.read(&rps)).unwrap(), online);
    assert_eq!(ns.read("/proc/sys/net/core/somaxconn"), "65535");
    assert_eq!(ns.read("/proc/sys/net/ipv4/tcp_max_syn_backlog"), "65535");
    assert_eq!(host_values(), host_before, "the host's own values are untouched");

    let text = ok(&ns.exec(&["tune", "revert", "--journal", journal]));
    assert!(text.contains("Every value is back"), "{text}");
    assert_eq!(ns.read(&rps), rps0);
    assert_eq!(ns.read("/proc/sys/net/core/somaxconn"), somax0);
    assert_eq!(ns.read("/proc/sys/net/ipv4/tcp_max_syn_backlog"), syn0);
    assert_eq!(host_values(), host_before);
}

/// Regression: where PID 1's namespace link is unreadable (this sandbox), the live host was
/// taken for a network namespace and its IRQs were left out of the plan.
#[test]
fn regression_unreadable_pid1_namespace_link_is_not_a_namespace() {
    let plan: serde_json::Value =
        serde_json::from_str(&ok(&qpslab(&["tune", "plan", "--json"]))).unwrap();
    let initial = Path::new("/proc/sys/net/core/netdev_max_backlog").exists();
    assert_eq!(plan["net_namespace"].is_null(), initial, "{}", plan["net_namespace"]);
}
