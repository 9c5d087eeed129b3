//! Every public future can be handed to `tokio::spawn`: each is `Send`, and `'static` once its
//! handle is moved in. Built with tokio's `test-util` and the default recursion limit, as a
//! user's crate would be; each spawned task also runs against a real server, so the futures are
//! driven to the end, not only type-checked.
//!
//! Proving a future `Send` walks its whole type, down to redis-rs' socket; a walk deeper than the
//! recursion limit fails with E0275. The compiler remembers what it proved before in the same
//! crate, so an earlier, shallower proof (the full harness in `support/` spawns lock futures)
//! would hide a deep walk: this file takes only the server harness, and checks the combinators,
//! the deepest futures, before the single locks they are made of.

#[path = "support/server.rs"]
mod server;

use std::future::Future;
use std::time::Duration;

use ferrisson::{Client, MultiLock, RedLock};
use server::RedisServer;

/// A client of `server` with timeouts sized for tests.
async fn client(server: &RedisServer) -> Client {
    builder(server)
        .build()
        .await
        .expect("client connects to the test server")
}

fn builder(server: &RedisServer) -> ferrisson::ClientBuilder {
    Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
}

/// Polls `check` every 10 ms until it is true or `within` has passed.
async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Runs `fut` as its own task and waits for it: compiles only for a `Send + 'static` future.
async fn spawned<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    tokio::spawn(fut)
        .await
        .expect("the spawned task ran to its end")
}

const LEASE: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_millis(200);
/// A fixed lease nobody renews, for guards whose `lost()` must resolve soon.
const SHORT: Duration = Duration::from_millis(300);
/// Far beyond `SHORT`: a `lost()` that has not resolved by then never will.
const NOTICE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_and_guard_methods_spawn() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(client(server).await);
    }
    let redlock = RedLock::new(clients.iter().map(|c| c.get_lock("spawn:red")))
        .instance_timeout(Duration::from_millis(500));

    let r = redlock.clone();
    let guard = spawned(async move { r.lock().await }).await.unwrap();
    spawned(async move { guard.unlock().await }).await.unwrap();
    let r = redlock.clone();
    let guard = spawned(async move { r.lock_with_lease(LEASE).await })
        .await
        .unwrap();
    spawned(async move { guard.unlock().await }).await.unwrap();
    let r = redlock.clone();
    let guard = spawned(async move { r.try_lock().await }).await.unwrap();
    spawned(async move { guard.unwrap().unlock().await })
        .await
        .unwrap();
    let r = redlock.clone();
    let guard = spawned(async move { r.try_lock_for(WAIT, Some(SHORT)).await })
        .await
        .unwrap()
        .unwrap();

    let waiting = spawned(async move {
        guard.lost().await;
        guard
    });
    let guard = tokio::time::timeout(NOTICE, waiting)
        .await
        .expect("lost() resolves once the validity ran out");
    assert!(guard.is_lost());
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilock_and_guard_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("spawn:multi:rw");
    let multi = MultiLock::new([
        client.get_lock("spawn:multi:a"),
        client.get_fair_lock("spawn:multi:b"),
        rw.write_lock(),
    ]);

    let m = multi.clone();
    let guard = spawned(async move { m.lock().await }).await.unwrap();
    spawned(async move { guard.unlock().await }).await.unwrap();
    let m = multi.clone();
    let guard = spawned(async move { m.lock_with_lease(LEASE).await })
        .await
        .unwrap();
    spawned(async move { guard.unlock().await }).await.unwrap();
    let m = multi.clone();
    let guard = spawned(async move { m.try_lock().await }).await.unwrap();
    spawned(async move { guard.unwrap().unlock().await })
        .await
        .unwrap();
    let m = multi.clone();
    let guard = spawned(async move { m.try_lock_for(WAIT, Some(SHORT)).await })
        .await
        .unwrap()
        .unwrap();

    let waiting = spawned(async move {
        guard.lost().await;
        guard
    });
    let guard = tokio::time::timeout(NOTICE, waiting)
        .await
        .expect("lost() resolves once the parts' leases ran out");
    assert!(guard.is_lost());
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connect_build_and_close_spawn() {
    let server = RedisServer::start();
    let url = server.url();
    let client = spawned(async move { Client::connect(&url).await })
        .await
        .unwrap();
    let builder = builder(&server);
    let built = spawned(async move { builder.build().await }).await.unwrap();
    let leftovers = spawned(async move { client.close().await }).await;
    assert!(leftovers.is_empty(), "{leftovers:?}");
    spawned(async move { built.close().await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlock_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;
    // The plain, fair and both read-write sides: one handle type with a kind inside each.
    let rw = client.get_read_write_lock("spawn:rw");
    for lock in [
        client.get_lock("spawn:plain"),
        client.get_fair_lock("spawn:fair"),
        rw.read_lock(),
        rw.write_lock(),
    ] {
        let l = lock.clone();
        let guard = spawned(async move { l.lock().await }).await.unwrap();
        let l = lock.clone();
        assert!(spawned(async move { l.is_locked().await }).await.unwrap());
        // The guard's task owns the hold; a fresh task is outside its scope.
        let l = lock.clone();
        assert!(!spawned(async move { l.is_held().await }).await.unwrap());
        let l = lock.clone();
        assert_eq!(
            spawned(async move { l.hold_count().await }).await.unwrap(),
            0
        );
        let l = lock.clone();
        assert!(
            spawned(async move { l.remaining_ttl().await })
                .await
                .unwrap()
                .is_some()
        );
        spawned(async move { guard.unlock().await }).await.unwrap();

        let l = lock.clone();
        let guard = spawned(async move { l.lock_with_lease(LEASE).await })
            .await
            .unwrap();
        spawned(async move { guard.unlock().await }).await.unwrap();
        let l = lock.clone();
        let guard = spawned(async move { l.try_lock().await }).await.unwrap();
        spawned(async move { guard.unwrap().unlock().await })
            .await
            .unwrap();
        let l = lock.clone();
        let guard = spawned(async move { l.try_lock_for(WAIT, Some(LEASE)).await })
            .await
            .unwrap();
        spawned(async move { guard.unwrap().unlock().await })
            .await
            .unwrap();

        let l = lock.clone();
        let token = spawned(async move { l.with_lock(|token| async move { token }).await })
            .await
            .unwrap();
        assert!(token > 0);

        let l = lock.clone();
        let _held = spawned(async move { l.lock().await }).await.unwrap();
        let l = lock.clone();
        assert_eq!(
            spawned(async move { l.request_revocation().await })
                .await
                .unwrap(),
            1,
            "the one hold is asked"
        );
        let l = lock.clone();
        assert!(
            spawned(async move { l.force_unlock().await })
                .await
                .unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_guard_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("spawn:guard");
    let guard = lock.lock().await.unwrap();

    let (guard, inner) = spawned(async move {
        let inner = guard.reenter().await;
        (guard, inner)
    })
    .await;
    let inner = inner.unwrap();
    let (guard, holds) = spawned(async move {
        let holds = guard.hold_count().await;
        (guard, holds)
    })
    .await;
    assert_eq!(holds.unwrap(), 2);
    spawned(async move { inner.unlock().await }).await.unwrap();

    let l = lock.clone();
    let nested = spawned(guard.scope(async move { l.is_held().await }));
    assert!(nested.await.unwrap());

    // revocation_requested resolves once somebody asks.
    let (asked, guard) = {
        let waiting = spawned(async move {
            guard.revocation_requested().await;
            guard
        });
        let l = lock.clone();
        let asking = async move {
            eventually(NOTICE, || {
                let l = l.clone();
                async move { l.request_revocation().await.unwrap() > 0 }
            })
            .await
        };
        let (guard, asked) = tokio::join!(waiting, asking);
        (asked, guard)
    };
    assert!(asked, "the holder never listened for a revocation request");

    spawned(async move { guard.unlock().await }).await.unwrap();

    // lost resolves once a lease nobody renews has run out.
    let guard = lock.lock_with_lease(SHORT).await.unwrap();
    let waiting = spawned(async move {
        guard.lost().await;
        guard
    });
    let guard = tokio::time::timeout(NOTICE, waiting)
        .await
        .expect("lost() resolves once the lease ran out");
    assert!(spawned(async move { guard.unlock().await }).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_lock_and_mutex_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;

    let fenced = client.get_fenced_lock("spawn:fenced");
    let f = fenced.clone();
    let (token, guard) = spawned(async move { f.lock_and_get_token().await })
        .await
        .unwrap();
    let f = fenced.clone();
    assert_eq!(
        spawned(async move { f.token().await }).await.unwrap(),
        Some(token)
    );
    spawned(async move { guard.unlock().await }).await.unwrap();
    let f = fenced.clone();
    let (_, guard) = spawned(async move { f.lock_and_get_token_with_lease(LEASE).await })
        .await
        .unwrap();
    spawned(async move { guard.unlock().await }).await.unwrap();
    let f = fenced.clone();
    let got = spawned(async move { f.try_lock_and_get_token().await }).await;
    spawned(async move { got.unwrap().unwrap().1.unlock().await })
        .await
        .unwrap();
    let f = fenced.clone();
    let got = spawned(async move { f.try_lock_and_get_token_for(WAIT, None).await }).await;
    spawned(async move { got.unwrap().unwrap().1.unlock().await })
        .await
        .unwrap();

    let mutex = client.get_mutex("spawn:mutex");
    let m = mutex.clone();
    let guard = spawned(async move { m.lock().await }).await.unwrap();
    let m = mutex.clone();
    assert!(spawned(async move { m.is_locked().await }).await.unwrap());
    spawned(async move { guard.unlock().await }).await.unwrap();
    let m = mutex.clone();
    let guard = spawned(async move { m.lock_with_lease(LEASE).await })
        .await
        .unwrap();
    spawned(async move { guard.unlock().await }).await.unwrap();
    let m = mutex.clone();
    let guard = spawned(async move { m.try_lock().await }).await.unwrap();
    spawned(async move { guard.unwrap().unlock().await })
        .await
        .unwrap();
    let m = mutex.clone();
    let _held = spawned(async move { m.try_lock_for(WAIT, None).await })
        .await
        .unwrap()
        .unwrap();
    let m = mutex.clone();
    assert_eq!(
        spawned(async move { m.request_revocation().await })
            .await
            .unwrap(),
        1,
        "the one hold is asked"
    );
    let m = mutex.clone();
    assert!(
        spawned(async move { m.force_unlock().await })
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.get_semaphore("spawn:sem");
    let s = sem.clone();
    assert!(
        spawned(async move { s.try_set_permits(2).await })
            .await
            .unwrap()
    );
    let s = sem.clone();
    assert_eq!(
        spawned(async move { s.add_permits(1).await })
            .await
            .unwrap(),
        3
    );
    let s = sem.clone();
    assert_eq!(
        spawned(async move { s.available_permits().await })
            .await
            .unwrap(),
        3
    );
    let s = sem.clone();
    spawned(async move { s.acquire(1).await }).await.unwrap();
    let s = sem.clone();
    assert!(
        spawned(async move { s.try_acquire(1).await })
            .await
            .unwrap()
    );
    let s = sem.clone();
    assert!(
        spawned(async move { s.try_acquire_for(1, WAIT).await })
            .await
            .unwrap()
    );
    let s = sem.clone();
    spawned(async move { s.release(2).await }).await.unwrap();
    let s = sem.clone();
    assert_eq!(
        spawned(async move { s.drain_permits().await })
            .await
            .unwrap(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_semaphore_and_guard_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.get_permit_expirable_semaphore("spawn:permits");
    let s = sem.clone();
    assert!(
        spawned(async move { s.try_set_permits(3).await })
            .await
            .unwrap()
    );
    let s = sem.clone();
    assert_eq!(
        spawned(async move { s.add_permits(2).await })
            .await
            .unwrap(),
        5
    );
    let s = sem.clone();
    assert_eq!(
        spawned(async move { s.available_permits().await })
            .await
            .unwrap(),
        5
    );

    let s = sem.clone();
    let guard = spawned(async move { s.acquire().await }).await.unwrap();
    spawned(async move { guard.release().await }).await.unwrap();
    let s = sem.clone();
    let guard = spawned(async move { s.acquire_with_lease(LEASE).await })
        .await
        .unwrap();
    let guard = spawned(async move {
        let updated = guard.update_lease(LEASE * 2).await;
        updated.map(|()| guard)
    })
    .await
    .unwrap();
    spawned(async move { guard.release().await }).await.unwrap();
    let s = sem.clone();
    let guard = spawned(async move { s.acquire_many(2).await })
        .await
        .unwrap();
    spawned(async move { guard.release().await }).await.unwrap();
    let s = sem.clone();
    let guard = spawned(async move { s.try_acquire().await }).await.unwrap();
    spawned(async move { guard.unwrap().release().await })
        .await
        .unwrap();
    let s = sem.clone();
    let guard = spawned(async move { s.try_acquire_for(1, WAIT, Some(LEASE)).await })
        .await
        .unwrap()
        .unwrap();

    // revocation_requested resolves once somebody asks.
    let waiting = spawned(async move {
        guard.revocation_requested().await;
        guard
    });
    let s = sem.clone();
    let asked = eventually(NOTICE, || {
        let s = s.clone();
        async move { s.request_revocation().await.unwrap() > 0 }
    })
    .await;
    assert!(asked, "the holder never listened for a revocation request");
    let guard = waiting.await;

    let id = guard.ids()[0].clone();
    let s = sem.clone();
    spawned(async move { s.release_by_id(&id).await })
        .await
        .unwrap();
    // Its permit went back by id: the guard's own release finds it gone.
    let _ = spawned(async move { guard.release().await }).await;

    // lost resolves once a lease nobody renews has run out.
    let s = sem.clone();
    let guard = s.acquire_with_lease(SHORT).await.unwrap();
    let waiting = spawned(async move {
        guard.lost().await;
        guard
    });
    let guard = tokio::time::timeout(NOTICE, waiting)
        .await
        .expect("lost() resolves once the lease ran out");
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_methods_spawn() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let latch = client.get_count_down_latch("spawn:latch");
    let l = latch.clone();
    assert!(
        spawned(async move { l.try_set_count(1).await })
            .await
            .unwrap()
    );
    let l = latch.clone();
    assert_eq!(
        spawned(async move { l.get_count().await }).await.unwrap(),
        1
    );
    let l = latch.clone();
    assert!(
        !spawned(async move { l.await_for(Duration::from_millis(20)).await })
            .await
            .unwrap()
    );
    let l = latch.clone();
    let zero = tokio::spawn(async move { l.await_zero().await });
    let l = latch.clone();
    assert_eq!(
        spawned(async move { l.count_down().await }).await.unwrap(),
        0
    );
    zero.await.unwrap().unwrap();
    let l = latch.clone();
    assert!(
        spawned(async move { l.try_set_count(1).await })
            .await
            .unwrap()
    );
    let l = latch.clone();
    assert!(spawned(async move { l.delete().await }).await.unwrap());
}
