//! A fair lock: five waiters that asked in order are served in that order.
//!
//! Run with `cargo run --example fair` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::time::Duration;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let client = ferrisson::Client::connect(&url).await?;
    let first = client.get_fair_lock("print-queue").lock().await?;
    let mut waiters = Vec::new();
    for i in 0..5 {
        let lock = client.get_fair_lock("print-queue");
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            println!("waiter {i} served (token {})", guard.fencing_token());
            guard.unlock().await
        }));
        println!("waiter {i} queued");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    first.unlock().await?;
    for w in waiters {
        w.await.expect("waiter task")?;
    }
    Ok(())
}
