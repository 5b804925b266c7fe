//! OS plumbing shared by the load engine and the server, so neither carries its own copy:
//! a level-triggered epoll wrapper ([`epoll`]), CPU lists and thread pinning ([`cpus`]), the
//! descriptor limit ([`nofile`]), and the flag-naming configuration error both return
//! ([`config_error`]). Owns no policy: callers decide what to do with errors.

pub mod config_error;
pub mod cpus;
pub mod epoll;
pub mod nofile;
pub mod root;
pub mod sockets;
