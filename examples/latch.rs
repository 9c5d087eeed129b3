//! A count-down latch across clients: a coordinator waits until three workers, each with its
//! own client (as separate processes would be), have reported ready.
//!
//! Run with `cargo run --example latch` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let coordinator = ferrisson::Client::connect(&url).await?;
    let ready = coordinator.get_count_down_latch("example:workers-ready");
    ready.delete().await?; // a latch left over from an earlier run
    assert!(ready.try_set_count(3).await?);

    let started = Instant::now();
    for worker in 1..=3u64 {
        let client = ferrisson::Client::connect(&url).await?;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100 * worker)).await;
            let left = client
                .get_count_down_latch("example:workers-ready")
                .count_down()
                .await
                .expect("count down");
            println!("worker {worker}: ready ({left} to go)");
        });
    }
    if !ready.await_for(Duration::from_secs(10)).await? {
        println!("not everybody was ready within 10 s");
        std::process::exit(1);
    }
    println!(
        "coordinator: all workers ready after {:?}; the latch is open (count {})",
        started.elapsed(),
        ready.get_count().await?
    );
    Ok(())
}
