//! `Host::read` on a tree captured from a real machine and on synthetic trees of bigger ones.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use qpslab_host::render::host_text;
use qpslab_host::{CpuSet, Host, Root};
use qpslab_testkit::Shape;
use std::path::PathBuf;

fn fixture(name: &str) -> Root {
    Root::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name))
}

fn synthetic(shape: &Shape) -> (tempfile::TempDir, Host) {
    let dir = tempfile::tempdir().unwrap();
    shape.write(dir.path()).unwrap();
    let host = Host::read(&Root::new(dir.path())).unwrap();
    (dir, host)
}

#[test]
fn captured_virtio_machine_linux_6_18() {
    let mut host = Host::read(&fixture("linux-6.18-virtio-2cpu")).unwrap();
    assert_eq!(host.online.to_list(), "0-1");
    assert_eq!((host.packages, host.cores), (1, 2));
    assert_eq!(host.clocksource.as_deref(), Some("tsc"));
    assert_eq!(host.sysctl("net.core.somaxconn"), Some("4096"));
    assert_eq!(host.sysctl("net.ipv4.ip_local_port_range"), Some("32768 60999"));
    let eth0 = host.nics.iter().find(|n| n.name == "eth0").unwrap();
    assert_eq!(eth0.driver.as_deref(), Some("virtio_net"));
    assert_eq!(eth0.numa_node, None, "numa_node -1 means unknown");
    assert_eq!(eth0.mtu, Some(1400));
    let rx = eth0.rx[0].irq.as_ref().unwrap();
    assert_eq!((rx.number, rx.name.as_str()), (38, "virtio2-input.0"));
    assert_eq!(rx.affinity.as_ref().unwrap().to_list(), "0-1");
    assert_eq!(rx.effective.as_ref().unwrap().to_list(), "1");
    assert_eq!(eth0.tx[0].irq.as_ref().unwrap().name, "virtio2-output.0");
    assert!(!eth0.rps_on());
    host.nofile = (1024, 4096); // this process's limit varies; pin it for the snapshot
    insta::assert_snapshot!(host_text(&host, false));
}

#[test]
fn two_numa_nodes_with_smt_and_two_nics() {
    let shape = Shape::two_nodes_two_nics();
    let (_dir, host) = synthetic(&shape);
    assert_eq!(host.online.len(), 32);
    assert_eq!((host.packages, host.cores), (2, 16));
    assert_eq!(host.nodes.len(), 2);
    assert_eq!(host.nodes[0].cpus.to_list(), "0-7,16-23");
    assert_eq!(host.nodes[1].cpus.to_list(), "8-15,24-31");
    assert_eq!(host.cpus[0].siblings.to_list(), "0,16");
    assert_eq!(host.cpus[17].node, Some(0));
    let eth0 = &host.nics[0];
    assert_eq!((eth0.driver.as_deref(), eth0.numa_node), (Some("i40e"), Some(0)));
    assert_eq!(
        eth0.rx.iter().map(|q| q.irq.as_ref().unwrap().name.as_str()).collect::<Vec<_>>(),
        ["eth0-TxRx-0", "eth0-TxRx-1"]
    );
    let eth1 = &host.nics[1];
    assert_eq!(eth1.numa_node, Some(1));
    // mlx5: the async vector serves no queue; completion vector N serves channel N.
    assert_eq!(eth1.rx[1].irq.as_ref().unwrap().name, "mlx5_comp1@pci:0000:3c:00.0");
    assert_eq!(eth1.tx[0].irq.as_ref().unwrap().name, "mlx5_comp0@pci:0000:3c:00.0");
    assert_eq!(eth1.rx_irq_cpus().to_list(), "0", "every queue delivered to CPU 0");
    assert_eq!(eth0.rx[0].irq.as_ref().unwrap().affinity.as_ref().unwrap().len(), 32);
}

#[test]
fn twenty_four_cpus_in_two_packages_and_24_queues() {
    let (_dir, host) = synthetic(&Shape::two_packages_24_queues());
    assert_eq!(host.online.len(), 24);
    assert_eq!(host.cpus[0].siblings.to_list(), "0,12");
    assert_eq!(host.nics.len(), 1);
    let eth0 = &host.nics[0];
    assert_eq!((eth0.rx.len(), eth0.tx.len()), (24, 24));
    // Natural order: rx-10 after rx-9, each with its own vector.
    for (i, q) in eth0.rx.iter().enumerate() {
        assert_eq!(q.index, i);
        assert_eq!(q.irq.as_ref().unwrap().name, format!("eth0-TxRx-{i}"));
    }
    let text = host_text(&host, false);
    assert!(text.contains("SMT 2 threads per core"), "{text}");
    assert!(text.contains("rx-23  irq 123 eth0-TxRx-23"), "{text}");
}

#[test]
fn masks_of_64_cpus_are_read_in_32_bit_groups() {
    let shape = Shape {
        packages: 2,
        cores_per_package: 16,
        threads_per_core: 2,
        ..Shape::two_nodes_two_nics()
    };
    let (dir, _) = synthetic(&shape);
    let irq = dir.path().join("proc/irq/100/smp_affinity");
    assert_eq!(std::fs::read_to_string(&irq).unwrap().trim(), "ffffffff,ffffffff");
    std::fs::write(&irq, "00000001,00000000\n").unwrap();
    std::fs::write(
        dir.path().join("sys/class/net/eth0/queues/rx-0/rps_cpus"),
        "0000ffff,00000000\n",
    )
    .unwrap();
    let host = Host::read(&Root::new(dir.path())).unwrap();
    let q = &host.nics[0].rx[0];
    assert_eq!(q.irq.as_ref().unwrap().affinity, Some(CpuSet::from_iter([32])));
    assert_eq!(q.rps_cpus.as_ref().unwrap().to_list(), "32-47");
    assert_eq!(host.cpus[0].siblings.to_list(), "0,32");
}

#[test]
fn a_root_without_proc_and_sys_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Host::read(&Root::new(dir.path())).unwrap_err().to_string();
    assert!(err.contains("sys/devices/system/cpu/online") && err.contains("--root"), "{err}");
}

/// The request path from the connections a server holds: this test process, holding a
/// connection to a listener of a child of its own (as a proxy holds one to its application),
/// finds that child behind it; a connection the test accepted (a client's) is not a hop.
#[test]
fn what_a_process_is_connected_to_is_behind_it() {
    use std::io::BufRead;
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n\
             print(s.getsockname()[1], flush=True)\nc, _ = s.accept(); time.sleep(30)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().parse().unwrap();
    // A client of ours too: a listener of this process with a connection accepted.
    let ours = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let _client = std::net::TcpStream::connect(ours.local_addr().unwrap()).unwrap();
    let _accepted = ours.accept().unwrap();
    let _upstream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let found = qpslab_host::upstream::upstreams(&Root::live(), &[std::process::id()]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].addr, format!("127.0.0.1:{port}"));
    assert_eq!(found[0].found_by, "connections");
    assert_eq!(found[0].pids, vec![child.id()]);
}
