//! The blocking objects' `snapshot()` reads what their async twins read, and a client's
//! identity serializes for JSON output.

mod support;

use std::time::Duration;

use ferrisson::blocking::Client;
use ferrisson::inspect::RwMode;
use support::RedisServer;

fn client(server: &RedisServer) -> Client {
    Client::builder()
        .url(server.url())
        .app_name("blocking-inspector")
        .build()
        .expect("a blocking client connects")
}

#[test]
fn every_blocking_object_reads_its_snapshot() {
    let server = RedisServer::start();
    let client = client(&server);

    let lock = client.get_lock("b:lock");
    assert!(lock.snapshot().unwrap().holders.is_empty());
    let guard = lock.lock().unwrap();
    let held = lock.snapshot().unwrap();
    assert_eq!(held.holders.len(), 1);
    assert_eq!(held.holders[0].client, Some(client.id()));
    assert!(held.lease.is_some_and(|left| left > Duration::ZERO));
    guard.unlock().unwrap();

    let fair = client.get_fair_lock("b:fair");
    let guard = fair.lock().unwrap();
    let snapshot = fair.snapshot().unwrap();
    assert_eq!(snapshot.kind, ferrisson::inspect::LockKind::Fair);
    assert_eq!(snapshot.holders.len(), 1);
    guard.unlock().unwrap();

    let mutex = client.get_mutex("b:mutex");
    let guard = mutex.lock().unwrap();
    assert_eq!(mutex.snapshot().unwrap().holders.len(), 1);
    guard.unlock().unwrap();

    let rw = client.get_read_write_lock("b:rw");
    let read = rw.read_lock().lock().unwrap();
    let snapshot = rw.snapshot().unwrap();
    assert_eq!(snapshot.mode, Some(RwMode::Read));
    assert_eq!(snapshot.readers.len(), 1);
    assert_eq!(snapshot.readers[0].client, Some(client.id()));
    read.unlock().unwrap();
    assert_eq!(rw.snapshot().unwrap().mode, None);

    let semaphore = client.get_semaphore("b:sem");
    assert!(semaphore.try_set_permits(3).unwrap());
    assert_eq!(semaphore.snapshot().unwrap().available, Some(3));

    let permits = client.get_permit_expirable_semaphore("b:permits");
    assert!(permits.try_set_permits(2).unwrap());
    let permit = permits.acquire().unwrap();
    let snapshot = permits.snapshot().unwrap();
    assert_eq!(snapshot.available, Some(1));
    assert_eq!(snapshot.permits.len(), 1);
    assert_eq!(snapshot.permits[0].id, permit.ids()[0]);
    permit.release().unwrap();

    let latch = client.get_count_down_latch("b:latch");
    assert!(latch.try_set_count(2).unwrap());
    latch.count_down().unwrap();
    assert_eq!(latch.snapshot().unwrap().count, 1);

    // A side of a read-write lock is refused, as in the async API, and nothing panics.
    assert!(matches!(
        rw.write_lock().snapshot(),
        Err(ferrisson::Error::InvalidArgument(_))
    ));
}

#[cfg(feature = "serde")]
#[test]
fn a_client_identity_serializes_with_its_age_in_milliseconds() {
    let server = RedisServer::start();
    let client = client(&server);
    let me = client
        .identity_of(client.id())
        .unwrap()
        .expect("the client's own identity is recorded");
    let json = serde_json::to_value(&me).unwrap();
    assert_eq!(json["id"], client.id().to_string());
    assert_eq!(json["app"], "blocking-inspector");
    assert_eq!(json["pid"], std::process::id());
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert!(json["age_ms"].is_u64(), "{json}");
    assert!(json.get("age").is_none(), "{json}");
    assert!(json["started_ms"].as_u64().unwrap() > 1_600_000_000_000);
}
