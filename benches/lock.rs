//! RLock benchmarks against a spawned redis-server: an uncontended lock+unlock cycle and a
//! contended handoff (8 tasks, one key). Before measuring, prints the Redis commands one
//! uncontended cycle costs, from `INFO commandstats` (and the same for a semaphore permit).
//! Then read-write lock readers without writers, under each `RwPolicy`: writer preference must
//! not slow readers down when no writer waits.
//!
//! Run with `cargo bench --bench lock` (`-- rwlock` for the read-write lock's part only).

#![allow(missing_docs)]

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ferrisson::RwPolicy;
use server::RedisServer;

const CONTENDERS: u64 = 8;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

const CYCLES: u64 = 1000;

/// Runs `cycle` `CYCLES` times after the caller's warm-up, prints the Redis commands one run
/// costs (INFO commandstats) and fails loudly unless it is one EVALSHA each way with nothing
/// else on the fast path. Returns the calls of each command.
async fn commands_per_cycle<F, Fut>(
    server: &RedisServer,
    what: &str,
    mut cycle: F,
) -> Vec<(String, u64)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    server.reset_stats().await;
    let started = Instant::now();
    for _ in 0..CYCLES {
        cycle().await;
    }
    let elapsed = started.elapsed();
    let mut stats = server.commandstats().await;
    stats.retain(|(name, _)| name != "config|resetstat" && name != "info");
    println!(
        "Redis commands per uncontended {what} ({CYCLES} cycles in {elapsed:?}, INFO commandstats):"
    );
    for (name, calls) in &stats {
        println!("  {name:<16} {:>6.3}", *calls as f64 / CYCLES as f64);
    }
    let get = |name: &str| calls_of(&stats, name);
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
    stats
}

fn calls_of(stats: &[(String, u64)], name: &str) -> u64 {
    stats.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c)
}

/// Prints what one uncontended lock+unlock costs in Redis commands and round trips.
fn report_commands_per_cycle(rt: &tokio::runtime::Runtime, server: &RedisServer) {
    rt.block_on(async {
        let client = ferrisson::Client::connect(&server.url()).await.unwrap();
        let lock = client.get_lock("bench:count");
        lock.lock().await.unwrap().unlock().await.unwrap(); // warm-up
        let stats = commands_per_cycle(server, "lock+unlock cycle", || async {
            lock.lock().await.unwrap().unlock().await.unwrap();
        })
        .await;
        let get = |name: &str| calls_of(&stats, name);
        let per_cycle = |calls: u64| calls as f64 / CYCLES as f64;
        let round_trips = get("evalsha") + get("eval") + get("script|load") + get("subscribe") + get("ping");
        println!(
            "  => round trips per cycle: {:.3} (EVALSHA {:.3}, SCRIPT LOAD {:.3}, SUBSCRIBE {:.3}); \
             the rest run inside the scripts",
            per_cycle(round_trips),
            per_cycle(get("evalsha")),
            per_cycle(get("script|load")),
            per_cycle(get("subscribe")),
        );
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
        commands_per_cycle(server, "semaphore acquire(1)+release(1)", || async {
            semaphore.acquire(1).await.unwrap();
            semaphore.release(1).await.unwrap();
        })
        .await;
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
        commands_per_cycle(server, "permit acquire()+release()", || async {
            semaphore.acquire().await.unwrap().release().await.unwrap();
        })
        .await;
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

const POLICIES: [RwPolicy; 2] = [RwPolicy::Redisson, RwPolicy::PreferWriters];

/// Read lock+unlock cycles cost one script call each way under both policies (writer preference
/// reads its marks inside the same scripts).
fn report_rwlock_read_commands(rt: &tokio::runtime::Runtime, server: &RedisServer) {
    rt.block_on(async {
        let client = ferrisson::Client::connect(&server.url()).await.unwrap();
        for policy in POLICIES {
            let read = client
                .get_read_write_lock_with(&format!("bench:rw:count:{policy:?}"), policy)
                .read_lock();
            read.lock().await.unwrap().unlock().await.unwrap(); // warm-up
            let what = format!("rwlock read lock+unlock, {policy:?}");
            commands_per_cycle(server, &what, || async {
                read.lock().await.unwrap().unlock().await.unwrap();
            })
            .await;
        }
    });
}

/// Microseconds Redis spent per EVALSHA since the last stats reset (`INFO commandstats`).
async fn evalsha_usec_per_call(server: &RedisServer) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix("usec_per_call="))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// `acquisitions` read lock+unlock cycles by `tasks` tasks over `clients`, all on one name.
async fn read_cycles(
    clients: &[ferrisson::Client],
    name: &str,
    policy: RwPolicy,
    tasks: u64,
    acquisitions: u64,
) -> Duration {
    let remaining = Arc::new(AtomicU64::new(acquisitions));
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let read = clients[i as usize % clients.len()]
                .get_read_write_lock_with(name, policy)
                .read_lock();
            let remaining = remaining.clone();
            tokio::spawn(async move {
                while remaining
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    read.lock().await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    started.elapsed()
}

/// Reader throughput without writers, the two policies measured in alternation (on a shared,
/// noisy machine, back-to-back criterion runs drift more than the difference looked for):
/// medians of 15 rounds, per acquisition, and the time Redis spent per script call.
fn compare_rwlock_policies(rt: &tokio::runtime::Runtime, server: &RedisServer) {
    rt.block_on(async {
        let clients = [
            ferrisson::Client::connect(&server.url()).await.unwrap(),
            ferrisson::Client::connect(&server.url()).await.unwrap(),
        ];
        const ROUNDS: usize = 15;
        for (tasks, acquisitions) in [(1u64, 1000u64), (CONTENDERS, 4000)] {
            let mut per_op: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            let mut redis_usec: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for round in 0..=ROUNDS {
                // Odd rounds go the other way round, so neither policy always runs second.
                let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
                for p in order {
                    let policy = &POLICIES[p];
                    let name = format!("bench:rw:ab:{policy:?}");
                    server.reset_stats().await;
                    let took = read_cycles(&clients, &name, *policy, tasks, acquisitions).await;
                    if round > 0 {
                        // Round 0 warms up.
                        per_op[p].push(took.as_secs_f64() * 1e6 / acquisitions as f64);
                        redis_usec[p].push(evalsha_usec_per_call(server).await);
                    }
                }
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            println!(
                "rwlock readers without writers, {tasks} task(s) on {} client(s), medians of {ROUNDS} alternating rounds:",
                tasks.min(2)
            );
            for (p, policy) in POLICIES.iter().enumerate() {
                println!(
                    "  {:<14} {:>7.1} µs per read lock+unlock, {:>5.2} µs in Redis per EVALSHA",
                    format!("{policy:?}"),
                    median(&mut per_op[p]),
                    median(&mut redis_usec[p]),
                );
            }
        }
    });
}

/// Readers only, under each policy: one task's read lock+unlock cycle, and 8 tasks on 2 clients
/// whose read holds overlap (per acquisition).
fn rwlock_readers(c: &mut Criterion, rt: &tokio::runtime::Runtime, server: &RedisServer) {
    let clients: Vec<ferrisson::Client> = (0..2)
        .map(|_| {
            rt.block_on(ferrisson::Client::connect(&server.url()))
                .unwrap()
        })
        .collect();
    let mut group = c.benchmark_group("rwlock readers, no writer");
    for policy in POLICIES {
        let read = clients[0]
            .get_read_write_lock_with(&format!("bench:rw:one:{policy:?}"), policy)
            .read_lock();
        group.bench_function(format!("{policy:?}: read lock+unlock"), |b| {
            b.to_async(rt).iter(|| async {
                read.lock().await.unwrap().unlock().await.unwrap();
            })
        });
    }
    for policy in POLICIES {
        let name = format!("bench:rw:many:{policy:?}");
        group.bench_function(
            format!("{policy:?}: 8 overlapping readers, per acquisition"),
            |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let clients = clients.clone();
                    let name = name.clone();
                    async move { read_cycles(&clients, &name, policy, CONTENDERS, iters).await }
                })
            },
        );
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let server = RedisServer::start();
    let rt = runtime();
    report_commands_per_cycle(&rt, &server);
    report_semaphore_commands(&rt, &server);
    report_permit_commands(&rt, &server);
    report_rwlock_read_commands(&rt, &server);
    compare_rwlock_policies(&rt, &server);
    uncontended(c, &rt, &server);
    raw_baseline(c, &rt, &server);
    contended(c, &rt, &server);
    rwlock_readers(c, &rt, &server);
}

criterion_group! {
    name = lock;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(lock);
