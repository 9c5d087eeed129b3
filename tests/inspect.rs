//! Inspection on one server: each kind's snapshot, free and held, with holders of two clients,
//! waiters (subscribers, a fair queue in order with its deadlines), revocation requests, a
//! permit's expiry and a latch's count; `Client::inspect` finds each kind. What a snapshot
//! costs and leaves is in `inspect_reads.rs`, the cluster in `inspect_cluster.rs`.

mod support;

use std::time::Duration;

use ferrisson::RwPolicy;
use ferrisson::inspect::{LockKind, RwMode, Snapshot};
use support::{Listener, RedisServer, client, eventually};

fn about(left: Option<Duration>, expected: Duration) -> bool {
    left.is_some_and(|d| d <= expected && d + Duration::from_secs(2) > expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_free_then_held_by_two_clients_in_turn_with_waiters_counted() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.get_lock("orders");

    let free = lock.snapshot().await.unwrap();
    assert!(!free.is_held());
    assert_eq!(
        (free.lease, free.subscribers, free.kind),
        (None, 0, LockKind::Plain)
    );
    assert!(free.queue.is_empty() && free.revocations.is_empty());

    let outer = lock.lock().await.unwrap();
    let inner = outer.reenter().await.unwrap();
    let held = b.get_lock("orders").snapshot().await.unwrap();
    assert_eq!(held.holders.len(), 1, "{held:?}");
    let holder = &held.holders[0];
    assert_eq!(holder.client, Some(a.id()));
    assert!(holder.owner.starts_with(&format!("{}:", a.id())));
    assert_eq!(holder.holds, 2);
    assert!(
        about(held.lease, Duration::from_secs(30)),
        "{:?}",
        held.lease
    );
    let token = outer.fencing_token();
    assert!(held.token_counter.is_some_and(|c| c >= token), "{held:?}");
    assert_eq!(held.name_token_counter, None);

    // A waiter of client b, and a Java-style subscriber: two connections, one of them ferrisson's.
    let waiting = b.get_lock("orders");
    let waiter = tokio::spawn(async move { waiting.lock().await.unwrap() });
    server
        .wait_subscribers("redisson_lock__channel:{orders}:ferrisson", 1)
        .await;
    let _java = Listener::on(&server, "redisson_lock__channel:{orders}").await;
    let waited = lock.snapshot().await.unwrap();
    assert_eq!((waited.subscribers, waited.ferrisson_subscribers), (2, 1));
    // Past the starvation threshold (50 ms by default) b's waiter says it starves.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !lock.snapshot().await.unwrap().starving.is_empty()
        })
        .await,
        "b's waiter starves"
    );
    let starving = lock.snapshot().await.unwrap().starving;
    assert_eq!(starving.len(), 1);
    assert_eq!(starving[0].client, Some(b.id()));
    assert!(
        starving[0].starving_for < Duration::from_secs(5),
        "{starving:?}"
    );

    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let b_holds = waiter.await.unwrap();
    let turned = lock.snapshot().await.unwrap();
    assert_eq!(turned.holders.len(), 1);
    assert_eq!(turned.holders[0].client, Some(b.id()), "{turned:?}");
    assert_eq!(turned.holders[0].holds, 1);
    b_holds.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_shows_its_name_counter_and_a_mutex_its_holder() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let fenced = client.get_fenced_lock("ledger");
    let (token, guard) = fenced.lock_and_get_token().await.unwrap();
    let snapshot = fenced.snapshot().await.unwrap();
    assert_eq!(snapshot.kind, LockKind::Fenced);
    assert_eq!(snapshot.name_token_counter, Some(token));
    assert!(snapshot.token_counter.is_some_and(|c| c >= token));
    guard.unlock().await.unwrap();
    // The name counter stays: that is how `inspect` tells a fenced lock.
    let Snapshot::Lock(found) = client.inspect("ledger").await.unwrap() else {
        panic!("a lock")
    };
    assert_eq!((found.kind, found.is_held()), (LockKind::Fenced, false));

    let mutex = client.get_mutex("migration");
    let held = mutex.lock().await.unwrap();
    let snapshot = mutex.snapshot().await.unwrap();
    assert_eq!(
        (snapshot.kind, snapshot.holders.len()),
        (LockKind::Plain, 1)
    );
    held.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_queue_in_order_with_turns_and_deadlines() {
    let server = RedisServer::start();
    let builder = || support::builder(&server).fair_lock_queue_timeout(Duration::from_secs(3));
    let holder = builder().build().await.unwrap();
    let (b, c) = (
        builder().build().await.unwrap(),
        builder().build().await.unwrap(),
    );
    let held = holder.get_fair_lock("tickets").lock().await.unwrap();
    let lock = holder.get_fair_lock("tickets");
    let queued = |n: usize| {
        let lock = lock.clone();
        async move { lock.snapshot().await.unwrap().queue.len() == n }
    };
    let mut waiters = Vec::new();
    for (waiting, n) in [(&b, 1), (&c, 2)] {
        let fair = waiting.get_fair_lock("tickets");
        waiters.push(tokio::spawn(async move { fair.lock().await.unwrap() }));
        assert!(eventually(Duration::from_secs(5), || queued(n)).await);
    }
    let snapshot = lock.snapshot().await.unwrap();
    assert_eq!(snapshot.kind, LockKind::Fair);
    let clients: Vec<_> = snapshot.queue.iter().map(|w| w.client).collect();
    assert_eq!(clients, [Some(b.id()), Some(c.id())], "arrival order");
    let turns: Vec<i64> = snapshot
        .queue
        .iter()
        .map(|w| w.turn_timeout.expect("a turn").as_millis())
        .collect();
    assert!(turns[0] > 0 && turns[1] > turns[0], "turns {turns:?}");
    for waiter in &snapshot.queue {
        let alive = waiter
            .alive_deadline
            .expect("a ferrisson waiter's deadline");
        assert!(
            alive.ahead().is_some_and(|d| d <= Duration::from_secs(3)),
            "{alive}"
        );
    }
    // Each listens on its own channel (it subscribes just after it joins the queue).
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.snapshot()
                .await
                .unwrap()
                .queue
                .iter()
                .all(|w| w.subscribers == 1)
        })
        .await,
        "each fair waiter listens on its own channel"
    );
    let Snapshot::Lock(found) = holder.inspect("tickets").await.unwrap() else {
        panic!("a lock")
    };
    assert_eq!((found.kind, found.queue.len()), (LockKind::Fair, 2));

    held.unlock().await.unwrap();
    let first = waiters.remove(0).await.unwrap();
    let next = lock.snapshot().await.unwrap();
    assert_eq!(next.holders[0].client, Some(b.id()));
    assert_eq!(next.queue.len(), 1);
    assert_eq!(next.queue[0].client, Some(c.id()));
    first.unlock().await.unwrap();
    waiters.remove(0).await.unwrap().unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_revocation_names_the_hold_and_its_age() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let guard = a.get_lock("job").lock().await.unwrap();
    let lock = b.get_lock("job");
    assert!(lock.snapshot().await.unwrap().revocations.is_empty());
    assert_eq!(lock.request_revocation().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let snapshot = lock.snapshot().await.unwrap();
    assert_eq!(snapshot.revocations.len(), 1, "{snapshot:?}");
    let request = &snapshot.revocations[0];
    assert_eq!(request.hold, snapshot.holders[0].owner);
    let ago = request.requested_ago;
    assert!(
        ago >= Duration::from_millis(150) && ago < Duration::from_secs(2),
        "{ago:?}"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_readers_of_two_clients_then_a_nested_writer() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let rw = a.get_read_write_lock("catalog");
    let free = rw.snapshot().await.unwrap();
    assert_eq!(
        (free.mode, free.writer.clone(), free.readers.len()),
        (None, None, 0)
    );

    let read_a = rw.read_lock().lock().await.unwrap();
    let read_a2 = read_a.reenter().await.unwrap();
    let read_b = b
        .get_read_write_lock("catalog")
        .read_lock()
        .lock_with_lease(Duration::from_secs(9))
        .await
        .unwrap();
    let reading = rw.snapshot().await.unwrap();
    assert_eq!(reading.mode, Some(RwMode::Read));
    assert_eq!(reading.writer, None);
    let mut readers = reading.readers.clone();
    readers.sort_by_key(|r| r.client != Some(a.id()));
    assert_eq!(readers.len(), 2, "{reading:?}");
    assert_eq!((readers[0].client, readers[0].holds), (Some(a.id()), 2));
    assert_eq!((readers[1].client, readers[1].holds), (Some(b.id()), 1));
    assert_eq!(readers[0].leases.len(), 2);
    assert!(
        readers[0]
            .leases
            .iter()
            .all(|l| about(*l, Duration::from_secs(30)))
    );
    assert!(
        about(readers[1].leases[0], Duration::from_secs(9)),
        "{:?}",
        readers[1].leases
    );

    // A writer of client b waits under writer preference: its mark shows, and b listens.
    let prefer = b.get_read_write_lock_with("catalog", RwPolicy::PreferWriters);
    let writer = tokio::spawn(async move { prefer.write_lock().lock().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || async {
            let now = rw.snapshot().await.unwrap();
            now.waiting_writers.len() == 1 && now.subscribers == 1
        })
        .await,
        "a mark, and b listening"
    );
    let waited = rw.snapshot().await.unwrap();
    assert_eq!(waited.waiting_writers[0].client, Some(b.id()));
    assert!(waited.waiting_writers[0].expires.ahead().is_some());
    for guard in [read_a2, read_a, read_b] {
        guard.unlock().await.unwrap();
    }
    writer.await.unwrap().unlock().await.unwrap();

    let write = rw.write_lock().lock().await.unwrap();
    let nested = write.reenter().await.unwrap();
    assert_eq!(rw.write_lock().request_revocation().await.unwrap(), 1);
    let writing = rw.snapshot().await.unwrap();
    assert_eq!(writing.mode, Some(RwMode::Write));
    let writer = writing.writer.clone().expect("a writer");
    assert_eq!((writer.client, writer.holds), (Some(a.id()), 2));
    assert!(writing.readers.is_empty());
    assert_eq!(writing.revocations.len(), 1);
    assert_eq!(
        writing.revocations[0].hold,
        format!("{}:write", writer.owner)
    );
    assert!(
        matches!(a.inspect("catalog").await.unwrap(), Snapshot::ReadWriteLock(s) if s.writer == writing.writer)
    );
    nested.unlock().await.unwrap();
    write.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_a_latch_show_counts_permits_and_waiters() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_semaphore("api");
    assert_eq!(semaphore.snapshot().await.unwrap().available, None);
    assert!(semaphore.try_set_permits(3).await.unwrap());
    semaphore.acquire(1).await.unwrap();
    let snapshot = semaphore.snapshot().await.unwrap();
    assert_eq!((snapshot.available, snapshot.subscribers), (Some(2), 0));
    assert!(matches!(client.inspect("api").await.unwrap(), Snapshot::Count(c) if c.count == 2));
    let waiting = semaphore.clone();
    let waiter = tokio::spawn(async move { waiting.acquire(5).await.unwrap() });
    server.wait_subscribers("redisson_sc:{api}", 1).await;
    assert_eq!(semaphore.snapshot().await.unwrap().subscribers, 1);
    assert!(
        matches!(client.inspect("api").await.unwrap(), Snapshot::Semaphore(s) if s.available == Some(2))
    );
    semaphore.release(3).await.unwrap();
    waiter.await.unwrap();

    let slots = client.get_permit_expirable_semaphore("render");
    assert!(slots.try_set_permits(3).await.unwrap());
    let long = slots
        .acquire_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    let short = slots
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(slots.request_revocation().await.unwrap(), 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let snapshot = slots.snapshot().await.unwrap();
    assert_eq!(
        snapshot.available,
        Some(1),
        "the expired permit is not given back by a snapshot"
    );
    assert_eq!(snapshot.permits.len(), 2, "{snapshot:?}");
    assert_eq!(
        snapshot.permits[0].id,
        short.ids()[0],
        "soonest to expire first"
    );
    assert!(
        snapshot.permits[0]
            .expires
            .behind()
            .is_some_and(|d| d >= Duration::from_millis(150))
    );
    assert_eq!(snapshot.permits[1].id, long.ids()[0]);
    assert!(
        snapshot.permits[1]
            .expires
            .ahead()
            .is_some_and(|d| d > Duration::from_secs(8))
    );
    let mut asked: Vec<_> = snapshot
        .revocations
        .iter()
        .map(|r| r.hold.clone())
        .collect();
    asked.sort();
    let mut ids = vec![short.ids()[0].clone(), long.ids()[0].clone()];
    ids.sort();
    assert_eq!(asked, ids);
    assert!(
        matches!(client.inspect("render").await.unwrap(), Snapshot::PermitExpirableSemaphore(s) if s.permits.len() == 2)
    );
    assert_eq!(
        slots.available_permits().await.unwrap(),
        2,
        "expired: back now"
    );
    long.release().await.unwrap();
    drop(short);

    let latch = client.get_count_down_latch("ready");
    assert_eq!(latch.snapshot().await.unwrap().count, 0);
    assert!(latch.try_set_count(3).await.unwrap());
    latch.count_down().await.unwrap();
    let waiting = latch.clone();
    let waiter = tokio::spawn(async move { waiting.await_zero().await.unwrap() });
    server
        .wait_subscribers("redisson_countdownlatch__channel__{ready}", 1)
        .await;
    let snapshot = latch.snapshot().await.unwrap();
    assert_eq!((snapshot.count, snapshot.subscribers), (2, 1));
    assert!(
        matches!(client.inspect("ready").await.unwrap(), Snapshot::CountDownLatch(l) if l.count == 2)
    );
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    waiter.await.unwrap();
    // The waiter's connection leaves the channel after `await_zero` returns, not before.
    let left = support::eventually(Duration::from_secs(5), || async {
        matches!(client.inspect("ready").await.unwrap(), Snapshot::Absent(a) if a.latch_subscribers == 0)
    });
    assert!(left.await, "{:?}", client.inspect("ready").await);
}
