//! `--profile` as a user runs it: bench's profile of the built-in server on loopback (the
//! server's CPU in TCP receive and transmit), the folded stacks file, and the doctor run without
//! the rights to profile.

use std::process::Command;

use serde_json::Value;

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn bench_profiles_the_servers_cpu_in_tcp_receive_and_transmit() {
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("stacks.folded");
    let out = super::common::qpslab_command()
        .args(["bench", "--no-save", "-d", "2", "--warmup", "0", "--json", "--profile"])
        .arg("--profile-out")
        .arg(&folded)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = json(&out);
    let p = &r["doctor"]["profile"];
    assert_eq!(p["available"], true, "{p}");
    assert_eq!((p["event"].as_str(), p["frequency_hz"].as_u64()), (Some("cpu-clock"), Some(499)));
    assert!(p.get("folded").is_none(), "folded stacks go to the file, not the JSON");
    let server_cpu = r["target"]["cpus"][0].as_u64().unwrap();
    let cpu = p["cpus"].as_array().unwrap().iter().find(|c| c["cpu"] == server_cpu).unwrap();
    // About 499 samples a second on that CPU for 2 s.
    assert!(cpu["samples"].as_u64().unwrap() > 600, "{cpu}");
    let share = |name: &str| {
        cpu["categories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map_or(0.0, |c| c["share"].as_f64().unwrap())
    };
    assert!(share("tcp-receive") > 0.05 && share("tcp-transmit") > 0.05, "{}", cpu["categories"]);
    let kernel: Vec<&str> =
        cpu["top_kernel"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    // Some function of the TCP/IP stack among the ten hottest (which ones varies by run: once
    // `__inet_lookup_established`, `ip_send_check` and `bbr_main` made it and no `tcp_*`).
    let stack = ["tcp_", "__tcp_", "inet_", "__inet_", "ip_", "__ip_", "bbr_", "skb_"];
    assert!(kernel.iter().any(|k| stack.iter().any(|p| k.starts_with(p))), "{kernel:?}");
    let pid = r["target"]["pids"][0].as_u64().unwrap();
    let server = p["processes"].as_array().unwrap().iter().find(|x| x["pid"] == pid).unwrap();
    assert_eq!(server["role"], "server", "{server}");
    let generator = p["processes"].as_array().unwrap().iter().find(|x| x["role"] == "generator");
    assert!(generator.is_some(), "this bench's own load threads: {}", p["processes"]);
    // Folded stacks: `comm;root;...;leaf count`, the server's TCP among them.
    let text = std::fs::read_to_string(&folded).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 20, "{text}");
    for l in &lines {
        let (stack, count) = l.rsplit_once(' ').unwrap();
        assert!(count.parse::<u64>().unwrap() > 0 && stack.contains(';'), "{l}");
    }
    assert!(lines.iter().any(|l| l.contains(";tcp_sendmsg")), "{text}");
    let total: u64 =
        lines.iter().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    assert_eq!(total, p["samples"].as_u64().unwrap(), "every sample in the file once");

    // The text: the category table and the server CPU's top symbols.
    let out = super::common::qpslab_command()
        .args(["bench", "--no-save", "-d", "1", "--warmup", "0", "--profile"])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("profile: cpu-clock at 499 Hz on"), "{t}");
    assert!(t.contains("net-rx   tcp-rx   tcp-tx  syscall"), "{t}");
    // Top symbols of the saturated CPUs, or of the busiest one: the server's or, as often on
    // two CPUs, the generator's.
    let detailed: Vec<&str> = t
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("CPU ")?.split_once(" kernel: "))
        .map(|(cpu, _)| cpu)
        .collect();
    assert!(!detailed.is_empty() && detailed.iter().all(|c| c.parse::<usize>().is_ok()), "{t}");
}

#[test]
fn without_the_rights_to_profile_the_doctor_runs_and_says_why() {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    let paranoid: i32 = paranoid.trim().parse().unwrap();
    assert!(
        paranoid > 0,
        "this test needs kernel.perf_event_paranoid > 0 (it is {paranoid}): unprivileged users may \
         profile every CPU here"
    );
    // As nobody, with every capability dropped: perf_event_open is refused; this host's own
    // setting is not touched.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .args(["--bounding-set=-all", "--"])
        .arg(env!("CARGO_BIN_EXE_qpslab"))
        .args(["doctor", "-d", "1", "--interval", "500ms", "--profile", "--json"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = json(&out);
    assert_eq!(r["profile"]["available"], false, "{}", r["profile"]);
    let why = r["profile"]["reason"].as_str().unwrap();
    assert!(
        why.contains(&format!("kernel.perf_event_paranoid is {paranoid}"))
            && why.contains("CAP_PERFMON"),
        "{why}"
    );
    assert!(r["summary"]["samples"].as_u64().unwrap() >= 2, "the doctor still sampled");
    let text = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .args(["--bounding-set=-all", "--"])
        .arg(env!("CARGO_BIN_EXE_qpslab"))
        .args(["doctor", "-d", "1", "--interval", "500ms", "--profile"])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.contains("profile: none (perf_event_open on CPU"), "{t}");
}

#[test]
fn profile_flags_are_checked() {
    super::usage_error(&["doctor", "-d", "1", "--profile-freq", "99"], "--profile");
    super::usage_error(
        &["doctor", "-d", "1", "--profile", "--profile-freq", "0"],
        "--profile-freq",
    );
    super::usage_error(&["bench", "--profile-out", "x.folded"], "--profile");
}
