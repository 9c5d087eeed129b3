//! What one lock operation costs the client in heap allocations, against a spawned
//! redis-server. In a CPU profile of `benches/compare`'s many-keys workload, allocation and
//! freeing are the largest group of the client's own time, so this is the count to keep down.
//!
//! Each case runs its operations 1,000 times after a warm-up and prints the allocations (and
//! reallocations) the whole process made per operation, background tasks included (the
//! watchdog, the pub/sub hub, redis-rs's connection driver), and the bytes they asked for.
//!
//! It also prints the size of the lock and unlock futures: a future is copied whenever it
//! moves (into a span's wrapper, into its caller's state), so its size is a cost per call too.
//!
//! Run with `cargo bench --bench allocs`. With `ALLOCS_PROFILE=<file>` it also writes dhat's
//! profile of the whole run (every allocation site with its backtrace) to that file, for
//! dhat's viewer (`dh_view.html`) or a script, to see where the allocations come from.

#![allow(missing_docs)]

#[path = "../tests/support/server.rs"]
mod server;

use std::future::Future;

use server::RedisServer;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const CYCLES: u64 = 1000;

/// Runs `cycle` `CYCLES` times after a warm-up and prints what one run allocated; skipped
/// unless `what` contains every word given on the command line (`cargo bench --bench allocs --
/// RLock`).
async fn measure<F, Fut>(what: &str, mut cycle: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let wanted = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .all(|word| what.contains(&word));
    if !wanted {
        return;
    }
    for _ in 0..100 {
        cycle().await;
    }
    let before = dhat::HeapStats::get();
    for _ in 0..CYCLES {
        cycle().await;
    }
    let after = dhat::HeapStats::get();
    let blocks = (after.total_blocks - before.total_blocks) as f64 / CYCLES as f64;
    let bytes = (after.total_bytes - before.total_bytes) as f64 / CYCLES as f64;
    println!("{what:<58} {blocks:>7.1} allocations {bytes:>8.0} bytes");
}

async fn lock_and_unlock(lock: &ferrisson::RLock) {
    let guard = lock.lock().await.expect("lock");
    guard.unlock().await.expect("unlock");
}

fn main() {
    // Cargo's `--bench` flag is accepted and ignored.
    let _profiler = match std::env::var_os("ALLOCS_PROFILE") {
        Some(file) => dhat::Profiler::builder().file_name(file).build(),
        None => dhat::Profiler::builder().testing().build(),
    };
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = ferrisson::Client::connect(&server.url())
            .await
            .expect("connect");
        println!(
            "Client heap allocations per operation ({CYCLES} runs each, after 100 warm-up runs):"
        );

        let lock = client.get_lock("allocs:lock");
        measure("RLock lock() + unlock(), watchdog lease", || {
            lock_and_unlock(&lock)
        })
        .await;
        measure(
            "RLock try_lock_for(0, 10 s) + unlock(), fixed lease",
            || async {
                let guard = lock
                    .try_lock_for(
                        std::time::Duration::ZERO,
                        Some(std::time::Duration::from_secs(10)),
                    )
                    .await
                    .expect("try_lock_for")
                    .expect("free");
                guard.unlock().await.expect("unlock");
            },
        )
        .await;
        let fenced = client.get_fenced_lock("allocs:fenced");
        measure("RFencedLock lock() + unlock()", || lock_and_unlock(&fenced)).await;
        let rw = client.get_read_write_lock("allocs:rw");
        let read = rw.read_lock();
        measure("RReadWriteLock read_lock().lock() + unlock()", || {
            lock_and_unlock(&read)
        })
        .await;
        let semaphore = client.get_semaphore("allocs:semaphore");
        semaphore.try_set_permits(4).await.expect("permits");
        measure("RSemaphore acquire(1) + release(1)", || async {
            semaphore.acquire(1).await.expect("acquire");
            semaphore.release(1).await.expect("release");
        })
        .await;
        // Combinators box each part's future (one allocation per part and call).
        let multi = ferrisson::MultiLock::new(
            ["allocs:m1", "allocs:m2", "allocs:m3"].map(|n| client.get_lock(n)),
        );
        measure("MultiLock of 3 lock() + unlock()", || async {
            multi.lock().await.expect("lock").unlock().await.expect("unlock");
        })
        .await;
        let redlock = ferrisson::RedLock::new(
            ["allocs:r1", "allocs:r2", "allocs:r3"].map(|n| client.get_lock(n)),
        );
        measure("RedLock of 3 lock() + unlock()", || async {
            redlock.lock().await.expect("lock").unlock().await.expect("unlock");
        })
        .await;
        let multi_bytes = std::mem::size_of_val(&multi.lock());
        let redlock_bytes = std::mem::size_of_val(&redlock.lock());
        println!("Future sizes: MultiLock lock() {multi_bytes} bytes, RedLock lock() {redlock_bytes} bytes");
        // The futures' sizes: each move of a future copies it, and async callers carry it.
        let lock_future = lock.lock();
        let lock_bytes = std::mem::size_of_val(&lock_future);
        let guard = lock_future.await.expect("lock");
        let unlock_future = guard.unlock();
        let unlock_bytes = std::mem::size_of_val(&unlock_future);
        unlock_future.await.expect("unlock");
        println!(
            "Future sizes: RLock lock() {lock_bytes} bytes, LockGuard unlock() {unlock_bytes} bytes"
        );
        // What redis-rs alone costs for the same two round trips, for scale.
        let raw = server.raw().await;
        measure(
            "bare redis-rs: SET NX PX + DEL (two round trips)",
            || async {
                let mut raw = raw.clone();
                let _: Option<String> = redis::cmd("SET")
                    .arg("allocs:raw")
                    .arg("x")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut raw)
                    .await
                    .expect("set");
                let _: i64 = redis::cmd("DEL")
                    .arg("allocs:raw")
                    .query_async(&mut raw)
                    .await
                    .expect("del");
            },
        )
        .await;
    });
}
