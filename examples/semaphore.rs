//! A semaphore capping work across clients: six workers on three clients (as separate processes
//! would be) share two permits, so at most two calls to a rate-limited service run at once.
//!
//! Run with `cargo run --example semaphore` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let admin = ferrisson::Client::connect(&url).await?;
    let calls = admin.get_semaphore("example:partner-api");
    // A semaphore left from an earlier run against the same Redis starts again from 2.
    calls.drain_permits().await?;
    calls.add_permits(2).await?;

    let running = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for c in 0..3 {
        let client = ferrisson::Client::connect(&url).await?;
        for w in 0..2 {
            let semaphore = client.get_semaphore("example:partner-api");
            let running = running.clone();
            workers.push(tokio::spawn(async move {
                semaphore.acquire(1).await?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                println!("client {c} worker {w}: calling the partner ({now} calls running)");
                assert!(now <= 2);
                tokio::time::sleep(Duration::from_millis(100)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                semaphore.release(1).await
            }));
        }
    }
    for worker in workers {
        worker.await.expect("worker")?;
    }
    println!(
        "all six calls done, never more than two at once; {} permits free",
        calls.available_permits().await?
    );
    Ok(())
}
