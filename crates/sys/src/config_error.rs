//! The configuration error the load engine and the server both return: which flag (or argument)
//! was wrong and what to do about it, printed as one line `FLAG: message`.

use std::fmt;

/// A configuration error: which flag and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub flag: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn new(flag: &'static str, message: impl Into<String>) -> Self {
        Self { flag, message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}

impl std::error::Error for ConfigError {}
