//! A process that takes a lock and keeps it until it is killed: the tests kill it with SIGKILL
//! to show a dead holder frees the lock within its lease.
//!
//! Usage: `ferrisson-test-holder <redis-url> <lock-name> <watchdog-ms>`. Prints
//! `LOCKED <fencing-token>` once it holds the lock.

use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, name, lease_ms] = args.as_slice() else {
        eprintln!("usage: ferrisson-test-holder <redis-url> <lock-name> <watchdog-ms>");
        std::process::exit(2);
    };
    let lease_ms: u64 = lease_ms.parse().unwrap_or_else(|_| {
        eprintln!("watchdog-ms must be a number of milliseconds");
        std::process::exit(2);
    });
    let client = ferrisson::Client::builder()
        .url(url.as_str())
        .watchdog_timeout(Duration::from_millis(lease_ms))
        .build()
        .await
        .unwrap_or_else(|e| {
            eprintln!("cannot connect: {e}");
            std::process::exit(1);
        });
    let guard = client.get_lock(name).lock().await.unwrap_or_else(|e| {
        eprintln!("cannot lock: {e}");
        std::process::exit(1);
    });
    println!("LOCKED {}", guard.fencing_token());
    guard.lost().await;
    eprintln!("lease lost");
    std::process::exit(3);
}
