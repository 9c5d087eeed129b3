//! A TCP proxy in front of one server, whose behaviour the test switches at any time: pass,
//! delay replies, drop replies (commands run, replies never come), blackhole (nothing gets
//! through, connections stay open), reset (connections are cut and new ones refused).
//!
//! It stays a faithful network: TCP never loses bytes inside a live connection, so a blackhole
//! holds the bytes back (as retransmission would) and lets them through when lifted, and the
//! connections that lost replies are cut when replies flow again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Every reply waits this long before it is passed on.
    Delay(Duration),
    /// Commands reach the server; replies are thrown away. Switching away cuts those
    /// connections, since their replies are gone for good.
    DropReplies,
    /// Nothing moves either way; connections stay open and catch up when it is lifted.
    Blackhole,
    /// Open connections are cut; new ones are closed at once.
    Reset,
    /// Before it passes on bytes that hold an EVALSHA, the proxy empties the server's script
    /// cache (`SCRIPT FLUSH` on a connection of its own, answered before the bytes go on): every
    /// EVALSHA meets NOSCRIPT, even one sent right after its script was loaded. The worst a
    /// storm of flushes, restarts and failovers can do to a client.
    FlushScripts,
}

pub struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
    /// Connections accepted so far, whatever became of them.
    accepted: Arc<AtomicUsize>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of `127.0.0.1:<upstream>`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let (mode, _) = watch::channel(Mode::Pass);
        let tasks: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn({
            let mode = mode.subscribe();
            let tasks = tasks.clone();
            let accepted = accepted.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    if *mode.borrow() == Mode::Reset {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        continue; // the server is down: the client sees its connection close
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let up = tokio::spawn(pump(
                        client_read,
                        server_write,
                        mode.clone(),
                        Some(upstream),
                    ));
                    let down = tokio::spawn(pump(server_read, client_write, mode.clone(), None));
                    let mut t = tasks.lock().unwrap();
                    t.retain(|h| !h.is_finished());
                    t.push(up.abort_handle());
                    t.push(down.abort_handle());
                }
            }
        })
        .abort_handle();
        Proxy {
            port,
            mode,
            tasks,
            accept,
            accepted,
        }
    }

    /// How many connections the proxy accepted so far (a client's connection attempts,
    /// refused ones included).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn set(&self, new: Mode) {
        let old = *self.mode.borrow();
        // Connections are cut before the new mode is published: a pump holding bytes back in a
        // blackhole must not see the mode change and pass them on before it is aborted.
        if new == Mode::Reset || (old == Mode::DropReplies && new != Mode::DropReplies) {
            for task in self.tasks.lock().unwrap().drain(..) {
                task.abort();
            }
        }
        self.mode.send_replace(new);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// Copies one direction: commands when `upstream` (the server's port) is given, replies when not.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    upstream: Option<u16>,
) {
    let replies = upstream.is_none();
    let mut flusher: Option<TcpStream> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // A blackhole holds everything back: stop reading until it is lifted.
        if mode.wait_for(|m| *m != Mode::Blackhole).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a blackhole came down wait for it to lift.
        let current = match mode.wait_for(|m| *m != Mode::Blackhole).await {
            Ok(m) => *m,
            Err(_) => return,
        };
        match current {
            Mode::DropReplies if replies => continue,
            Mode::Delay(d) if replies => tokio::time::sleep(d).await,
            Mode::FlushScripts if holds(&buf[..n], b"EVALSHA") => {
                if let Some(port) = upstream
                    && !flush_scripts(&mut flusher, port).await
                {
                    return;
                }
            }
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether `haystack` holds `needle` (a command's name, as the client wrote it).
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Sends `SCRIPT FLUSH` to the server on `port` through `conn` (opened on first use) and waits
/// for its answer; whether it was answered.
async fn flush_scripts(conn: &mut Option<TcpStream>, port: u16) -> bool {
    if conn.is_none() {
        *conn = TcpStream::connect(("127.0.0.1", port)).await.ok();
    }
    let Some(stream) = conn.as_mut() else {
        return false;
    };
    if stream
        .write_all(b"*2\r\n$6\r\nSCRIPT\r\n$5\r\nFLUSH\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut reply = [0u8; 5];
    stream.read_exact(&mut reply).await.is_ok() && &reply == b"+OK\r\n"
}
