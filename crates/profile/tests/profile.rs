//! The profiler on recorded stacks (a captured kallsyms excerpt, synthetic sample streams) and
//! on this machine's own CPUs (as root: the sampler opens every CPU).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use qpslab_profile::sampler::Stack;
use qpslab_profile::{Profile, ProfileOptions, RawProfile, Sampler, Symbols};
use qpslab_sys::root::Root;

fn kallsyms() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kallsyms-6.18-kvm.txt"))
}

/// The fixture's address of `name`, plus a few bytes: a frame inside it.
fn at(name: &str) -> u64 {
    let text = std::fs::read_to_string(kallsyms()).unwrap();
    let line =
        text.lines().find(|l| l.ends_with(&format!(" {name}"))).unwrap_or_else(|| panic!("{name}"));
    u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap() + 0x10
}

fn stack(cpu: u32, pid: u32, frames: &[&str]) -> Stack {
    Stack { cpu, pid, tid: pid, kernel: frames.iter().map(|f| at(f)).collect(), user: Vec::new() }
}

/// Seed 000's `perf top`: a third of a CPU spinning in `_raw_spin_unlock_irqrestore` under
/// `__wake_up_sync_key` <- `sock_def_readable` <- `tcp_rcv_established` ... <- `net_rx_action`.
const SEED_000: &[&str] = &[
    "_raw_spin_unlock_irqrestore",
    "__wake_up_sync_key",
    "sock_def_readable",
    "tcp_rcv_established",
    "tcp_v4_do_rcv",
    "tcp_v4_rcv",
    "ip_protocol_deliver_rcu",
    "ip_local_deliver_finish",
    "ip_local_deliver",
    "ip_rcv",
    "__netif_receive_skb_one_core",
    "__netif_receive_skb",
    "process_backlog",
    "__napi_poll",
    "net_rx_action",
    "handle_softirqs",
];

#[test]
fn recorded_stacks_get_their_symbols_and_categories() {
    let mut raw = RawProfile { frequency_hz: 499, cpus: vec![0, 1], ..RawProfile::default() };
    let mut add = |s: Stack, n: u64| {
        raw.samples += n;
        raw.stacks.insert(s, n);
    };
    add(stack(0, 0, SEED_000), 36);
    add(stack(0, 0, &["tcp_rcv_established", "tcp_v4_do_rcv", "net_rx_action", "do_idle"]), 20);
    add(stack(0, 0, &["pv_native_safe_halt", "default_idle", "do_idle", "cpu_startup_entry"]), 44);
    add(
        stack(
            1,
            7,
            &[
                "__task_pid_nr_ns",
                "__x64_sys_getppid",
                "do_syscall_64",
                "entry_SYSCALL_64_after_hwframe",
            ],
        ),
        50,
    );
    add(
        stack(1, 7, &["__tcp_transmit_skb", "tcp_write_xmit", "tcp_sendmsg_locked", "tcp_sendmsg"]),
        20,
    );
    add(stack(1, 7, &["read_tsc", "ktime_get", "tcp_sendmsg_locked"]), 10);
    add(stack(1, 7, &["rep_movs_alternative", "_copy_to_iter", "tcp_recvmsg_locked"]), 10);
    add(
        stack(
            1,
            7,
            &["native_queued_spin_lock_slowpath", "_raw_spin_lock", "__schedule", "schedule"],
        ),
        10,
    );
    let symbols = Symbols::resolve(&raw, &kallsyms());
    assert_eq!(symbols.kernel(at("sock_def_readable")), "sock_def_readable");
    assert_eq!(symbols.kernel(at("net_rx_action")), "net_rx_action");
    let roles = HashMap::from([(7, "server")]);
    let p = Profile::build(&raw, &symbols, &roles, true);
    let cat = |cpu: usize, name: &str| {
        let c = qpslab_profile::Category::ALL.into_iter().find(|c| c.name() == name).unwrap();
        p.cpu_share(cpu, c)
    };
    assert_eq!(cat(0, "wakeup-lock"), 0.36, "the seed's signature");
    assert_eq!(cat(0, "tcp-receive"), 0.20, "receive in an interrupt on an idle CPU");
    assert_eq!(cat(0, "idle"), 0.44);
    let cpu0 = &p.cpus[0];
    assert!((cpu0.net_rx_share - 0.56).abs() < 1e-9, "{}", cpu0.net_rx_share);
    assert_eq!(
        cpu0.wakeup_lock_stacks[0].name,
        "_raw_spin_unlock_irqrestore <- __wake_up_sync_key <- sock_def_readable <- tcp_rcv_established"
    );
    assert_eq!(cpu0.top_kernel[0].name, "pv_native_safe_halt");
    assert_eq!(cat(1, "syscall"), 0.5);
    assert_eq!(cat(1, "tcp-transmit"), 0.2);
    assert_eq!(cat(1, "clock"), 0.1);
    assert_eq!(cat(1, "copy"), 0.1);
    assert_eq!(cat(1, "scheduler"), 0.1, "a lock under the scheduler is the scheduler's");
    let server = p.with_role("server").next().unwrap();
    assert_eq!((server.pid, server.samples), (7, 100));
    assert_eq!(server.categories[0].name, "syscall");
    // Folded stacks: comm, then frames root first.
    let text = p.folded_text();
    assert!(
        text.contains("swapper;handle_softirqs;net_rx_action;__napi_poll;process_backlog;"),
        "{text}"
    );
    assert!(text.contains(";__wake_up_sync_key;_raw_spin_unlock_irqrestore 36\n"), "{text}");
    let shown = p.render_text(&[0]);
    assert!(shown.contains("CPU 0 kernel: pv_native_safe_halt 44.0%"), "{shown}");
    // A profile travels as JSON and back.
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Profile>(&json).unwrap(), p);
}

/// Samples every CPU while `work` runs; the profile, with this process as `role`.
fn profile_while(
    o: &ProfileOptions,
    roles: &HashMap<u32, &str>,
    work: impl FnOnce(),
) -> (RawProfile, Profile) {
    let root = Root::live();
    let cpus = qpslab_sys::cpus::allowed_cpus();
    let sampler = Sampler::start(&root, &cpus, o).expect("perf_event_open (the tests run as root)");
    work();
    let raw = sampler.stop();
    let symbols = Symbols::resolve(&raw, &root.path("proc/kallsyms"));
    let p = Profile::build(&raw, &symbols, roles, false);
    (raw, p)
}

#[test]
fn a_process_spinning_on_system_calls_is_attributed_to_syscall_entry_and_exit() {
    // One byte per read and write: nearly all of dd's time is entering and leaving the kernel.
    let mut dd = Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=2000000000"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = dd.id();
    let roles = HashMap::from([(pid, "server")]);
    let (_, p) = profile_while(&ProfileOptions::default(), &roles, || {
        std::thread::sleep(Duration::from_millis(1500));
    });
    let _ = dd.kill();
    let _ = dd.wait();
    let dd = p.processes.iter().find(|x| x.pid == pid).expect("dd in the profile");
    assert!(dd.samples > 300, "{dd:?}");
    assert_eq!(dd.comm, "dd");
    assert_eq!(dd.categories[0].name, "syscall", "{:?}", dd.categories);
    assert!(dd.categories[0].share > 0.4, "{:?}", dd.categories);
}

/// A user-space loop whose name the profile must show.
#[inline(never)]
fn qpslab_profile_busy_loop(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

#[test]
fn a_user_space_busy_loop_shows_its_own_function_name() {
    let me = std::process::id();
    let roles = HashMap::from([(me, "generator")]);
    let stop = AtomicBool::new(false);
    let (_, p) = std::thread::scope(|s| {
        s.spawn(|| qpslab_profile_busy_loop(&stop));
        let out = profile_while(&ProfileOptions::default(), &roles, || {
            std::thread::sleep(Duration::from_millis(1200));
        });
        stop.store(true, Ordering::Relaxed);
        out
    });
    let mine = p.processes.iter().find(|x| x.pid == me).expect("this test in the profile");
    assert!(
        mine.top_user.iter().any(|u| u.name.contains("qpslab_profile_busy_loop")),
        "{:?}",
        mine.top_user
    );
    let user = mine.categories.iter().find(|c| c.name == "user").unwrap();
    assert!(user.share > 0.5, "{:?}", mine.categories);
}

#[test]
fn samples_a_ring_cannot_hold_are_counted_as_lost() {
    // A one-page ring, 10,000 samples a second per CPU, read only at the end.
    let o = ProfileOptions {
        frequency_hz: 10_000,
        ring_pages: 1,
        drain_every: Duration::from_secs(5),
        folded: false,
    };
    let stop = AtomicBool::new(false);
    let (raw, p) = std::thread::scope(|s| {
        s.spawn(|| qpslab_profile_busy_loop(&stop));
        let began = Instant::now();
        let out =
            profile_while(&o, &HashMap::new(), || std::thread::sleep(Duration::from_millis(800)));
        assert!(began.elapsed() < Duration::from_secs(10));
        stop.store(true, Ordering::Relaxed);
        out
    });
    assert!(raw.lost > 0, "lost {}, samples {}", raw.lost, raw.samples);
    assert_eq!(p.lost, raw.lost);
    assert!(p.render_text(&[]).contains(&format!("{} lost", raw.lost)));
}
