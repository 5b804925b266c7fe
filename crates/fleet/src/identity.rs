//! What an agent binary is: its version and the SHA-256 of the executable, so a coordinator
//! runs only an agent built from the same code as itself, and can copy itself over when the
//! remote one is missing or differs.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// SHA-256 of the file at `path`, hex.
pub fn file_hash(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The running executable's hash ("unknown" when it cannot be read).
pub fn own_hash() -> String {
    std::env::current_exe().and_then(|p| file_hash(&p)).unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn the_hash_is_sha256_in_hex() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            file_hash(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
