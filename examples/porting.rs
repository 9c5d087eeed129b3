//! A Java service ported the straight way, and what ferrisson does about each habit, checked
//! as it runs:
//!
//! 1. a helper that locks again under its caller's hold: with `fail_on_self_wait` (a port's test
//!    run) the call fails at once, naming both call sites, instead of hanging; run in the
//!    hold's scope it nests;
//! 2. the same mistake in production settings: the wait is warned of (here after 300 ms) and
//!    stopped by a timeout;
//! 3. `tryLock(wait)` around request work: `try_with_lock_for` in concurrent requests
//!    (`join_all`), where the wait bounds the acquisition and never cuts the work;
//! 4. a semaphore that starts closed (`trySetPermits(0)`), opened by another task;
//! 5. a task spawned inside a hold's work is outside it, even inside another guard's scope;
//! 6. read-in-write nests with the writer's token; an upgrade outside a scope is warned of.
//!
//! Uses `REDIS_URL` when set, otherwise starts a temporary redis-server of its own. Run with
//! `cargo run --example porting`.

#[path = "../tests/support/server.rs"]
mod server;

use std::time::{Duration, Instant};

use ferrisson::{Client, Error, RLock};
use futures::future::join_all;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Prints every WARN with its fields, as a service's log would show it.
struct Warnings;

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            println!("   WARN{}", fields.0);
        }
    }
}

/// Java's `restock()`: locks the inventory itself, as the method calling it already did.
async fn restock(lock: &RLock, item: u32) -> ferrisson::Result<()> {
    let guard = lock.lock().await?;
    println!(
        "   restocked item {item} under token {}",
        guard.fencing_token()
    );
    guard.unlock().await
}

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();

    // 1. A port's test run: a wait for one's own hold fails at once.
    let strict = Client::builder()
        .url(&url)
        .fail_on_self_wait(true)
        .build()
        .await?;
    let lock = strict.get_lock("porting:inventory");
    let guard = lock.lock().await?;
    match restock(&lock, 1).await {
        Err(e @ Error::SelfWait { .. }) => println!("1. found at once: {e}"),
        other => panic!("expected SelfWait, got {other:?}"),
    }
    // The fix: the helper runs in the hold's scope, where its lock() nests.
    guard.scope(restock(&lock, 1)).await?;
    guard.unlock().await?;

    // 2. Production settings: the same wait is warned of (WARN lines on stderr).
    let _logs = tracing::subscriber::set_default(tracing_subscriber::registry().with(Warnings));
    let client = Client::builder()
        .url(&url)
        .self_wait_warning(Duration::from_millis(300))
        .build()
        .await?;
    let lock = client.get_lock("porting:inventory");
    let guard = lock.lock().await?;
    let hung = tokio::time::timeout(Duration::from_millis(700), restock(&lock, 2)).await;
    assert!(hung.is_err(), "it waits for its own hold");
    println!("2. the wait for its own hold was warned of (the WARN above) and timed out");
    guard.unlock().await?;

    // 3. Request handlers: at most 150 ms to get the lock, then the work runs to its end.
    let lock = client.get_lock("porting:report");
    let started = Instant::now();
    let requests = (0..4).map(|request| {
        let lock = &lock;
        async move {
            lock.try_with_lock_for(Duration::from_millis(150), |token| async move {
                tokio::time::sleep(Duration::from_millis(100)).await; // longer than nothing
                (request, token)
            })
            .await
        }
    });
    let mut served = 0;
    for outcome in join_all(requests).await {
        match outcome? {
            Some((request, token)) => {
                served += 1;
                println!("3. request {request} ran under token {token}");
            }
            None => println!("3. a request was shed: busy for 150 ms"),
        }
    }
    assert!((1..4).contains(&served), "one at a time, some shed");
    println!("   {served} served in {:?}", started.elapsed());

    // 4. A gate that starts closed, opened by another task.
    let gate = client.get_semaphore("porting:warm");
    assert!(gate.try_set_permits(0).await?);
    assert!(!gate.try_acquire(1).await?);
    let opener = {
        let gate = gate.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            gate.release(1).await
        })
    };
    let warmed = gate.with_permits(1, || async { "warm" }).await?;
    opener.await.expect("the opener ran")?;
    println!("4. the gate opened: {warmed}");

    // 5. A task spawned inside A's work, running in B's scope, is not inside A: it waits.
    let (a, b) = (client.get_lock("porting:a"), client.get_lock("porting:b"));
    let held_b = b.lock().await?;
    let (a2, gb) = (a.clone(), &held_b);
    let (parent, child) = a
        .with_lock(|token| async move {
            let child = tokio::spawn(
                gb.scope(async move { a2.with_lock(|token| async move { token }).await }),
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!child.is_finished(), "the child waits for A");
            (token, child)
        })
        .await?;
    let child = child.await.expect("the child ran")?;
    assert_ne!(parent, child);
    println!("5. the spawned task waited for A and got a token of its own: {parent} < {child}");
    held_b.unlock().await?;

    // 6. Read inside write nests (the writer's token), and an upgrade outside a scope is a
    // wait for one's own read hold: warned of, as in 2.
    let rw = client.get_read_write_lock("porting:catalog");
    let (read, write) = (rw.read_lock(), rw.write_lock());
    let reader = &read;
    let (token, read_token) = write
        .with_lock(|token| async move {
            let inner = reader.lock().await?;
            let read_token = inner.fencing_token();
            inner.unlock().await?;
            ferrisson::Result::Ok((token, read_token))
        })
        .await??;
    assert_eq!(token, read_token);
    println!("6. a read inside the write hold's work nested, with the writer's token {token}");
    let reading = read.lock().await?;
    let upgrade = tokio::time::timeout(Duration::from_millis(700), write.lock()).await;
    assert!(upgrade.is_err(), "an upgrade waits for its own read hold");
    println!("   the upgrade outside a scope was warned of (the WARN above) and timed out");
    reading.unlock().await?;

    strict.close().await;
    client.close().await;
    Ok(())
}
