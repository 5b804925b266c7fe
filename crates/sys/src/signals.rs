//! The one stop signal of every command. SIGINT and SIGTERM set a flag that runs poll (a load
//! run ends early with its report, a server drains, the doctor stops sampling); a second signal
//! of either kind ends the process at once with the shell's code for it (130 for SIGINT, 143
//! for SIGTERM), as users expect of long-running tools. The handlers come from `signal-hook`,
//! which keeps them async-signal-safe.

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the handlers (once; later calls return the same flag) and returns the flag the
/// first SIGINT or SIGTERM sets.
pub fn stop_flag() -> io::Result<&'static AtomicBool> {
    if let Some(flag) = STOP.get() {
        return Ok(flag);
    }
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as the earlier signal left it: a second signal
        // exits, the first only sets the flag.
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&flag))?;
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
    }
    Ok(STOP.get_or_init(|| flag))
}
