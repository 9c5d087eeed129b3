//! Inspection in the shapes real code takes: snapshots from `join_all` and `buffer_unordered`
//! beside the holds they read, a guard handed to a spawned task, a snapshot dropped by
//! `select!` (cancel safe: the client goes on), the blocking API on a thread pool, and a
//! paused Tokio clock, where every reader says `PausedClock` rather than "timed out".

mod support;

use std::time::Duration;

use ferrisson::Error;
use ferrisson::inspect::Snapshot;
use futures::StreamExt;
use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_beside_holds_in_join_all_buffer_unordered_spawn_and_select() {
    let server = RedisServer::start();
    let client = support::client(&server).await;

    // join_all: eight acquisitions of eight locks, each then read back by a snapshot that
    // names this client once, with one hold.
    let locks: Vec<_> = (0..8)
        .map(|i| client.get_lock(&format!("shape:{i}")))
        .collect();
    let guards = futures::future::try_join_all(locks.iter().map(|l| l.lock()))
        .await
        .unwrap();
    let snapshots = futures::future::try_join_all(locks.iter().map(|l| l.snapshot()))
        .await
        .unwrap();
    for snapshot in &snapshots {
        assert_eq!(snapshot.holders.len(), 1, "{snapshot:?}");
        assert_eq!(snapshot.holders[0].client, Some(client.id()));
        assert_eq!(snapshot.holders[0].holds, 1);
    }
    // Two acquisitions are two owners: their owner fields differ.
    let mut owners: Vec<_> = snapshots
        .iter()
        .map(|s| s.holders[0].owner.clone())
        .collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners.len(), 8);

    // buffer_unordered over inspect(name) while the holds are handed to a spawned task.
    let task = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for guard in guards {
            guard.unlock().await.unwrap();
        }
    });
    let held = futures::stream::iter(0..8)
        .map(|i| {
            let client = &client;
            async move { client.inspect(&format!("shape:{i}")).await.unwrap() }
        })
        .buffer_unordered(4)
        .filter(|s| futures::future::ready(matches!(s, Snapshot::Lock(l) if l.is_held())))
        .count()
        .await;
    assert_eq!(held, 8, "every hold is seen while the task still has it");
    task.await.unwrap();
    let listed = client.inspect_matching("shape:*").await.unwrap();
    assert!(listed.is_empty(), "released, so absent: {listed:?}");

    // select!: a snapshot dropped half way leaves the client as it was.
    for _ in 0..20 {
        tokio::select! {
            biased;
            _ = tokio::task::yield_now() => {}
            _ = locks[0].snapshot() => {}
        }
    }
    let guard = locks[0].lock().await.unwrap();
    assert!(locks[0].snapshot().await.unwrap().is_held());
    guard.unlock().await.unwrap();

    // The blocking API on a pool of threads, each with a lock of its own.
    let url = server.url();
    let blocking = tokio::task::spawn_blocking(move || {
        let client = ferrisson::blocking::Client::connect(&url).unwrap();
        let seen: Vec<usize> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|i| {
                    let client = &client;
                    scope.spawn(move || {
                        let lock = client.get_lock(&format!("pool:{i}"));
                        let guard = lock.lock().unwrap();
                        let holders = lock.snapshot().unwrap().holders.len();
                        guard.unlock().unwrap();
                        holders
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        client.close().unwrap();
        seen
    })
    .await
    .unwrap();
    assert_eq!(blocking, [1, 1, 1, 1]);
}

/// On a paused clock every reader says so: a snapshot, `inspect`, a listing (SCAN on each
/// master) and the identities.
#[tokio::test(flavor = "current_thread")]
async fn on_a_paused_clock_every_reader_says_paused_clock() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let lock = client.get_lock("paused");
    tokio::time::pause();
    let is_paused = |r: Result<(), Error>| matches!(r, Err(Error::PausedClock));
    assert!(is_paused(lock.snapshot().await.map(drop)));
    assert!(is_paused(client.inspect("paused").await.map(drop)));
    assert!(is_paused(client.inspect_matching("*").await.map(drop)));
    assert!(is_paused(client.clients().await.map(drop)));
    assert!(is_paused(client.identity_of(client.id()).await.map(drop)));
    tokio::time::resume();
    assert!(!lock.snapshot().await.unwrap().is_held());
}
