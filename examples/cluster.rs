//! Locks on a Redis Cluster: workers on two clients contend for locks whose names fall in
//! different slots (each lock's keys in its own slot, on that slot's master), waiters wake by
//! sharded pub/sub, and a MultiLock takes locks of several slots at once.
//!
//! Run with `cargo run --example cluster`: it uses `REDIS_CLUSTER` (comma-separated seed URLs)
//! when set, or starts a local 3-master + 3-replica cluster of its own.

#[path = "../tests/support/cluster.rs"]
mod cluster;
#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_cluster, seeds) = match std::env::var("REDIS_CLUSTER") {
        Ok(seeds) => (None, seeds.split(',').map(str::to_owned).collect()),
        Err(_) => {
            let started = Instant::now();
            let cluster = cluster::RedisCluster::start().await;
            println!("started a local cluster in {:?}", started.elapsed());
            let seeds = cluster.seed_urls();
            (Some(cluster), seeds)
        }
    };
    let names = ["example:orders", "example:users", "example:invoices"];
    let inside: Arc<Vec<AtomicUsize>> =
        Arc::new(names.iter().map(|_| AtomicUsize::new(0)).collect());
    let mut workers = Vec::new();
    for c in 0..2 {
        let client = ferrisson::Client::builder()
            .cluster(seeds.clone())
            .build()
            .await?;
        for (i, name) in names.iter().enumerate() {
            let lock = client.get_lock(name);
            let inside = inside.clone();
            workers.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let guard = lock.lock().await?;
                    assert_eq!(inside[i].fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    println!(
                        "client {c}: {} held with token {}",
                        lock.name(),
                        guard.fencing_token()
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    inside[i].fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await?;
                }
                ferrisson::Result::Ok(())
            }));
        }
    }
    for worker in workers {
        worker.await.expect("worker")?;
    }
    let client = ferrisson::Client::builder().cluster(seeds).build().await?;
    let all = ferrisson::MultiLock::new(names.iter().map(|n| client.get_lock(n)));
    let guard = all.lock().await?;
    println!("a MultiLock holds all {} locks, across slots", names.len());
    guard.unlock().await?;
    Ok(())
}
