//! A command-line tool: a current-thread runtime (the natural choice for a CLI) that holds a
//! lock across blocking work, and ends cleanly. Its lease is renewed by the client's own thread
//! while this thread is busy, and `close` makes sure the release reached Redis before the
//! process exits, so the next run gets the lock at once. Stopped with Ctrl-C (or SIGTERM)
//! halfway, it lets the export finish, gives the lock back as well, thanks to `close_on_signal`,
//! and exits with status 130 (143); a second Ctrl-C cuts the export and gives the lock back at
//! once: try it during the three seconds of "export".
//!
//! Run with `cargo run --example cli` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let client = ferrisson::Client::builder()
        .url(&url)
        // Short, to show it: the blocking work below lasts three leases.
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .await?;
    // From here on, Ctrl-C lets the work under the lock finish and gives every hold of this
    // client back before the process ends, instead of leaving the lock to its lease (30 s by
    // default) and the next run waiting.
    client.close_on_signal()?;
    let lock = client.get_lock("nightly-export");

    // Fail fast when another run holds it, as a cron job would.
    let Some(guard) = lock.try_lock_for(Duration::from_secs(2), None).await? else {
        eprintln!("another export is running");
        return Ok(());
    };
    let started = Instant::now();
    // Synchronous work on the only thread this runtime has.
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "blocked for {:?}; still holding: {}",
        started.elapsed(),
        !guard.is_lost()
    );
    assert!(!guard.is_lost(), "the lease was renewed meanwhile");
    drop(guard); // released in the background, on the client's thread

    // Before the process ends: wait for that release.
    let left = client.clone().close().await;
    assert!(left.is_empty(), "not released: {left:?}");
    let next = ferrisson::Client::connect(&url).await?;
    let free = next.get_lock("nightly-export").try_lock().await?.is_some();
    println!("free for the next run at once: {free}");
    assert!(free);
    Ok(())
}
