//! Ports for test servers and the check that the server answering on one is ours. Part of
//! `server.rs` (included from there, so that the examples, which include `server.rs` alone, have
//! it too).

#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Ports handed out in this process and not yet released, so that two servers started at once
/// never pick the same one before either has bound it.
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free loopback port from 12000..22000, whose cluster bus port (+ 10000) is free too when
/// `with_bus`, reserved in this process until [`release_port`]. The range lies below Linux's
/// ephemeral range (32768 and up), from which the kernel draws both `bind(0)` ports and
/// clients' local ports: a port from there can be taken by another test's client or listener
/// between this check and the server's bind (the server then exits, or worse, a readiness
/// check reaches the other listener), and a client reconnecting to a restarting server can even
/// connect to itself on it.
pub fn pick_port(with_bus: bool) -> u16 {
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    for _ in 0..1000 {
        let port = 12000 + (random() % 10000) as u16;
        if taken.contains(&port) || !bindable(port) || (with_bus && !bindable(port + 10000)) {
            continue;
        }
        taken.insert(port);
        return port;
    }
    panic!("no free loopback port (with its bus port + 10000) in 12000..22000");
}

/// Gives a port from [`pick_port`] back.
pub fn release_port(port: u16) {
    if let Some(taken) = TAKEN.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        taken.remove(&port);
    }
}

/// A loopback port nothing listens on, reserved for this process (see [`pick_port`]).
pub fn free_port() -> u16 {
    pick_port(false)
}

// ---- readiness --------------------------------------------------------------------------------

/// What answers on a port, asked by [`answer_on`].
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Nothing, or no `+PONG` yet (refused, `-LOADING`, no reply within 500 ms).
    Nothing,
    /// The server with the process id asked for: up and answering.
    Ours,
    /// A server of another process (the port was taken by someone else): its `process_id`.
    Other(u32),
}

/// Whether the server of process `pid` answers PING on `port`: `PING` and `INFO server` on one
/// connection, whose `process_id` must be `pid`. A bare PING can be answered by whatever else
/// listens on the port before our server has bound it (it then fails to bind and exits), and a
/// test would go on against someone else's server.
pub fn answer_on(port: u16, pid: u32) -> Answer {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return Answer::Nothing;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\nINFO server\r\n").is_err() {
        return Answer::Nothing;
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || !line.starts_with("+PONG") {
        return Answer::Nothing;
    }
    line.clear();
    let Some(len) = reader
        .read_line(&mut line)
        .ok()
        .and_then(|_| line.trim().strip_prefix('$')?.parse::<usize>().ok())
    else {
        return Answer::Nothing;
    };
    let mut info = vec![0; len];
    if reader.read_exact(&mut info).is_err() {
        return Answer::Nothing;
    }
    let theirs = String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:")?.trim().parse::<u32>().ok());
    match theirs {
        Some(theirs) if theirs == pid => Answer::Ours,
        Some(theirs) => Answer::Other(theirs),
        None => Answer::Nothing,
    }
}

/// Whether a server's start failed because the binary has no TLS: Redis 7.0+ and Valkey built
/// without it log `Failed finding TLS support` (after `Missing implement of connection type
/// tls`); Redis 6.x built without it does not know the `tls-port` setting at all (`FATAL CONFIG
/// FILE ERROR` naming `tls-port`, `Bad directive`). Nothing else counts.
pub fn says_no_tls(output: &str) -> bool {
    output.contains("Failed finding TLS support")
        || output.contains("Missing implement of connection type tls")
        || (output.contains("FATAL CONFIG FILE ERROR")
            && output.contains("'tls-port")
            && output.contains("Bad directive"))
}
