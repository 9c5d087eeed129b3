//! Inspection on a real Redis 7 cluster (3 masters, 3 replicas): every kind's snapshot with
//! holders of two clients, waiters counted through sharded pub/sub (the script's SHARDNUMSUB
//! variant), a fair queue in order, revocation requests, a permit's expiry, a latch's count;
//! then, on a layout written by hand with no other client about, one EVALSHA per snapshot and
//! nothing written on any master.

mod support;

use std::time::Duration;

use ferrisson::Client;
use ferrisson::inspect::{LockKind, RwMode, Snapshot};
use redis::AsyncCommands;
use support::cluster::RedisCluster;
use support::eventually;

async fn cluster_client(cluster: &RedisCluster) -> Client {
    Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .fair_lock_queue_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("a cluster client")
}

/// Every key on every master with its value (DUMP) and TTL, and each master's count of writes
/// since its last save.
async fn state(cluster: &RedisCluster) -> (Vec<(String, Vec<u8>, i64)>, Vec<u64>) {
    let mut dumped = Vec::new();
    let mut dirty = Vec::new();
    for port in cluster.masters().await {
        let mut node = cluster.raw_node(port).await;
        let keys: Vec<String> = node.keys("*").await.unwrap();
        // Live clients' identities are their heartbeats' to refresh, not a snapshot's.
        for key in keys
            .into_iter()
            .filter(|k| !k.starts_with("ferrisson_client:"))
        {
            let value: Vec<u8> = redis::cmd("DUMP")
                .arg(&key)
                .query_async(&mut node)
                .await
                .unwrap();
            let pttl: i64 = node.pttl(&key).await.unwrap();
            dumped.push((key, value, pttl));
        }
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut node)
            .await
            .unwrap();
        dirty.push(
            info.lines()
                .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
                .and_then(|n| n.trim().parse().ok())
                .expect("rdb_changes_since_last_save"),
        );
    }
    dumped.sort();
    (dumped, dirty)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_on_a_cluster_with_sharded_waiters_one_evalsha_and_no_write() {
    let cluster = RedisCluster::start().await;
    let (a, b, c) = (
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    );

    // A plain lock: a's nested holds, b waiting (subscribed by SSUBSCRIBE on the slot's master).
    let lock = a.get_lock("orders");
    let outer = lock.lock().await.unwrap();
    let inner = outer.reenter().await.unwrap();
    let waiting = b.get_lock("orders");
    let waiter = tokio::spawn(async move { waiting.lock().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.snapshot().await.unwrap().ferrisson_subscribers == 1
        })
        .await,
        "b's wait is counted"
    );
    let held = lock.snapshot().await.unwrap();
    assert_eq!((held.subscribers, held.holders.len()), (1, 1), "{held:?}");
    assert_eq!(
        (held.holders[0].client, held.holders[0].holds),
        (Some(a.id()), 2)
    );
    assert!(held.lease.is_some() && held.token_counter.is_some());
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let turned = waiter.await.unwrap();
    let snapshot = a.get_lock("orders").snapshot().await.unwrap();
    assert_eq!(snapshot.holders[0].client, Some(b.id()));
    turned.unlock().await.unwrap();

    // A fair queue: b then c behind a.
    let fair = a.get_fair_lock("tickets");
    let first = fair.lock().await.unwrap();
    let mut waiters = Vec::new();
    for (client, n) in [(&b, 1), (&c, 2)] {
        let waiting = client.get_fair_lock("tickets");
        waiters.push(tokio::spawn(async move { waiting.lock().await.unwrap() }));
        assert!(
            eventually(Duration::from_secs(5), || async {
                fair.snapshot().await.unwrap().queue.len() == n
            })
            .await
        );
    }
    let queued = fair.snapshot().await.unwrap();
    assert_eq!(queued.kind, LockKind::Fair);
    let order: Vec<_> = queued.queue.iter().map(|w| w.client).collect();
    assert_eq!(order, [Some(b.id()), Some(c.id())]);
    for waiter in &queued.queue {
        assert!(waiter.turn_timeout.is_some_and(|t| t.ahead().is_some()));
        assert!(waiter.alive_deadline.is_some_and(|t| t.ahead().is_some()));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            fair.snapshot()
                .await
                .unwrap()
                .queue
                .iter()
                .all(|w| w.subscribers == 1)
        })
        .await,
        "each fair waiter listens on its own channel"
    );
    first.unlock().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unlock().await.unwrap();
    }

    // Readers of two clients, a revocation request for them.
    let rw = a.get_read_write_lock("catalog");
    let read_a = rw.read_lock().lock().await.unwrap();
    let read_b = b
        .get_read_write_lock("catalog")
        .read_lock()
        .lock()
        .await
        .unwrap();
    assert_eq!(rw.read_lock().request_revocation().await.unwrap(), 2);
    let reading = rw.snapshot().await.unwrap();
    assert_eq!(reading.mode, Some(RwMode::Read));
    let mut clients: Vec<_> = reading.readers.iter().map(|r| r.client).collect();
    clients.sort();
    let mut expected = vec![Some(a.id()), Some(b.id())];
    expected.sort();
    assert_eq!(clients, expected);
    assert!(
        reading
            .readers
            .iter()
            .all(|r| r.leases.len() == 1 && r.leases[0].is_some())
    );
    assert_eq!(reading.revocations.len(), 2);
    read_a.unlock().await.unwrap();
    read_b.unlock().await.unwrap();

    // A permit that expired and one that did not; a latch with a waiter.
    let permits = a.get_permit_expirable_semaphore("render");
    assert!(permits.try_set_permits(2).await.unwrap());
    let long = permits
        .acquire_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let short = permits
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = permits.snapshot().await.unwrap();
    assert_eq!(out.permits.len(), 2, "{out:?}");
    assert_eq!(out.permits[0].id, short.ids()[0]);
    assert!(out.permits[0].expires.has_passed());
    assert!(out.permits[1].expires.ahead().is_some());
    long.release().await.unwrap();
    drop(short);

    let latch = a.get_count_down_latch("ready");
    assert!(latch.try_set_count(2).await.unwrap());
    let waiting = b.get_count_down_latch("ready");
    let waiter = tokio::spawn(async move { waiting.await_zero().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || async {
            latch.snapshot().await.unwrap().subscribers == 1
        })
        .await,
        "b's latch wait is counted"
    );
    assert!(
        matches!(a.inspect("ready").await.unwrap(), Snapshot::CountDownLatch(l) if l.count == 2)
    );
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    waiter.await.unwrap();
    for client in [a, b, c] {
        client.close().await;
    }

    // A layout written by hand, nobody else connected: one EVALSHA a snapshot, nothing written.
    let mut raw = cluster.cluster_connection().await;
    let owner = "6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5:1";
    let _: () = raw.hset("hand", owner, 1).await.unwrap();
    let _: () = raw.pexpire("hand", 60_000).await.unwrap();
    let _: () = raw
        .hset_multiple(
            "hand-rw",
            &[("mode", "write"), (&format!("{owner}:write"), "2")],
        )
        .await
        .unwrap();
    let _: () = raw.set("hand-sem", 4).await.unwrap();
    // Without an identity: its heartbeat's PEXPIRE would be a write between the two looks.
    let inspector = Client::builder()
        .cluster(cluster.seed_urls())
        .identity(false)
        .build()
        .await
        .expect("a cluster client");
    // Short-lived records of the work above (a partial release's latch) expire first: an expiry
    // is a write, and must not fall between the two looks.
    let settled = eventually(Duration::from_secs(20), || async {
        state(&cluster)
            .await
            .0
            .iter()
            .all(|(_, _, ttl)| *ttl < 0 || *ttl > 10_000)
    });
    assert!(settled.await, "short-lived keys remain");
    let before = state(&cluster).await;
    cluster.reset_stats().await;
    let lock = inspector.get_lock("hand").snapshot().await.unwrap();
    assert_eq!(lock.holders[0].owner, owner);
    let rw = inspector
        .get_read_write_lock("hand-rw")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(
        rw.writer.map(|w| (w.owner, w.holds)),
        Some((owner.to_owned(), 2))
    );
    let sem = inspector
        .get_semaphore("hand-sem")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(sem.available, Some(4));
    for (name, lock_like) in [("hand", true), ("hand-rw", false), ("orders", false)] {
        let found = inspector.inspect(name).await.unwrap();
        assert_eq!(matches!(found, Snapshot::Lock(_)), lock_like, "{found:?}");
    }
    assert_eq!(
        cluster.calls("evalsha").await,
        3 + 3,
        "one EVALSHA per snapshot"
    );
    let after = state(&cluster).await;
    assert_eq!(after.1, before.1, "no master counted a write");
    assert_eq!(after.0.len(), before.0.len());
    for ((key, value, ttl), (key2, value2, ttl2)) in before.0.iter().zip(&after.0) {
        assert_eq!((key, value), (key2, value2), "{key} unchanged");
        assert!(
            *ttl2 <= *ttl && (*ttl2 < 0) == (*ttl < 0),
            "{key}: TTL {ttl} then {ttl2}"
        );
    }
}
