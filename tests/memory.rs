//! Bounded Redis memory: locking and releasing many distinct names leaves O(1) keys per cluster
//! slot behind (the per-slot fencing counters), not one per name.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson::{Client, MultiLock, RedLock};
use support::{RedisServer, client, join_within};

/// Distinct names locked and released, over every kind.
const NAMES: usize = 100_000;
/// Tasks locking at once.
const TASKS: usize = 32;

async fn dbsize(server: &RedisServer) -> i64 {
    let mut raw = server.raw().await;
    redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap()
}

/// Every key, but the live clients' identities.
async fn all_keys(server: &RedisServer) -> Vec<String> {
    let mut raw = server.raw().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    keys.retain(|k| !k.starts_with("ferrisson_client:"));
    keys
}

async fn used_memory(server: &RedisServer) -> i64 {
    let mut raw = server.raw().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut raw)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

/// Locks and releases name `i` with the kind `i` picks: plain, fair, read, write, or a
/// MultiLock over two names (i and its neighbour name).
async fn cycle(client: &Client, i: usize) {
    let name = format!("entity:{i}");
    match i % 5 {
        0 => client.get_lock(&name).lock().await.unwrap().unlock().await,
        1 => {
            client
                .get_fair_lock(&name)
                .lock()
                .await
                .unwrap()
                .unlock()
                .await
        }
        2 => {
            let rw = client.get_read_write_lock(&name);
            rw.read_lock().lock().await.unwrap().unlock().await
        }
        3 => {
            let rw = client.get_read_write_lock(&name);
            rw.write_lock().lock().await.unwrap().unlock().await
        }
        _ => {
            let parts = [
                client.get_lock(&name),
                client.get_lock(&format!("{name}:b")),
            ];
            MultiLock::new(parts).lock().await.unwrap().unlock().await
        }
    }
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_distinct_names_leave_at_most_one_counter_per_slot() {
    let server = RedisServer::start();
    let client = client(&server).await;
    client
        .get_lock("warm-up")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let (keys_before, memory_before) = (dbsize(&server).await, used_memory(&server).await);

    let next = Arc::new(AtomicUsize::new(0));
    let tasks = (0..TASKS).map(|_| {
        let (client, next) = (client.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= NAMES {
                    return;
                }
                cycle(&client, i).await;
            }
        })
    });
    join_within(Duration::from_secs(240), tasks, "lock and release").await;

    let keys = dbsize(&server).await - keys_before;
    let memory = used_memory(&server).await - memory_before;
    eprintln!(
        "{NAMES} distinct names locked and released: {keys} keys and {memory} bytes of Redis \
         memory left ({:.1} bytes per name)",
        memory as f64 / NAMES as f64
    );
    assert!(keys <= 16_384, "{keys} keys left for {NAMES} names");
    assert!(memory <= 2 * 1024 * 1024, "{memory} bytes left");
    let left = all_keys(&server).await;
    let stray: Vec<&String> = left
        .iter()
        .filter(|k| !k.starts_with("ferrisson_token:{"))
        .collect();
    assert!(stray.is_empty(), "keys other than counters left: {stray:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_parts_leave_only_counters_on_every_instance() {
    const ROUNDS: usize = 2_000;
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(client(server).await);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let tasks = (0..8).map(|_| {
        let (clients, next) = (clients.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ROUNDS {
                    return;
                }
                let name = format!("job:{i}");
                let lock = RedLock::new(clients.iter().map(|c| c.get_lock(&name)));
                lock.lock().await.unwrap().unlock().await.unwrap();
            }
        })
    });
    join_within(Duration::from_secs(120), tasks, "redlock cycles").await;
    for server in &servers {
        let left = all_keys(server).await;
        assert!(
            left.iter().all(|k| k.starts_with("ferrisson_token:{")),
            "{left:?}"
        );
        assert!(left.len() <= ROUNDS);
    }
}

/// The fenced lock keeps Redisson's per-name counter, by design (a Java RFencedLock counts on
/// it): one key per fenced name, and nothing else beyond the slot counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_name_keeps_its_own_counter_and_nothing_else() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for i in 0..200 {
        let lock = client.get_fenced_lock(&format!("ledger:{i}"));
        let (token, guard) = lock.lock_and_get_token().await.unwrap();
        assert_eq!(lock.token().await.unwrap(), Some(token));
        guard.unlock().await.unwrap();
    }
    let left = all_keys(&server).await;
    let named = left
        .iter()
        .filter(|k| k.starts_with("redisson_lock_token:{ledger:"))
        .count();
    assert_eq!(named, 200);
    assert!(
        left.iter()
            .all(|k| k.starts_with("redisson_lock_token:") || k.starts_with("ferrisson_token:{")),
        "{left:?}"
    );
}
