//! Several workers on two clients contend for one lock; each prints the fencing token it got
//! and from whom the lock was handed over. Uses `REDIS_URL` when set, otherwise starts a
//! temporary redis-server of its own (installing Debian's package when missing and run as root).
//!
//! Run with `cargo run --example demo`.

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WORKERS: usize = 4;
const ROUNDS: usize = 5;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let clients = [
        ferrisson::Client::connect(&url).await?,
        ferrisson::Client::connect(&url).await?,
    ];
    for (i, c) in clients.iter().enumerate() {
        println!("client {i}: id {}", c.id());
    }

    // The protected resource: who wrote last, with which token.
    let last = Arc::new(Mutex::new((String::from("nobody"), 0u64)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let lock = clients[w % 2].get_lock("demo:printer");
        let last = last.clone();
        tasks.push(tokio::spawn(async move {
            let me = format!("worker {w} (client {})", w % 2);
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let guard = lock.lock().await?;
                let token = guard.fencing_token();
                let previous = {
                    let mut last = last.lock().unwrap();
                    assert!(token > last.1, "fencing token went backwards");
                    std::mem::replace(&mut *last, (me.clone(), token))
                };
                println!(
                    "{:>7.1} ms  {me} holds the lock, token {token:>3}, waited {:>6.1} ms, handed over by {}",
                    started.elapsed().as_secs_f64() * 1e3,
                    asked.elapsed().as_secs_f64() * 1e3,
                    previous.0,
                );
                tokio::time::sleep(Duration::from_millis(20)).await; // the critical section
                guard.unlock().await?;
                // Other work between rounds. Without it the releasing worker usually takes the
                // lock straight back: RLock is not fair (RFairLock is).
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, ferrisson::Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked")?;
    }
    let lock = clients[0].get_lock("demo:printer");
    println!(
        "{} grants, tokens strictly increasing, no overlap; lock free again: {}",
        WORKERS * ROUNDS,
        !lock.is_locked().await?
    );
    Ok(())
}
