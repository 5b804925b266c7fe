//! OS plumbing shared by the load engine and the server, so neither carries its own copy:
//! a level-triggered epoll wrapper ([`epoll`]), CPU lists and thread pinning ([`cpus`]), and
//! the descriptor limit ([`nofile`]). Owns no policy: callers decide what to do with errors.

pub mod cpus;
pub mod epoll;
pub mod nofile;
