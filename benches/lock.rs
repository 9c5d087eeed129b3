//! RLock benchmarks against a spawned redis-server: an uncontended lock+unlock cycle and a
//! contended handoff (8 tasks, one key). Before measuring, prints the Redis commands one
//! uncontended cycle costs, from `INFO commandstats` (and the same for a semaphore permit).
//!
//! Run with `cargo bench --bench lock`.

#![allow(missing_docs)]

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use server::RedisServer;

const CONTENDERS: u64 = 8;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Prints what one uncontended lock+unlock costs in Redis commands, and fails loudly when the
/// fast path is more than one round trip each way.
fn report_commands_per_cycle(rt: &tokio::runtime::Runtime, server: &RedisServer) {
    rt.block_on(async {
        let client = ferrisson::Client::connect(&server.url()).await.unwrap();
        let lock = client.get_lock("bench:count");
        lock.lock().await.unwrap().unlock().await.unwrap(); // warm-up
        server.reset_stats().await;
        const CYCLES: u64 = 1000;
        for _ in 0..CYCLES {
            lock.lock().await.unwrap().unlock().await.unwrap();
        }
        let mut stats = server.commandstats().await;
        stats.retain(|(name, _)| name != "config|resetstat" && name != "info");
        let get = |name: &str| stats.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
        let per_cycle = |calls: u64| calls as f64 / CYCLES as f64;
        println!("Redis commands per uncontended lock+unlock cycle ({CYCLES} cycles, INFO commandstats):");
        for (name, calls) in &stats {
            println!("  {name:<16} {:>6.3}", per_cycle(*calls));
        }
        let round_trips = get("evalsha") + get("eval") + get("script|load") + get("subscribe") + get("ping");
        println!(
            "  => round trips per cycle: {:.3} (EVALSHA {:.3}, SCRIPT LOAD {:.3}, SUBSCRIBE {:.3}); \
             the rest run inside the scripts",
            per_cycle(round_trips),
            per_cycle(get("evalsha")),
            per_cycle(get("script|load")),
            per_cycle(get("subscribe")),
        );
        assert_eq!(get("evalsha"), 2 * CYCLES, "one acquire and one release per cycle");
        assert_eq!(get("script|load") + get("subscribe") + get("eval"), 0, "nothing else on the fast path");
    });
}

/// The same for the semaphore: one acquire and one release of a permit, each one script call.
fn report_semaphore_commands(rt: &tokio::runtime::Runtime, server: &RedisServer) {
    rt.block_on(async {
        let client = ferrisson::Client::connect(&server.url()).await.unwrap();
        let semaphore = client.get_semaphore("bench:semaphore");
        semaphore.try_set_permits(4).await.unwrap();
        semaphore.acquire(1).await.unwrap(); // warm-up
        semaphore.release(1).await.unwrap();
        server.reset_stats().await;
        const CYCLES: u64 = 1000;
        for _ in 0..CYCLES {
            semaphore.acquire(1).await.unwrap();
            semaphore.release(1).await.unwrap();
        }
        let mut stats = server.commandstats().await;
        stats.retain(|(name, _)| name != "config|resetstat" && name != "info");
        let get = |name: &str| stats.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
        println!(
            "Redis commands per uncontended semaphore acquire(1)+release(1) ({CYCLES} cycles):"
        );
        for (name, calls) in &stats {
            println!("  {name:<16} {:>6.3}", *calls as f64 / CYCLES as f64);
        }
        assert_eq!(
            get("evalsha"),
            2 * CYCLES,
            "one script call per acquire and per release"
        );
        assert_eq!(
            get("script|load") + get("subscribe") + get("eval"),
            0,
            "nothing else on the fast path"
        );
    });
}

/// The same for the permit-expirable semaphore: acquire() and release() of a guard, each one
/// script call (the permit's watchdog renewal is not due within the measured cycles).
fn report_permit_commands(rt: &tokio::runtime::Runtime, server: &RedisServer) {
    rt.block_on(async {
        let client = ferrisson::Client::connect(&server.url()).await.unwrap();
        let semaphore = client.get_permit_expirable_semaphore("bench:permits");
        semaphore.try_set_permits(4).await.unwrap();
        semaphore.acquire().await.unwrap().release().await.unwrap(); // warm-up
        server.reset_stats().await;
        const CYCLES: u64 = 1000;
        let started = Instant::now();
        for _ in 0..CYCLES {
            semaphore.acquire().await.unwrap().release().await.unwrap();
        }
        let elapsed = started.elapsed();
        let mut stats = server.commandstats().await;
        stats.retain(|(name, _)| name != "config|resetstat" && name != "info");
        let get = |name: &str| stats.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
        println!(
            "Redis commands per uncontended permit acquire()+release() ({CYCLES} cycles in {elapsed:?}):"
        );
        for (name, calls) in &stats {
            println!("  {name:<16} {:>6.3}", *calls as f64 / CYCLES as f64);
        }
        assert_eq!(
            get("evalsha"),
            2 * CYCLES,
            "one script call per acquire and per release"
        );
        assert_eq!(
            get("script|load") + get("subscribe") + get("eval"),
            0,
            "nothing else on the fast path"
        );
    });
}

fn uncontended(c: &mut Criterion, rt: &tokio::runtime::Runtime, server: &RedisServer) {
    let client = rt
        .block_on(ferrisson::Client::connect(&server.url()))
        .unwrap();
    let lock = client.get_lock("bench:uncontended");
    c.bench_function("rlock uncontended lock+unlock", |b| {
        b.to_async(rt).iter(|| async {
            lock.lock().await.unwrap().unlock().await.unwrap();
        })
    });
}

/// The floor for comparison: the same two round trips with plain redis-rs on a
/// ConnectionManager, `SET NX PX` then a compare-and-delete script (no reentrancy, no token, no
/// watchdog, no release latch).
fn raw_baseline(c: &mut Criterion, rt: &tokio::runtime::Runtime, server: &RedisServer) {
    let conn = rt
        .block_on(redis::aio::ConnectionManager::new(
            redis::Client::open(server.url()).unwrap(),
        ))
        .unwrap();
    let unlock = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    );
    c.bench_function("raw baseline SET NX PX + compare-and-delete", |b| {
        b.to_async(rt).iter(|| {
            let mut conn = conn.clone();
            let unlock = &unlock;
            async move {
                let ok: Option<String> = redis::cmd("SET")
                    .arg("bench:raw")
                    .arg("me")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(ok.is_some());
                let _: i64 = unlock
                    .key("bench:raw")
                    .arg("me")
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
            }
        })
    });
}

fn contended(c: &mut Criterion, rt: &tokio::runtime::Runtime, server: &RedisServer) {
    let clients: Vec<ferrisson::Client> = (0..2)
        .map(|_| {
            rt.block_on(ferrisson::Client::connect(&server.url()))
                .unwrap()
        })
        .collect();
    c.bench_function(
        "rlock contended handoff (8 tasks, one key), per acquisition",
        |b| {
            b.to_async(rt).iter_custom(|iters| {
                let clients = clients.clone();
                async move {
                    let remaining = Arc::new(AtomicU64::new(iters));
                    let inside = Arc::new(AtomicU64::new(0));
                    let started = Instant::now();
                    let tasks: Vec<_> = (0..CONTENDERS)
                        .map(|i| {
                            let lock =
                                clients[i as usize % clients.len()].get_lock("bench:contended");
                            let remaining = remaining.clone();
                            let inside = inside.clone();
                            tokio::spawn(async move {
                                while remaining
                                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                        n.checked_sub(1)
                                    })
                                    .is_ok()
                                {
                                    let guard = lock.lock().await.unwrap();
                                    assert_eq!(
                                        inside.fetch_add(1, Ordering::SeqCst),
                                        0,
                                        "two holders at once"
                                    );
                                    inside.fetch_sub(1, Ordering::SeqCst);
                                    guard.unlock().await.unwrap();
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                    started.elapsed()
                }
            })
        },
    );
}

fn benches(c: &mut Criterion) {
    let server = RedisServer::start();
    let rt = runtime();
    report_commands_per_cycle(&rt, &server);
    report_semaphore_commands(&rt, &server);
    report_permit_commands(&rt, &server);
    uncontended(c, &rt, &server);
    raw_baseline(c, &rt, &server);
    contended(c, &rt, &server);
}

criterion_group! {
    name = lock;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(lock);
