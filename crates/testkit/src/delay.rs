//! A path with a round trip: a TCP relay on loopback that forwards every byte, each way, a
//! fixed time after it arrived (as a long link delays it, without a bandwidth limit), for
//! kernels without netem. The generator sees the relay's loopback round trip in TCP_INFO;
//! its requests see the delay.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct DelayRelay {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl DelayRelay {
    /// Listens on a free loopback port; each connection goes on to `upstream`, each byte
    /// `one_way` later in either direction.
    pub fn start(upstream: SocketAddr, one_way: Duration) -> std::io::Result<DelayRelay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((down, _)) => {
                        let _ = relay(down, upstream, one_way);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Ok(DelayRelay { addr, stop })
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One connection: two directions, each a reader and a writer thread.
fn relay(down: TcpStream, upstream: SocketAddr, one_way: Duration) -> std::io::Result<()> {
    down.set_nonblocking(false)?;
    let up = TcpStream::connect(upstream)?;
    for s in [&down, &up] {
        s.set_nodelay(true)?;
    }
    pump(down.try_clone()?, up.try_clone()?, one_way);
    pump(up, down, one_way);
    Ok(())
}

/// Bytes read from `from` are written to `to` `one_way` after they came; the end too.
fn pump(mut from: TcpStream, mut to: TcpStream, one_way: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = from.read(&mut buf).unwrap_or(0);
            if tx.send((Instant::now() + one_way, buf[..n].to_vec())).is_err() || n == 0 {
                return;
            }
        }
    });
    std::thread::spawn(move || {
        for (due, bytes) in rx {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if bytes.is_empty() || to.write_all(&bytes).is_err() {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
        }
    });
}
