//! Listing by pattern (`Client::inspect_matching`): every kind found from its keys, objects
//! whose only keys are auxiliary ones (a fair queue, a fenced lock's name counter, read holds'
//! timeouts) named back to their object, identities and foreign keys left out, a pattern that
//! narrows it, names with their own hash tag; on one server, on a Cluster (every master
//! scanned) and through the blocking client.

mod support;

use std::time::Duration;

use ferrisson::Client;
use ferrisson::inspect::{LockKind, RwMode, Snapshot};
use redis::AsyncCommands;
use support::RedisServer;
use support::cluster::RedisCluster;

fn names(found: &[Snapshot]) -> Vec<&str> {
    found.iter().map(Snapshot::name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_on_one_server_named_back_from_its_keys() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let other = support::client(&server).await;

    let plain = client.get_lock("jobs:plain").lock().await.unwrap();
    let fenced = other.get_fenced_lock("jobs:fenced");
    fenced.lock().await.unwrap().unlock().await.unwrap();
    let reading = client
        .get_read_write_lock("jobs:catalog")
        .read_lock()
        .lock()
        .await
        .unwrap();
    let tagged = other.get_lock("{user:7}:cart").lock().await.unwrap();
    let permits = client.get_permit_expirable_semaphore("jobs:render");
    assert!(permits.try_set_permits(2).await.unwrap());
    let permit = permits.acquire().await.unwrap();
    let semaphore = client.get_semaphore("jobs:builds");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let latch = client.get_count_down_latch("jobs:ready");
    assert!(latch.try_set_count(2).await.unwrap());

    let mut raw = server.raw().await;
    // A fair queue with nobody holding the lock (a waiter between two calls): only derived keys.
    let _: () = raw
        .rpush(
            "redisson_lock_queue:{jobs:queued}",
            "0c4a6f52-2f43-4d4b-9d3a-2f0e8c1b7a11:1",
        )
        .await
        .unwrap();
    // Keys of no object: a list, a hash of words, a string of words.
    let _: () = raw.rpush("jobs:a-list", "x").await.unwrap();
    let _: () = raw.hset("jobs:profile", "name", "ada").await.unwrap();
    let _: () = raw.set("jobs:greeting", "hello").await.unwrap();

    let everything = client.inspect_matching("*").await.unwrap();
    assert_eq!(
        names(&everything),
        [
            "jobs:builds",
            "jobs:catalog",
            "jobs:fenced",
            "jobs:plain",
            "jobs:queued",
            "jobs:ready",
            "jobs:render",
            "{user:7}:cart",
        ],
        "{everything:#?}"
    );
    let by_name = |name: &str| everything.iter().find(|s| s.name() == name).unwrap();
    assert!(
        matches!(by_name("jobs:plain"), Snapshot::Lock(l) if l.holders[0].client == Some(client.id()))
    );
    assert!(
        matches!(by_name("jobs:fenced"), Snapshot::Lock(l) if l.kind == LockKind::Fenced && !l.is_held())
    );
    assert!(
        matches!(by_name("jobs:queued"), Snapshot::Lock(l) if l.kind == LockKind::Fair && l.queue.len() == 1)
    );
    assert!(
        matches!(by_name("jobs:catalog"), Snapshot::ReadWriteLock(rw) if rw.mode == Some(RwMode::Read))
    );
    assert!(
        matches!(by_name("{user:7}:cart"), Snapshot::Lock(l) if l.holders[0].client == Some(other.id()))
    );
    assert!(
        matches!(by_name("jobs:render"), Snapshot::PermitExpirableSemaphore(p) if p.permits.len() == 1)
    );
    // Nobody listens: a semaphore and a latch both look like a count.
    assert!(matches!(by_name("jobs:builds"), Snapshot::Count(c) if c.count == 3));
    assert!(matches!(by_name("jobs:ready"), Snapshot::Count(c) if c.count == 2));

    // A pattern narrows it, matched against names (a derived key's prefix does not count).
    let narrowed = client.inspect_matching("jobs:[cp]*").await.unwrap();
    assert_eq!(names(&narrowed), ["jobs:catalog", "jobs:plain"]);
    let tagged_only = client.inspect_matching("{user:*").await.unwrap();
    assert_eq!(names(&tagged_only), ["{user:7}:cart"]);
    assert!(
        client
            .inspect_matching("redisson_*")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        client
            .inspect_matching("ferrisson_client:*")
            .await
            .unwrap()
            .is_empty(),
        "identities are no objects"
    );

    // A read hold whose lock hash is gone leaves its timeout key: named back to the lock (which
    // is absent, so left out), never listed as an object of its own (a count, by its value).
    let _: () = raw.del("jobs:catalog").await.unwrap();
    let left: Vec<String> = raw.keys("{jobs:catalog}:*rwlock_timeout*").await.unwrap();
    assert_eq!(left.len(), 1, "the read hold's timeout key stays: {left:?}");
    let after = client.inspect_matching("*catalog*").await.unwrap();
    assert!(
        after.is_empty(),
        "a free read-write lock is absent: {after:?}"
    );

    // A lock whose name is shaped as a derived key (`{t}:timeout`, a permit semaphore's
    // permits) is listed as the lock it is; a permit semaphore's own permits key is not.
    let shaped = other.get_lock("{tenant:1}:timeout").lock().await.unwrap();
    let tenants = client.inspect_matching("*tenant*").await.unwrap();
    assert_eq!(names(&tenants), ["{tenant:1}:timeout"], "{tenants:#?}");
    assert!(matches!(&tenants[0], Snapshot::Lock(l) if l.holders[0].client == Some(other.id())));
    let render = client.inspect_matching("*render*").await.unwrap();
    assert_eq!(names(&render), ["jobs:render"], "{render:#?}");
    shaped.unlock().await.unwrap();

    // The blocking twin lists the same.
    let url = server.url();
    let blocking = tokio::task::spawn_blocking(move || {
        let client = ferrisson::blocking::Client::connect(&url).unwrap();
        let listed: Vec<String> = client
            .inspect_matching("jobs:p*")
            .unwrap()
            .iter()
            .map(|s| s.name().to_owned())
            .collect();
        let inspected = client.inspect("jobs:plain").unwrap();
        client.close().unwrap();
        (listed, inspected.name().to_owned())
    })
    .await
    .unwrap();
    assert_eq!(
        blocking,
        (vec!["jobs:plain".to_owned()], "jobs:plain".into())
    );

    drop(reading);
    for guard in [plain, tagged] {
        guard.unlock().await.unwrap();
    }
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_scanned_on_every_master() {
    let cluster = RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    // Names spread over the slots, so over the three masters.
    let wanted: Vec<String> = (0..24).map(|n| format!("spread:{n}")).collect();
    let mut guards = Vec::new();
    for name in &wanted {
        guards.push(client.get_lock(name).lock().await.unwrap());
    }
    let rw = client.get_read_write_lock("spread:rw");
    let writing = rw.write_lock().lock().await.unwrap();
    let mut masters_used = Vec::new();
    for name in &wanted {
        let port = cluster.master_for_key(name).await;
        if !masters_used.contains(&port) {
            masters_used.push(port);
        }
    }
    assert_eq!(masters_used.len(), 3, "the names reach every master");

    let found = client.inspect_matching("spread:*").await.unwrap();
    let mut expected = wanted.clone();
    expected.push("spread:rw".into());
    expected.sort();
    assert_eq!(names(&found), expected);
    assert!(found.iter().all(|s| match s {
        Snapshot::Lock(l) => l.holders[0].client == Some(client.id()),
        Snapshot::ReadWriteLock(rw) => rw.mode == Some(RwMode::Write),
        _ => false,
    }));
    assert_eq!(
        names(&client.inspect_matching("spread:1?").await.unwrap()),
        (10..20).map(|n| format!("spread:{n}")).collect::<Vec<_>>()
    );
    writing.unlock().await.unwrap();
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    assert!(client.inspect_matching("*").await.unwrap().is_empty());
}
