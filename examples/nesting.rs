//! Who owns a hold: every acquisition is an owner of its own, and a lock is reentrant only
//! where the nesting is explicit. Four shapes real code takes, each checked as it runs:
//!
//! 1. one task drives many lock futures at once (`buffer_unordered`): they exclude each other;
//! 2. a dispatcher takes the lock and hands each guard to a worker task: the worker holds it;
//! 3. a helper that locks the same name again, called inside `with_lock`'s work: reentrant,
//!    same fencing token, no wait; and a helper that is given the guard uses `reenter`;
//! 4. a read nested in a write hold's scope is the writer's own.
//!
//! Uses `REDIS_URL` when set, otherwise starts a temporary redis-server of its own. Run with
//! `cargo run --example nesting`.

#[path = "../tests/support/server.rs"]
mod server;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrisson::{Client, LockGuard, RLock};
use futures::StreamExt;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let client = Client::connect(&url).await?;

    // 1. 200 increments of 4 per-order counters, 20 at a time, all in this one task. Each
    // increment reads, waits 3 ms and writes: any two holders at once would lose an update.
    let counters = Arc::new(Mutex::new(HashMap::<u32, u32>::new()));
    let results: Vec<ferrisson::Result<()>> = futures::stream::iter(0..200u32)
        .map(|i| {
            let (client, counters) = (client.clone(), counters.clone());
            async move {
                let order = i % 4;
                let guard = client
                    .get_lock(&format!("nesting:order:{order}"))
                    .lock()
                    .await?;
                let seen = counters.lock().unwrap().get(&order).copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(3)).await;
                counters.lock().unwrap().insert(order, seen + 1);
                guard.unlock().await
            }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    results.into_iter().collect::<ferrisson::Result<()>>()?;
    let counts = counters.lock().unwrap().clone();
    println!("1. buffer_unordered in one task: counters {counts:?}");
    assert!(counts.values().all(|&n| n == 50), "an update was lost");

    // 2. A dispatcher hands each hold to a worker; the next lock() waits for that worker.
    let lock = client.get_lock("nesting:dispatch");
    let done = Arc::new(Mutex::new(0u32));
    let mut workers = Vec::new();
    for _ in 0..20 {
        let guard = lock.lock().await?;
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let seen = *done.lock().unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
            *done.lock().unwrap() = seen + 1;
            guard.unlock().await
        }));
    }
    for worker in workers {
        worker.await.expect("worker")?;
    }
    let done = *done.lock().unwrap();
    println!("2. dispatcher to 20 workers: {done} of 20 counted");
    assert_eq!(done, 20);

    // 3. Nesting, made explicit.
    let ledger = client.get_lock("nesting:ledger");
    let token = ledger
        .with_lock(|token| {
            let ledger = ledger.clone();
            async move {
                let nested = post_entry(&ledger).await?; // locks again: reentrant here
                assert_eq!(
                    nested, token,
                    "a nested hold shares the first grant's token"
                );
                ferrisson::Result::Ok(token)
            }
        })
        .await??;
    println!("3. a helper locking again inside with_lock: reentrant, token {token}");
    let guard = ledger.lock().await?;
    audit(&guard).await?;
    // Outside any scope, a second lock() is another acquisition: it waits for the first.
    let second = ledger
        .try_lock_for(Duration::from_millis(100), None)
        .await?;
    println!(
        "   reenter from the guard: ok; a second lock() outside any scope waited and got {}",
        if second.is_some() {
            "the lock"
        } else {
            "nothing"
        }
    );
    assert!(second.is_none());
    guard.unlock().await?;

    // 4. A read nested in a write hold's scope is the writer's own.
    let config = client.get_read_write_lock("nesting:config");
    let write = config.write_lock().lock().await?;
    let read = write.scope(config.read_lock().lock()).await?;
    println!(
        "4. a read nested in the write's scope: granted, token {}",
        read.fencing_token()
    );
    read.unlock().await?;
    write.unlock().await?;

    let unfinished = client.close().await;
    assert!(
        unfinished.is_empty(),
        "background work left: {unfinished:?}"
    );
    Ok(())
}

/// A helper that takes the ledger's lock itself: inside a hold's scope it is one more hold.
async fn post_entry(ledger: &RLock) -> ferrisson::Result<u64> {
    let guard = ledger.lock().await?;
    let token = guard.fencing_token();
    guard.unlock().await?;
    Ok(token)
}

/// A helper that is handed the hold takes one more hold of it with `reenter`.
async fn audit(guard: &LockGuard) -> ferrisson::Result<()> {
    let nested = guard.reenter().await?;
    assert_eq!(nested.fencing_token(), guard.fencing_token());
    assert_eq!(guard.hold_count().await?, 2);
    nested.unlock().await
}
