//! `qpslab host`: read the host model and print it.

use qpslab_host::{render::host_text, Host, Root};

use crate::args::HostArgs;
use crate::{output, Outcome, UsageError};

pub fn run(a: HostArgs) -> anyhow::Result<Outcome> {
    let root = Root::new(&a.root);
    let mut host =
        Host::read(&root).map_err(|e| UsageError(format!("--root {}: {e}", a.root.display())))?;
    if !a.all {
        host.nics.retain(|n| n.name != "lo");
    }
    output::emit(a.json, &host, || host_text(&host, a.all))?;
    Ok(Outcome::Passed)
}
