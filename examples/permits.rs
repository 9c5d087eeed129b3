//! Permits that come back when their holder dies: four workers share two expirable permits;
//! one of them "dies" holding its permit (its client is dropped without releasing, as a killed
//! process would leave it), and the others get the permit back once its lease runs out.
//!
//! Run with `cargo run --example permits` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let admin = ferrisson::Client::connect(&url).await?;
    let slots = admin.get_permit_expirable_semaphore("example:render-slots");
    if !slots.try_set_permits(2).await? {
        println!(
            "permits set by an earlier run: {} free",
            slots.available_permits().await?
        );
    }

    // The worker that dies: its permit has a 2 s lease that nobody will release or renew.
    let doomed = ferrisson::Client::connect(&url).await?;
    let permit = doomed
        .get_permit_expirable_semaphore("example:render-slots")
        .acquire_with_lease(Duration::from_secs(2))
        .await?;
    println!("worker 0 took permit {} and dies", permit.ids()[0]);
    std::mem::forget(permit); // a crash: no release is ever sent
    drop(doomed);

    let started = Instant::now();
    let running = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 1..=3 {
        let client = ferrisson::Client::connect(&url).await?;
        let running = running.clone();
        workers.push(tokio::spawn(async move {
            let slots = client.get_permit_expirable_semaphore("example:render-slots");
            for job in 0..2 {
                let permit = slots.acquire().await?; // renewed by the watchdog while held
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= 2, "more permits out than the semaphore has");
                println!(
                    "{:>6.1?}  worker {w} job {job}: permit {} (token {}), {now} running",
                    started.elapsed(),
                    &permit.ids()[0][..8],
                    permit.fencing_token(),
                );
                tokio::time::sleep(Duration::from_millis(800)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            ferrisson::Result::Ok(())
        }));
    }
    for worker in workers {
        worker.await.expect("worker")?;
    }
    println!(
        "the dead worker's permit came back by itself; {} of 2 free",
        slots.available_permits().await?
    );
    Ok(())
}
