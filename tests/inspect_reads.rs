//! What a snapshot costs and leaves, on one server: nothing written (every key's DUMP and TTL,
//! and Redis' own count of writes, the same before and after), one EVALSHA each, `WrongType` for
//! a key of another type, and JSON with the `serde` feature.

mod support;

use std::time::Duration;

use ferrisson::inspect::Snapshot;
use ferrisson::{Client, Error};
use redis::AsyncCommands;
use support::{RedisServer, client};

fn about(left: Option<Duration>, expected: Duration) -> bool {
    left.is_some_and(|d| d <= expected && d + Duration::from_secs(2) > expected)
}

/// Every key with its value (DUMP) and whether it has a TTL, and Redis' count of writes since
/// the last save (`rdb_changes_since_last_save`), which any write, expiry included, moves.
async fn state(raw: &mut redis::aio::MultiplexedConnection) -> (Vec<(String, Vec<u8>, i64)>, u64) {
    let mut keys: Vec<String> = raw.keys("*").await.unwrap();
    keys.sort();
    let mut dumped = Vec::new();
    for key in keys {
        let value: Vec<u8> = redis::cmd("DUMP").arg(&key).query_async(raw).await.unwrap();
        let pttl: i64 = raw.pttl(&key).await.unwrap();
        dumped.push((key, value, pttl));
    }
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(raw)
        .await
        .unwrap();
    let dirty = info
        .lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rdb_changes_since_last_save in INFO");
    (dumped, dirty)
}

/// Holds of every kind with fixed leases (no renewal writes meanwhile), a Java-style fair
/// waiter written by hand, an expired permit and revocation requests.
async fn busy(
    client: &Client,
    raw: &mut redis::aio::MultiplexedConnection,
) -> Vec<Box<dyn std::any::Any>> {
    let lease = Duration::from_secs(60);
    let mut kept: Vec<Box<dyn std::any::Any>> = Vec::new();
    kept.push(Box::new(
        client
            .get_lock("plain")
            .lock_with_lease(lease)
            .await
            .unwrap(),
    ));
    kept.push(Box::new(
        client
            .get_fenced_lock("fenced")
            .lock_with_lease(lease)
            .await
            .unwrap(),
    ));
    kept.push(Box::new(
        client
            .get_fair_lock("fair")
            .lock_with_lease(lease)
            .await
            .unwrap(),
    ));
    let _: () = raw
        .rpush("redisson_lock_queue:{fair}", "java:1")
        .await
        .unwrap();
    let _: () = raw
        .zadd(
            "redisson_lock_timeout:{fair}",
            "java:1",
            4_000_000_000_000_i64,
        )
        .await
        .unwrap();
    let rw = client.get_read_write_lock("rw");
    kept.push(Box::new(
        rw.read_lock().lock_with_lease(lease).await.unwrap(),
    ));
    assert!(
        client
            .get_semaphore("sem")
            .try_set_permits(2)
            .await
            .unwrap()
    );
    let permits = client.get_permit_expirable_semaphore("permits");
    assert!(permits.try_set_permits(2).await.unwrap());
    kept.push(Box::new(permits.acquire_with_lease(lease).await.unwrap()));
    kept.push(Box::new(
        permits
            .acquire_with_lease(Duration::from_millis(50))
            .await
            .unwrap(),
    ));
    assert!(
        client
            .get_count_down_latch("latch")
            .try_set_count(2)
            .await
            .unwrap()
    );
    client.get_lock("plain").request_revocation().await.unwrap();
    permits.request_revocation().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_change_nothing() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let holder = support::builder(&server)
        .lock_starvation_threshold(None)
        .build()
        .await
        .unwrap();
    let _kept = busy(&holder, &mut raw).await;
    let inspector = client(&server).await;
    let before = state(&mut raw).await;

    let lock = inspector.get_lock("plain").snapshot().await.unwrap();
    assert!(lock.is_held() && lock.revocations.len() == 1);
    let fenced = inspector
        .get_fenced_lock("fenced")
        .snapshot()
        .await
        .unwrap();
    assert!(fenced.name_token_counter.is_some());
    let fair = inspector.get_fair_lock("fair").snapshot().await.unwrap();
    assert_eq!(fair.queue.len(), 1);
    let java = &fair.queue[0];
    assert_eq!(
        (java.alive_deadline, java.subscribers),
        (None, 0),
        "a Java waiter has no deadline"
    );
    let rw = inspector
        .get_read_write_lock("rw")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(rw.readers.len(), 1);
    let sem = inspector.get_semaphore("sem").snapshot().await.unwrap();
    assert_eq!(sem.available, Some(2));
    let permits = inspector
        .get_permit_expirable_semaphore("permits")
        .snapshot()
        .await
        .unwrap();
    assert_eq!((permits.permits.len(), permits.revocations.len()), (2, 2));
    assert!(permits.permits[0].expires.has_passed());
    let latch = inspector
        .get_count_down_latch("latch")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(latch.count, 2);
    for name in [
        "plain", "fenced", "fair", "rw", "sem", "permits", "latch", "nothing",
    ] {
        inspector.inspect(name).await.unwrap();
    }

    let after = state(&mut raw).await;
    assert_eq!(after.1, before.1, "no write at all");
    assert_eq!(after.0.len(), before.0.len());
    for ((key, value, ttl), (key2, value2, ttl2)) in before.0.iter().zip(&after.0) {
        assert_eq!((key, value), (key2, value2), "{key} unchanged");
        assert!(
            *ttl2 <= *ttl && (*ttl2 < 0) == (*ttl < 0),
            "{key}: TTL {ttl} then {ttl2}"
        );
    }
}

/// A server time (ms) far ahead.
const LATER: i64 = 4_000_000_000_000;

/// Every kind's layout written by hand, as a Java Redisson client would leave it.
async fn written_by_hand(raw: &mut redis::aio::MultiplexedConnection) {
    let owner = "6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5:1";
    let _: () = raw.hset("plain", owner, 2).await.unwrap();
    let _: () = raw.pexpire("plain", 60_000).await.unwrap();
    let _: () = raw.hset("fair", owner, 1).await.unwrap();
    let _: () = raw
        .rpush("redisson_lock_queue:{fair}", "java:2")
        .await
        .unwrap();
    let _: () = raw
        .zadd("redisson_lock_timeout:{fair}", "java:2", LATER)
        .await
        .unwrap();
    let _: () = raw
        .hset_multiple("rw", &[("mode", "read"), (owner, "1")])
        .await
        .unwrap();
    let _: () = raw
        .set_ex(format!("{{rw}}:{owner}:rwlock_timeout:1"), 1, 60)
        .await
        .unwrap();
    let _: () = raw.set("sem", 2).await.unwrap();
    let _: () = raw.set("permits", 1).await.unwrap();
    let _: () = raw.zadd("{permits}:timeout", "abc", LATER).await.unwrap();
    let _: () = raw.set("latch", 2).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_snapshot_is_one_evalsha() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    written_by_hand(&mut raw).await;
    let inspector = client(&server).await;
    server.reset_stats().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        server.calls("evalsha").await,
        0,
        "an idle client sends no script"
    );

    let lock = inspector.get_lock("plain").snapshot().await.unwrap();
    assert_eq!(
        (
            lock.holders[0].holds,
            lock.holders[0].client.map(|c| c.to_string())
        ),
        (2, Some("6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5".into()))
    );
    let fair = inspector.get_fair_lock("fair").snapshot().await.unwrap();
    assert_eq!((fair.queue.len(), fair.queue[0].client), (1, None));
    assert!(
        fair.queue[0]
            .turn_timeout
            .is_some_and(|t| t.ahead().is_some())
    );
    let rw = inspector
        .get_read_write_lock("rw")
        .snapshot()
        .await
        .unwrap();
    assert!(
        about(rw.readers[0].leases[0], Duration::from_secs(60)),
        "{rw:?}"
    );
    assert_eq!(
        inspector
            .get_semaphore("sem")
            .snapshot()
            .await
            .unwrap()
            .available,
        Some(2)
    );
    let permits = inspector
        .get_permit_expirable_semaphore("permits")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(
        (permits.available, permits.permits[0].id.as_str()),
        (Some(1), "abc")
    );
    assert_eq!(
        inspector
            .get_count_down_latch("latch")
            .snapshot()
            .await
            .unwrap()
            .count,
        2
    );
    let mut found = Vec::new();
    for name in ["plain", "fair", "rw", "sem", "permits", "latch", "nothing"] {
        found.push(inspector.inspect(name).await.unwrap());
    }
    assert!(
        matches!(
            &found[..],
            [
                Snapshot::Lock(_),
                Snapshot::Lock(_),
                Snapshot::ReadWriteLock(_),
                Snapshot::Count(_),
                Snapshot::PermitExpirableSemaphore(_),
                Snapshot::Count(_),
                Snapshot::Absent(_)
            ]
        ),
        "{found:?}"
    );
    assert_eq!(
        server.calls("evalsha").await,
        6 + 7,
        "one EVALSHA per snapshot"
    );
    assert_eq!(
        server.calls("time").await,
        6 + 7,
        "each read the clock once"
    );
    let loads: Vec<_> = server
        .commandstats()
        .await
        .into_iter()
        .filter(|(c, _)| c == "eval" || c.starts_with("script"))
        .collect();
    assert!(loads.is_empty(), "{loads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_another_type_are_wrong_type() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.rpush("listed", "x").await.unwrap();
    let _: () = raw.set("counted", "5").await.unwrap();
    let _: () = raw.set("words", "five").await.unwrap();
    let _: () = raw.set("redisson_lock_queue:{queued}", "x").await.unwrap();
    let wrong = |e: Error, key: &str| matches!(e, Error::WrongType { key: k } if k == key);
    assert!(wrong(client.inspect("listed").await.unwrap_err(), "listed"));
    assert!(wrong(
        client.get_lock("counted").snapshot().await.unwrap_err(),
        "counted"
    ));
    assert!(wrong(
        client
            .get_read_write_lock("listed")
            .snapshot()
            .await
            .unwrap_err(),
        "listed"
    ));
    assert!(wrong(
        client.get_semaphore("words").snapshot().await.unwrap_err(),
        "words"
    ));
    assert!(wrong(
        client.get_lock("queued").snapshot().await.unwrap_err(),
        "redisson_lock_queue:{queued}"
    ));

    let plain = client.get_lock("plain").lock().await.unwrap();
    let read = client
        .get_read_write_lock("rw")
        .read_lock()
        .lock()
        .await
        .unwrap();
    assert!(wrong(
        client
            .get_read_write_lock("plain")
            .snapshot()
            .await
            .unwrap_err(),
        "plain"
    ));
    assert!(wrong(
        client.get_lock("rw").snapshot().await.unwrap_err(),
        "rw"
    ));
    assert!(matches!(
        client
            .get_read_write_lock("rw")
            .read_lock()
            .snapshot()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.inspect("a{b").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.get_lock("").snapshot().await,
        Err(Error::InvalidArgument(_))
    ));
    plain.unlock().await.unwrap();
    read.unlock().await.unwrap();
}

#[cfg(feature = "serde")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_serialize_to_json_with_milliseconds() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let guard = client
        .get_lock("orders")
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let json = serde_json::to_value(client.inspect("orders").await.unwrap()).unwrap();
    assert_eq!(json["object"], "lock");
    assert_eq!(json["kind"], "plain");
    assert_eq!(json["holders"][0]["client"], client.id().to_string());
    assert_eq!(json["holders"][0]["holds"], 1);
    let lease = json["lease_ms"].as_u64().expect("lease_ms");
    assert!(lease > 18_000 && lease <= 20_000, "{json}");
    guard.unlock().await.unwrap();
}

/// A user with the README's ACL rule (its `ACL SETUSER app-locks ...` lines, as written there).
async fn readme_user(server: &RedisServer) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let mut admin = server.raw().await;
    let mut lines = 0;
    for rule in readme
        .lines()
        .filter_map(|l| l.strip_prefix("ACL SETUSER app-locks "))
    {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("app-locks");
        for token in rule.split_whitespace() {
            cmd.arg(token);
        }
        let () = cmd.query_async(&mut admin).await.expect("ACL SETUSER");
        lines += 1;
    }
    assert!(lines >= 5, "the README's rule has {lines} lines");
    format!("redis://app-locks:change-me@127.0.0.1:{}/", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_snapshot_runs_under_the_readme_acl_rule() {
    let server = RedisServer::start();
    let url = readme_user(&server).await;
    let client = support::builder_for(&url).build().await.unwrap();
    let lock = client
        .get_fair_lock("app:{user:1}:queue")
        .lock()
        .await
        .unwrap();
    let rw = client.get_read_write_lock("app:catalog");
    let read = rw.read_lock().lock().await.unwrap();
    let permits = client.get_permit_expirable_semaphore("app:render");
    assert!(permits.try_set_permits(2).await.unwrap());
    let permit = permits.acquire().await.unwrap();
    assert_eq!(permits.request_revocation().await.unwrap(), 1);
    assert!(
        client
            .get_count_down_latch("app:ready")
            .try_set_count(2)
            .await
            .unwrap()
    );

    let fair = client
        .get_fair_lock("app:{user:1}:queue")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(fair.holders[0].client, Some(client.id()));
    let reading = rw.snapshot().await.unwrap();
    assert!(reading.readers[0].leases[0].is_some(), "{reading:?}");
    let out = permits.snapshot().await.unwrap();
    assert_eq!((out.permits.len(), out.revocations.len()), (1, 1));
    assert_eq!(
        client
            .get_semaphore("app:render")
            .snapshot()
            .await
            .unwrap()
            .available,
        Some(1)
    );
    assert_eq!(
        client
            .get_count_down_latch("app:ready")
            .snapshot()
            .await
            .unwrap()
            .count,
        2
    );
    for name in [
        "app:{user:1}:queue",
        "app:catalog",
        "app:render",
        "app:ready",
        "app:none",
    ] {
        client.inspect(name).await.unwrap();
    }
    let mut admin = server.raw().await;
    let refusals: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(refusals.is_empty(), "refused: {refusals:?}");
    lock.unlock().await.unwrap();
    read.unlock().await.unwrap();
    permit.release().await.unwrap();
}
