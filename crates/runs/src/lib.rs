//! qpslab's runs, apart from the jobs that make them: [`store`] keeps every finished run in
//! SQLite (versioned schema, one transaction per run), [`select`] turns what the user names
//! (`12`, `sweep:3`, `3/NAME`, `label:X`, `last`) into groups of runs, [`compare`] summarises
//! them and applies the noise rule, and [`report`] draws them in one HTML file. What of a run
//! is kept is decided by the runner (the lab's `record`); nothing here runs anything.

pub mod compare;
pub mod report;
pub mod select;
pub mod store;
