//! `qpslab tune`: plan, apply and exactly revert the host changes the seeds made by hand (IRQ
//! affinity, RPS/RFS/XPS, sysctls, clocksource).
//!
//! [`plan`] computes the target state from the host model ([`place`] holds the CPU-placement
//! rules), [`apply`] writes it through a journal ([`journal`]) and reverts it, [`text`] renders
//! it, [`emit`] turns it into server configuration. This is the only module that writes to
//! /proc and /sys, and only through [`apply::Files`].

pub mod apply;
pub mod emit;
pub mod journal;
pub mod place;
pub mod plan;
pub mod text;

pub use apply::{apply, revert, status, ApplyOptions, Files, RootFiles, TuneError};
pub use plan::{plan, Plan, PlanError, PlanOptions};
