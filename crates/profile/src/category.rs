//! What a sample's stack was doing, in the terms of the write-ups: receive softirq, TCP receive
//! or transmit, system call entry and exit, epoll, socket wake-ups under a spinlock (the
//! signature `perf top` showed in "1M QPS with nginx and Ubuntu 12.04 on EC2"), the scheduler,
//! idle, clock reads, memory copies, or user space.
//!
//! A sample gets one category: the kernel frames are read from the leaf outwards and the first
//! frame of a known kind decides, so that receive work done in an interrupt on an idle CPU counts
//! as receive work, not idle. Lock frames decide only with a wake-up above them (spinning to
//! wake a socket's waiters); elsewhere the frame that took the lock decides. A sample without
//! kernel frames is user space, unless its leaf is a clock read (the vDSO).

use serde::{Deserialize, Serialize};

/// A category of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// NET_RX softirq: NAPI poll, GRO, the IP layer on the way in.
    SoftirqNetRx,
    TcpReceive,
    TcpTransmit,
    /// System call entry and exit, and the generic read/write path.
    Syscall,
    Epoll,
    /// Waking a socket's waiters, and spinlocks taken to do so.
    WakeupLock,
    Scheduler,
    Idle,
    /// Clock reads: the clocksource, ktime, clock_gettime.
    Clock,
    /// Copies to and from user space, memcpy.
    Copy,
    /// Opening and closing connections: the socket's setup, the connect's search for a free
    /// source port (among TIME_WAIT sockets), accept, close and TIME_WAIT.
    Connection,
    /// User space (the process's own code and its libraries).
    User,
    /// Kernel work of no category above.
    OtherKernel,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 13] = [
        Category::SoftirqNetRx,
        Category::TcpReceive,
        Category::TcpTransmit,
        Category::Syscall,
        Category::Epoll,
        Category::WakeupLock,
        Category::Scheduler,
        Category::Idle,
        Category::Clock,
        Category::Copy,
        Category::Connection,
        Category::User,
        Category::OtherKernel,
    ];

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Category::SoftirqNetRx => "softirq-net-rx",
            Category::TcpReceive => "tcp-receive",
            Category::TcpTransmit => "tcp-transmit",
            Category::Syscall => "syscall",
            Category::Epoll => "epoll",
            Category::WakeupLock => "wakeup-lock",
            Category::Scheduler => "scheduler",
            Category::Idle => "idle",
            Category::Clock => "clock",
            Category::Copy => "copy",
            Category::Connection => "connection",
            Category::User => "user",
            Category::OtherKernel => "other-kernel",
        }
    }
}

/// How a symbol name is matched.
enum Pat {
    Is(&'static str),
    Starts(&'static str),
}

use Pat::{Is, Starts};

impl Pat {
    fn matches(&self, name: &str) -> bool {
        match self {
            Is(s) => name == *s,
            Starts(s) => name.starts_with(s),
        }
    }
}

/// Spinlocks: they decide only under a wake-up.
const LOCKS: &[Pat] = &[
    Starts("_raw_spin_"),
    Starts("_raw_read_"),
    Starts("_raw_write_"),
    Is("native_queued_spin_lock_slowpath"),
    Is("queued_spin_lock_slowpath"),
    Is("__pv_queued_spin_lock_slowpath"),
    Is("pv_queued_spin_lock_slowpath"),
    Starts("do_raw_spin_"),
];

/// Frames that wake a socket's (or an epoll instance's) waiters.
const WAKEUPS: &[Pat] = &[
    Starts("__wake_up"),
    Is("sock_def_readable"),
    Is("sock_def_write_space"),
    Is("sk_stream_write_space"),
    Is("ep_poll_callback"),
    Is("tcp_data_ready"),
];

/// The categories of kernel frames, checked in this order for each frame.
const KERNEL: &[(Category, &[Pat])] = &[
    (Category::WakeupLock, WAKEUPS),
    (
        Category::Idle,
        &[
            Starts("default_idle"),
            Is("default_enter_idle"),
            Starts("cpuidle_enter"),
            Is("do_idle"),
            Is("native_safe_halt"),
            Is("pv_native_safe_halt"),
            Is("arch_cpu_idle"),
            Is("cpu_idle_poll"),
            Starts("intel_idle"),
            Starts("acpi_idle"),
            Starts("mwait_idle"),
            Is("poll_idle"),
            Starts("haltpoll"),
            Is("cpu_startup_entry"),
        ],
    ),
    (
        Category::Clock,
        &[
            Is("read_tsc"),
            Starts("ktime_get"),
            Starts("xen_clocksource"),
            Starts("pvclock_clocksource"),
            Starts("kvm_clock_"),
            Is("read_hpet"),
            Starts("hpet_"),
            Starts("acpi_pm_read"),
            Starts("timekeeping_"),
            Is("__x64_sys_clock_gettime"),
            Starts("posix_get_monotonic"),
            Starts("posix_get_realtime"),
            Starts("posix_ktime_get"),
        ],
    ),
    (
        Category::Copy,
        &[
            Starts("copy_user_"),
            Is("rep_movs_alternative"),
            Is("_copy_to_user"),
            Is("_copy_from_user"),
            Starts("__copy_user"),
            Starts("memcpy"),
            Is("__memcpy"),
            Starts("memmove"),
            Is("__memmove"),
            Starts("copy_page"),
            Is("skb_copy_datagram_iter"),
            Is("__skb_datagram_iter"),
            Is("simple_copy_to_iter"),
            Starts("_copy_to_iter"),
            Starts("_copy_from_iter"),
            Starts("copy_to_iter"),
            Starts("copy_from_iter"),
        ],
    ),
    (
        Category::Epoll,
        &[
            Starts("ep_"),
            Starts("do_epoll_"),
            Starts("__x64_sys_epoll"),
            Starts("__do_sys_epoll"),
            Starts("epoll_"),
        ],
    ),
    (
        Category::TcpReceive,
        &[
            Starts("tcp_v4_rcv"),
            Starts("tcp_v6_rcv"),
            Is("tcp_v4_do_rcv"),
            Is("tcp_v6_do_rcv"),
            Starts("tcp_rcv_"),
            Starts("tcp_data_queue"),
            Is("tcp_queue_rcv"),
            Starts("tcp_recvmsg"),
            Is("tcp_ack"),
            Starts("tcp_ack_"),
            Is("tcp_clean_rtx_queue"),
            Is("tcp_event_data_recv"),
            Is("tcp_cleanup_rbuf"),
            Is("tcp_add_backlog"),
            Is("tcp_filter"),
            Is("tcp_check_req"),
            Is("tcp_child_process"),
            Starts("tcp_urg"),
            Is("tcp_validate_incoming"),
            Is("inet_recvmsg"),
            Is("sock_recvmsg"),
            Is("sock_read_iter"),
            Starts("__sys_recv"),
            Starts("__x64_sys_recv"),
            Starts("____sys_recv"),
        ],
    ),
    (
        Category::TcpTransmit,
        &[
            Starts("tcp_sendmsg"),
            Is("tcp_push"),
            Starts("__tcp_push_pending_frames"),
            Starts("tcp_write_xmit"),
            Starts("__tcp_transmit_skb"),
            Is("tcp_transmit_skb"),
            Starts("tcp_send_"),
            Starts("__tcp_send_ack"),
            Starts("tcp_stream_alloc_skb"),
            Starts("tcp_rate_"),
            Is("tcp_options_write"),
            Starts("ip_queue_xmit"),
            Starts("__ip_queue_xmit"),
            Starts("ip_local_out"),
            Starts("__ip_local_out"),
            Is("ip_output"),
            Starts("ip_finish_output"),
            Starts("__ip_finish_output"),
            Starts("dev_queue_xmit"),
            Starts("__dev_queue_xmit"),
            Is("dev_hard_start_xmit"),
            Is("loopback_xmit"),
            Is("sch_direct_xmit"),
            Starts("validate_xmit_skb"),
            Is("start_xmit"),
            Is("xmit_skb"),
            Is("inet_sendmsg"),
            Is("sock_sendmsg"),
            Starts("__sock_sendmsg"),
            Is("sock_write_iter"),
            Starts("__sys_send"),
            Starts("__x64_sys_send"),
            Starts("____sys_send"),
        ],
    ),
    (
        Category::SoftirqNetRx,
        &[
            Is("net_rx_action"),
            Starts("__napi_poll"),
            Is("napi_poll"),
            Is("process_backlog"),
            Starts("__netif_receive_skb"),
            Starts("netif_receive_skb"),
            Starts("napi_gro_"),
            Starts("dev_gro_receive"),
            Starts("gro_"),
            Starts("inet_gro_"),
            Starts("tcp4_gro_"),
            Is("virtnet_poll"),
            Is("xennet_poll"),
            Starts("ip_rcv"),
            Starts("ip_local_deliver"),
            Is("ip_protocol_deliver_rcu"),
            Starts("ip_sublist_rcv"),
            Starts("ip_list_rcv"),
            Is("enqueue_to_backlog"),
            Starts("netif_rx"),
            Starts("__netif_rx"),
        ],
    ),
    (
        Category::Connection,
        &[
            Is("__inet_hash_connect"),
            Is("inet_hash_connect"),
            Starts("__inet_check_established"),
            Starts("__inet6_check_established"),
            Is("tcp_twsk_unique"),
            Starts("inet_twsk_"),
            Starts("inet_bind"),
            Starts("__inet_bind"),
            Starts("inet_bhash2_"),
            Is("inet_csk_get_port"),
            Starts("inet_csk_bind_conflict"),
            Is("tcp_v4_connect"),
            Is("tcp_v6_connect"),
            Starts("__inet_stream_connect"),
            Is("inet_stream_connect"),
            Starts("__sys_connect"),
            Is("io_connect"),
            Starts("inet_csk_accept"),
            Starts("do_accept"),
            Starts("__sys_accept"),
            Is("inet_accept"),
            Is("io_accept"),
            Is("tcp_conn_request"),
            Is("tcp_v4_syn_recv_sock"),
            Is("tcp_v6_syn_recv_sock"),
            Is("tcp_create_openreq_child"),
            Starts("inet_csk_clone"),
            Is("sk_clone_lock"),
            Starts("inet_ehash_"),
            Is("__inet_hash"),
            Is("inet_hash"),
            Is("inet_unhash"),
            Starts("__sys_socket"),
            Starts("__sock_create"),
            Is("inet_create"),
            Is("tcp_v4_init_sock"),
            Is("tcp_init_sock"),
            Is("sk_alloc"),
            Is("sk_prot_alloc"),
            Is("tcp_close"),
            Is("__tcp_close"),
            Is("tcp_time_wait"),
            Is("tcp_done"),
            Starts("inet_csk_destroy_sock"),
            Is("tcp_v4_destroy_sock"),
            Is("inet_release"),
            Starts("__sock_release"),
            Is("sock_close"),
            Starts("__sk_destruct"),
            Is("sk_free"),
        ],
    ),
    (
        Category::Scheduler,
        &[
            Is("schedule"),
            Is("__schedule"),
            Starts("schedule_"),
            Starts("pick_next_task"),
            Starts("finish_task_switch"),
            Is("context_switch"),
            Starts("switch_mm"),
            Starts("__switch_to"),
            Is("try_to_wake_up"),
            Starts("ttwu_"),
            Starts("enqueue_task"),
            Starts("dequeue_task"),
            Starts("enqueue_entity"),
            Starts("dequeue_entity"),
            Starts("update_curr"),
            Starts("update_load_avg"),
            Starts("__update_load_avg"),
            Starts("select_task_rq"),
            Starts("psi_"),
            Is("set_next_entity"),
            Starts("put_prev_"),
            Starts("newidle_balance"),
            Starts("sched_balance"),
            Is("load_balance"),
            Starts("update_rq_clock"),
            Starts("check_preempt"),
            Is("resched_curr"),
            Starts("wake_up_q"),
        ],
    ),
    (
        Category::Syscall,
        &[
            Starts("entry_SYSCALL"),
            Starts("entry_SYSRET"),
            Is("do_syscall_64"),
            Starts("syscall_exit_to_user_mode"),
            Starts("syscall_enter_from_user_mode"),
            Starts("exit_to_user_mode"),
            Starts("arch_exit_to_user_mode"),
            Is("syscall_return_via_sysret"),
            Starts("syscall_trace_enter"),
            Is("x64_sys_call"),
            Starts("__x64_sys_"),
            Starts("__do_sys_"),
            Starts("__se_sys_"),
            Starts("ksys_"),
            Is("vfs_read"),
            Is("vfs_write"),
            Starts("__fdget"),
            Starts("fdget"),
            Starts("__fget"),
            Is("fput"),
            Is("clear_bhb_loop"),
            Starts("srso_"),
        ],
    ),
];

/// User-space clock reads (the vDSO's clock_gettime).
const USER_CLOCK: &[Pat] = &[
    Starts("__vdso_clock_gettime"),
    Starts("__vdso_gettimeofday"),
    Starts("__cvdso_"),
    Starts("do_hres"),
    Starts("vread_"),
    Is("clock_gettime"),
    Is("__clock_gettime"),
];

fn any(pats: &[Pat], name: &str) -> bool {
    pats.iter().any(|p| p.matches(name))
}

/// The category of a sample: `kernel` is its kernel frames' symbols, leaf first (empty when
/// the sample was taken in user space); `user_leaf` is the symbol of its user leaf, if any.
pub fn classify(kernel: &[&str], user_leaf: Option<&str>) -> Category {
    if kernel.is_empty() {
        return match user_leaf {
            Some(s) if any(USER_CLOCK, s) => Category::Clock,
            _ => Category::User,
        };
    }
    for (i, frame) in kernel.iter().enumerate() {
        if any(LOCKS, frame) {
            if kernel[i + 1..].iter().any(|f| any(WAKEUPS, f)) {
                return Category::WakeupLock;
            }
            continue;
        }
        if let Some((c, _)) = KERNEL.iter().find(|(_, pats)| any(pats, frame)) {
            return *c;
        }
    }
    Category::OtherKernel
}

/// The sample ran inside the NET_RX softirq (whatever its leaf): for the share of a CPU's time
/// in receive processing, beside the categories.
pub fn in_net_rx(kernel: &[&str]) -> bool {
    kernel.contains(&"net_rx_action")
}

/// A spinlock leaf under a socket wake-up: the write-up's `perf top` signature.
pub fn is_wakeup_lock(kernel: &[&str]) -> bool {
    kernel.first().is_some_and(|leaf| any(LOCKS, leaf))
        && classify(kernel, None) == Category::WakeupLock
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaf_most_known_frame_decides() {
        let c = |k: &[&str]| classify(k, None);
        // Receive work in an interrupt on an idle CPU is receive work.
        assert_eq!(
            c(&["tcp_rcv_established", "tcp_v4_do_rcv", "net_rx_action", "do_idle"]),
            Category::TcpReceive
        );
        assert_eq!(c(&["virtnet_poll", "__napi_poll", "net_rx_action"]), Category::SoftirqNetRx);
        assert_eq!(c(&["pv_native_safe_halt", "default_idle", "do_idle"]), Category::Idle);
        assert_eq!(
            c(&["__task_pid_nr_ns", "__x64_sys_getppid", "do_syscall_64"]),
            Category::Syscall
        );
        assert_eq!(
            c(&["rep_movs_alternative", "_copy_to_iter", "tcp_recvmsg_locked"]),
            Category::Copy
        );
        assert_eq!(c(&["ep_poll", "do_epoll_wait", "do_syscall_64"]), Category::Epoll);
        assert_eq!(c(&["read_tsc", "ktime_get", "tcp_sendmsg"]), Category::Clock);
        assert_eq!(c(&["something_new"]), Category::OtherKernel);
        // A connect searching the port range among TIME_WAIT sockets, its lock included; the
        // SYN it sends is transmit work.
        assert_eq!(
            c(&["__inet_check_established", "__inet_hash_connect", "tcp_v4_connect"]),
            Category::Connection
        );
        assert_eq!(
            c(&["_raw_spin_lock_bh", "__inet_hash_connect", "__x64_sys_connect"]),
            Category::Connection
        );
        assert_eq!(
            c(&["__tcp_transmit_skb", "tcp_connect", "tcp_v4_connect", "__sys_connect"]),
            Category::TcpTransmit
        );
        assert_eq!(classify(&[], Some("ngx_http_process_request")), Category::User);
        assert_eq!(classify(&[], Some("__vdso_clock_gettime")), Category::Clock);
    }

    #[test]
    fn a_spinlock_counts_as_a_wakeup_only_under_one() {
        // 1M QPS on EC2: _raw_spin_unlock_irqrestore <- __wake_up_sync_key <- sock_def_readable.
        let seed = [
            "_raw_spin_unlock_irqrestore",
            "__wake_up_sync_key",
            "sock_def_readable",
            "tcp_rcv_established",
            "tcp_v4_do_rcv",
            "net_rx_action",
        ];
        assert_eq!(classify(&seed, None), Category::WakeupLock);
        assert!(is_wakeup_lock(&seed));
        assert!(in_net_rx(&seed));
        // The same lock taken by the scheduler: the scheduler's.
        let sched = ["_raw_spin_lock", "__schedule", "schedule"];
        assert_eq!(classify(&sched, None), Category::Scheduler);
        assert!(!is_wakeup_lock(&sched));
    }
}
