//! Descriptors handed between processes: a readiness line written to a descriptor the parent
//! passed (`qpslab serve --ready-fd N`, in the spirit of sd_notify's READY=1), and making a
//! descriptor survive `exec` so a child can be given one.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// Checks that `fd` can take a readiness line: an open descriptor other than stdin, stdout and
/// stderr.
pub fn check_ready(fd: RawFd) -> io::Result<()> {
    if fd <= 2 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not stdin, stdout or stderr"));
    }
    // SAFETY: F_GETFD reads the descriptor's flags; it fails with EBADF on a closed descriptor.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `line` and a newline to descriptor `fd`, then closes it. Fails without touching
/// anything when `fd` does not pass [`check_ready`].
pub fn notify_ready(fd: RawFd, line: &str) -> io::Result<()> {
    check_ready(fd)?;
    // SAFETY: fd is open (checked above) and was handed to this process to own and close.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(format!("{line}\n").as_bytes())
}

/// Clears close-on-exec on `fd`, so a child started next inherits it.
pub fn inheritable(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: F_GETFD/F_SETFD read and write the flags of a descriptor the caller owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use std::io::Read;
    use std::os::fd::IntoRawFd;

    #[test]
    fn a_line_reaches_the_other_end_and_the_descriptor_is_closed() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        inheritable(&writer).unwrap();
        let fd = writer.into_raw_fd();
        notify_ready(fd, r#"{"ready":true}"#).unwrap();
        let mut got = String::new();
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, "{\"ready\":true}\n", "EOF after the line: the writer was closed");
        assert!(notify_ready(fd, "again").is_err(), "closed now");
        assert!(notify_ready(1, "stdout").is_err());
    }
}
