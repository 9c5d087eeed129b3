//! Sequential uncontended lock+unlock cycles on one client, timed two ways: wall time, and the
//! CPU time of this process (Linux `/proc/self/stat`; redis-server runs in its own process and is
//! not counted). CPU time hardly moves when other processes take turns on the cores, so it shows
//! small client-side costs (the `metrics` feature with no recorder installed, say) that wall time
//! on a busy machine hides. Prints one line per round; compare two builds round by round.
//!
//! Run with `cargo bench --bench sequential` (and again with `--features metrics`).
//! `SEQ_ROUNDS` (default 5) and `SEQ_CYCLES` (default 20000) size the run.

#![allow(missing_docs)]

#[path = "../tests/support/server.rs"]
mod server;

use std::time::Instant;

/// User + system CPU time of this process so far, in seconds (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rounds = env("SEQ_ROUNDS", 5);
    let cycles = env("SEQ_CYCLES", 20_000);
    let server = server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = ferrisson::Client::connect(&server.url()).await.unwrap();
        let lock = client.get_lock("bench:sequential");
        for _ in 0..1000 {
            lock.lock().await.unwrap().unlock().await.unwrap(); // warm-up
        }
        let feature = if cfg!(feature = "metrics") {
            "metrics on, no recorder"
        } else {
            "metrics off"
        };
        for round in 1..=rounds {
            let (wall, cpu) = (Instant::now(), cpu_seconds());
            for _ in 0..cycles {
                lock.lock().await.unwrap().unlock().await.unwrap();
            }
            let wall = wall.elapsed().as_secs_f64();
            let cpu = cpu_seconds() - cpu;
            println!(
                "{feature}: round {round}: {cycles} cycles, wall {:.2} us/cycle, client CPU {:.2} us/cycle",
                wall * 1e6 / cycles as f64,
                cpu * 1e6 / cycles as f64,
            );
        }
    });
}
