//! The one door to the kernel: every system call of qpslab goes through this crate (or through
//! `std`, `socket2` and `signal-hook`), and what must stay `unsafe` lives here with its SAFETY
//! comment, as mio keeps its `sys/` folder. Also the plumbing every command shares: the worker
//! thread crew ([`crew`]), the stop signal ([`signals`]), the configuration error that names a
//! flag ([`config_error`]), and the injectable root under which /proc and /sys are read
//! ([`root`]). Owns no policy: callers decide what to do with errors.

pub mod cgroup;
pub mod config_error;
pub mod cpus;
pub mod crew;
pub mod epoll;
pub mod ethtool;
pub mod fd;
pub mod memlimit;
pub mod net;
pub mod netlink;
pub mod netns;
pub mod nofile;
pub mod process;
pub mod root;
pub mod signals;
pub mod sockets;
pub mod system;
pub mod thread;
pub mod udp;
pub mod uring;
