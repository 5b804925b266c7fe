//! qpslab's load agents: one load over several machines, started together, merged exactly.
//!
//! The coordinator ([`coordinator`]) starts `qpslab agent` on every machine through the user's
//! own `ssh` (or as a local child: [`transport`]), speaks the line protocol of [`protocol`] on
//! its stdin and stdout, splits the load by weight ([`spec`]), estimates each agent's clock
//! offset and starts them at one instant ([`clock`]), merges their per-second intervals live
//! and their results exactly at the end. [`agent`] is the other side. No daemon and no open
//! port: a closed pipe stops an agent.

pub mod agent;
pub mod clock;
pub mod coordinator;
pub mod files;
pub mod identity;
pub mod protocol;
pub mod session;
pub mod spec;
pub mod transport;
