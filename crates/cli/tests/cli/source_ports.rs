//! `--source` with a port range: connections bind their ports in turn, a port another
//! socket holds is skipped, and a tuple in TIME_WAIT is taken again at once (a bound port's
//! connect reuses it; the kernel's own choice waits a second, and searches).

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use crate::common::Netns;

/// In a namespace of the test's own, the server listens on 127.0.0.1:20050 and the load binds
/// `--source 127.0.0.1:20000-20099`, the listener's port among them. 2,000 HTTP/2
/// connections, one per request (the generator closes each first, so each leaves its tuple in
/// TIME_WAIT), over 100 ports: every request is answered and none fails (the listener's port
/// is skipped, not an error), and the tuples in TIME_WAIT after the run are on ports of the
/// range but the listener's, one per port. Outside the kernel's ephemeral range (32768-60999
/// here), the run leaves nothing other programs' connects would miss, so no note says so;
/// inside it, the run notes that it does.
#[test]
fn source_ports_are_taken_in_turn_a_held_one_skipped_and_time_wait_reused() {
    let ns = Netns::create("sprt");
    let set = "ip link set lo up; echo '32768 60999' > /proc/sys/net/ipv4/ip_local_port_range";
    let out =
        Command::new("ip").args(["netns", "exec", &ns.name, "sh", "-c", set]).output().unwrap();
    assert!(out.status.success(), "{set}");
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_qpslab")])
        .args(["serve", "-l", "127.0.0.1:20050", "-w", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listening = std::time::Instant::now();
    while !ns_cmd(&ns, &["ss", "-Hltn", "sport", "=", ":20050"]).contains("20050") {
        assert!(listening.elapsed().as_secs() < 10, "the server did not listen");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let url = "http://127.0.0.1:20050/";
    let out = ns.exec(&[
        "load",
        "--h2",
        "--conn-per-request",
        "--source",
        "127.0.0.1:20000-20099",
        "-t",
        "1",
        "-c",
        "10",
        "-n",
        "2000",
        "--timeout",
        "5s",
        "--json",
        url,
    ]);
    let tw = ns_cmd(&ns, &["ss", "-Htan", "state", "time-wait"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["requests"]["ok"], 2000, "{stderr}");
    assert_eq!(v["requests"]["failed"], 0, "{}", v["error_examples"]);
    // `Recv-Q Send-Q Local:Port Peer:Port`: the generator's side has the server as its peer.
    let ports: Vec<u16> = tw
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(3) == Some(&"127.0.0.1:20050"))
                .then(|| f[2].rsplit(':').next().unwrap().parse().unwrap())
        })
        .collect();
    let distinct: BTreeSet<u16> = ports.iter().copied().collect();
    assert_eq!(distinct.len(), ports.len(), "one tuple per port: {tw}");
    // The reachability check before the run connects once from a port the kernel picks.
    let (ours, kernels): (Vec<u16>, Vec<u16>) =
        ports.iter().partition(|&&p| (20000..=20099).contains(&p));
    assert!(kernels.len() <= 1 && kernels.iter().all(|&p| p >= 32768), "{ports:?}");
    assert!(ours.len() >= 90 && !ours.contains(&20050), "{ours:?}");
    assert!(!stderr.contains("ephemeral range"), "{stderr}");

    // Inside the ephemeral range: said before the run.
    let out = ns.exec(&["load", "--source", "127.0.0.1:40000-40099", "-n", "10", url]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "--source ports 40000-40099 overlap the kernel's ephemeral range 32768-60999"
        ),
        "{stderr}"
    );
    let _ = server.kill();
    let _ = server.wait();
}

fn ns_cmd(ns: &Netns, args: &[&str]) -> String {
    let out = Command::new("ip").args(["netns", "exec", &ns.name]).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
