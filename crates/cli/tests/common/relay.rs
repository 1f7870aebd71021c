//! A TCP relay on loopback that can stop forwarding: a network partition between a replica and
//! PostgreSQL without a network namespace. Cut, it forwards nothing in either direction and keeps
//! every connection open (a black hole, as a lost route looks: no reset, no answer); new
//! connections are accepted and then get nothing either.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A running relay; it runs until the test process ends.
pub struct Relay {
    /// Its port on 127.0.0.1.
    pub port: u16,
    cut: Arc<AtomicBool>,
}

impl Relay {
    /// Relays 127.0.0.1:PORT to `target`.
    pub fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ] {
                    if let (Ok(from), Ok(to)) = (from, to) {
                        let flag = flag.clone();
                        std::thread::spawn(move || pump(from, to, &flag));
                    }
                }
            }
        });
        Relay { port, cut }
    }

    /// Stops forwarding, from now on.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` while the relay is not cut; once cut, reads nothing more (what is sent
/// stays in the kernel's buffers) and holds both ends open.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 16 * 1024];
    loop {
        if cut.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                // Read before the cut, written after it: held back too.
                while cut.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
        }
    }
}
