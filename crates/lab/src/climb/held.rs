//! The user's server in the climb's hands (`--apply-server`): here, or with `--server HOST`
//! the nginx there, held by an agent on that host for the whole climb. The agent writes,
//! checks (`nginx -t`), reloads and restores it there as [`UserServer`] does here, and
//! restores it by itself when the climb's session ends, a climb killed with SIGKILL included.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use qpslab_fleet::session::FleetOptions;

use super::server::UserServer;
use crate::remote::ServerHost;

/// The agent's session lasts the climb: no signal cuts it, or the server could not be
/// restored through it.
static NEVER: AtomicBool = AtomicBool::new(false);

/// A server whose configuration the climb may write.
#[derive(Debug)]
pub enum InHand<'a> {
    Here(UserServer),
    /// nginx on the server host: the agent holding it, its main file there and the text found.
    There {
        far: ServerHost<'a>,
        file: PathBuf,
        original: String,
    },
}

impl<'a> InHand<'a> {
    /// The nginx among `pids` on the server host `fleet` names, taken in hand there; None when
    /// none of them is nginx.
    pub fn nginx_there(fleet: &'a FleetOptions, pids: &[u32]) -> Result<Option<Self>, String> {
        let mut far = ServerHost::connect(fleet, &NEVER).map_err(|e| e.to_string())?;
        match far.nginx_take(pids) {
            Ok(Some(held)) => {
                Ok(Some(InHand::There { far, file: held.file, original: held.original }))
            }
            Ok(None) => {
                far.close();
                Ok(None)
            }
            Err(e) => {
                let name = far.name.clone();
                far.close();
                Err(format!("on {name}: {e}"))
            }
        }
    }

    /// The configuration as found.
    pub fn original(&self) -> &str {
        match self {
            InHand::Here(s) => &s.original,
            InHand::There { original, .. } => original,
        }
    }

    /// Its configuration file (on the server host, for nginx there).
    pub fn file(&self) -> &Path {
        match self {
            InHand::Here(s) => &s.file,
            InHand::There { file, .. } => file,
        }
    }

    /// Where the original is kept while the climb runs.
    pub fn backup(&self) -> PathBuf {
        match self {
            InHand::Here(s) => s.backup(),
            InHand::There { file, .. } => {
                let mut p = file.clone().into_os_string();
                p.push(".qpslab-original");
                PathBuf::from(p)
            }
        }
    }

    /// What reloads it, for messages.
    pub fn reload_hint(&self) -> String {
        match self {
            InHand::Here(s) => s.reload_hint(),
            InHand::There { far, .. } => format!("reload nginx on {}", far.name),
        }
    }

    /// Its template filled in ([`UserServer::render`]); None: no template.
    pub fn render(&self, v: &super::server::Vars) -> Result<Option<String>, String> {
        match self {
            InHand::Here(s) => s.render(v),
            InHand::There { .. } => Ok(None),
        }
    }

    /// Puts `text` in force ([`UserServer::put`]).
    pub fn put(&mut self, text: &str) -> Result<(), String> {
        match self {
            InHand::Here(s) => s.put(text),
            InHand::There { far, .. } => far.nginx_put(text),
        }
    }

    /// Whether the server would take `text` ([`UserServer::check`]).
    pub fn check(&mut self, text: &str) -> Result<(), String> {
        match self {
            InHand::Here(s) => s.check(text),
            InHand::There { far, .. } => far.nginx_check(text),
        }
    }

    /// Whether it is nginx (whose listeners a reload renews).
    pub fn is_nginx(&self) -> bool {
        match self {
            InHand::Here(s) => s.is_nginx(),
            InHand::There { .. } => true,
        }
    }

    /// nginx re-listens ([`UserServer::relisten`]).
    pub fn relisten(&mut self) -> Result<(), String> {
        match self {
            InHand::Here(s) => s.relisten(),
            InHand::There { far, .. } => far.nginx_relisten(),
        }
    }

    /// nginx re-listens at the climb's end ([`UserServer::relisten_at_end`]); on another
    /// host, as [`InHand::relisten`] does.
    pub fn relisten_at_end(&mut self) -> Result<(), String> {
        match self {
            InHand::Here(s) => s.relisten_at_end(),
            InHand::There { far, .. } => far.nginx_relisten(),
        }
    }

    /// The original back, byte for byte ([`UserServer::restore`]).
    pub fn restore(&mut self) -> Result<(), String> {
        match self {
            InHand::Here(s) => s.restore(),
            InHand::There { far, .. } => far.nginx_restore(),
        }
    }

    /// Lets go: the session with the server host's agent closed (it has restored the server).
    pub fn close(self) {
        if let InHand::There { far, .. } = self {
            far.close();
        }
    }
}
