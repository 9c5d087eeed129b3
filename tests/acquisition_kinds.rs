//! Nesting is explicit (`with_lock`'s work, `LockGuard::scope`, `LockGuard::reenter`): one more
//! hold with the same token, through any handle of the name; a nested hold may outlive its
//! scope. Read-write locks nest a read in a write and refuse the upgrade, and every lock kind's
//! acquisitions joined in one task exclude each other. Under the old rule (one owner per task)
//! every test here but the last fails; the last holds `MultiLock::new` to its documentation.

mod support;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrisson::{Error, LockGuard, MultiGuard, MultiLock, RedLock, RedLockGuard};
use futures::future::join_all;
use support::{Checker, RedisServer, client, freed, within};
use tokio::sync::oneshot;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_in_with_lock_is_reentrant_through_any_handle() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "nested";
    let lock = client.get_lock(name);

    // A guard of this task, outside any scope: the task holds nothing.
    let guard = lock.lock().await.unwrap();
    assert!(!lock.is_held().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    let in_scope = guard.scope(async { (lock.is_held().await, lock.hold_count().await) });
    let (held, count) = in_scope.await;
    assert!(held.unwrap());
    assert_eq!(count.unwrap(), 1);
    guard.unlock().await.unwrap();

    let work = lock.with_lock(|token| {
        let (lock, client) = (&lock, &client);
        async move {
            assert!(lock.is_held().await.unwrap());
            assert_eq!(lock.hold_count().await.unwrap(), 1);
            let same = lock.lock().await.unwrap();
            assert_eq!(same.fencing_token(), token);
            assert_eq!(lock.hold_count().await.unwrap(), 2);
            assert_eq!(same.hold_count().await.unwrap(), 2);
            same.unlock().await.unwrap();

            let another = client.get_lock(name).try_lock().await.unwrap();
            let another = another.expect("another handle of the name nests at once");
            assert_eq!(another.fencing_token(), token);
            let clone = lock.clone();
            let cloned = clone
                .lock_with_lease(Duration::from_secs(20))
                .await
                .unwrap();
            assert_eq!(cloned.fencing_token(), token);
            assert_eq!(clone.hold_count().await.unwrap(), 3);

            // A fenced handle of the same name is the same family: nested too.
            let fenced = client.get_fenced_lock(name);
            let (fenced_token, fenced_guard) = fenced.lock_and_get_token().await.unwrap();
            assert_eq!(fenced_token, token);
            assert_eq!(fenced_guard.fencing_token(), token);
            assert_eq!(fenced.hold_count().await.unwrap(), 4);
            for g in [another, cloned, fenced_guard] {
                g.unlock().await.unwrap();
            }
            assert_eq!(lock.hold_count().await.unwrap(), 1);
            token
        }
    });
    let token = within(Duration::from_secs(30), "with_lock", work)
        .await
        .unwrap();
    assert!(token > 0);
    assert!(!lock.is_held().await.unwrap());
    freed(&lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reenter_and_a_nested_guard_that_outlives_its_scope() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let other = support::client(&server).await.get_lock("reentered");
    let lock = client.get_lock("reentered");

    let guard = lock.lock().await.unwrap();
    let again = within(Duration::from_secs(10), "reenter", guard.reenter())
        .await
        .unwrap();
    assert_eq!(again.fencing_token(), guard.fencing_token());
    assert_eq!(guard.hold_count().await.unwrap(), 2);
    assert_eq!(again.hold_count().await.unwrap(), 2);
    assert_eq!(lock.hold_count().await.unwrap(), 0, "outside any scope");
    // Given back in any order.
    guard.unlock().await.unwrap();
    assert_eq!(again.hold_count().await.unwrap(), 1);
    assert!(other.try_lock().await.unwrap().is_none());
    again.unlock().await.unwrap();
    freed(&lock).await;

    // A guard taken in a scope, returned out of it, outlives the guard whose scope it was.
    let outer = lock.lock().await.unwrap();
    let token = outer.fencing_token();
    let nested = outer.scope(async { lock.lock().await });
    let nested = within(Duration::from_secs(10), "nested lock()", nested)
        .await
        .unwrap();
    assert_eq!(nested.fencing_token(), token);
    assert_eq!(outer.hold_count().await.unwrap(), 2);
    outer.unlock().await.unwrap();
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "held while the nested guard lives"
    );
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(nested.hold_count().await.unwrap(), 1);
    assert!(!nested.is_lost());
    nested.unlock().await.unwrap();
    let next = other
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last hold");
    assert!(next.fencing_token() > token);
    next.unlock().await.unwrap();

    // The same with the outer guard dropped (released in the background) instead.
    let outer = lock.lock().await.unwrap();
    let nested = outer.scope(lock.lock()).await.unwrap();
    drop(outer);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(other.try_lock().await.unwrap().is_none());
    assert_eq!(nested.hold_count().await.unwrap(), 1);
    let again = nested.reenter().await.unwrap();
    assert_eq!(again.fencing_token(), nested.fencing_token());
    again.unlock().await.unwrap();
    nested.unlock().await.unwrap();
    freed(&lock).await;

    // A guard taken in with_lock's work and returned out of it outlives with_lock's own hold.
    let lock_ref = &lock;
    let kept = lock.with_lock(|token| async move { (token, lock_ref.lock().await) });
    let (token, kept) = within(Duration::from_secs(10), "with_lock", kept)
        .await
        .unwrap();
    let kept = kept.unwrap();
    assert_eq!(kept.fencing_token(), token);
    assert!(other.try_lock().await.unwrap().is_none());
    kept.unlock().await.unwrap();
    freed(&lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_nests_in_a_write_scope_and_a_write_in_a_read_scope_is_refused_at_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("rw-nested");
    let (read, write) = (rw.read_lock(), rw.write_lock());

    // A read in the writer's scope is the writer's own: granted at once.
    let work = write.with_lock(|_| async {
        let at_once = read
            .try_lock()
            .await
            .unwrap()
            .expect("a read nested in the write");
        let waited = read.lock().await.unwrap();
        assert_eq!(read.hold_count().await.unwrap(), 2);
        at_once.unlock().await.unwrap();
        waited.unlock().await.unwrap();
    });
    within(Duration::from_secs(20), "read in write", work)
        .await
        .unwrap();

    // A write in a reader's scope is refused at once, waiting or not.
    let work = read.with_lock(|_| async {
        let asked = Instant::now();
        let refused = within(Duration::from_secs(20), "upgrade", write.lock()).await;
        assert!(
            matches!(refused, Err(Error::UpgradeNotSupported { .. })),
            "{refused:?}"
        );
        let refused = write.try_lock_for(Duration::from_secs(10), None).await;
        assert!(
            matches!(refused, Err(Error::UpgradeNotSupported { .. })),
            "{refused:?}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
    });
    within(Duration::from_secs(30), "write in read", work)
        .await
        .unwrap();
    let reader = read.lock().await.unwrap();
    let refused = reader.scope(write.try_lock()).await;
    assert!(
        matches!(refused, Err(Error::UpgradeNotSupported { .. })),
        "{refused:?}"
    );

    // Outside its scope, a writer beside the reader is another owner: it waits, no error.
    let waited = write.try_lock_for(Duration::from_millis(200), None).await;
    assert!(waited.unwrap().is_none(), "waits for the reader");
    reader.unlock().await.unwrap();

    // A reader beside a writer in one task waits for the writer.
    let checker = Checker::default();
    let (inside_tx, inside_rx) = oneshot::channel();
    let checker_ref = &checker;
    let writing = write.with_lock(move |token| async move {
        let start = checker_ref.enter();
        inside_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        checker_ref.exit(token, start);
    });
    let reading = async {
        inside_rx.await.unwrap();
        assert!(
            read.try_lock().await.unwrap().is_none(),
            "beside, not inside"
        );
        let guard = read.lock().await.unwrap();
        let start = checker_ref.enter();
        checker_ref.exit(guard.fencing_token(), start);
        guard.unlock().await.unwrap();
    };
    let (written, ()) = within(Duration::from_secs(30), "join", async {
        tokio::join!(writing, reading)
    })
    .await;
    written.unwrap();
    assert_eq!(checker.verify().len(), 2);
    freed(&rw.write_lock()).await;
}

/// A hold of any kind, given back by the test.
trait Held {
    async fn release(self);
}

impl Held for LockGuard {
    async fn release(self) {
        self.unlock().await.unwrap();
    }
}

impl Held for MultiGuard {
    async fn release(self) {
        self.unlock().await.unwrap();
    }
}

impl Held for RedLockGuard {
    async fn release(self) {
        self.unlock().await.unwrap();
    }
}

/// Ten acquisitions `acquire(i)` joined in one task, each a short critical section: no two
/// overlap, and their tokens increase grant after grant. Returns the tokens in grant order.
async fn joined<G: Held, Fut>(what: &str, acquire: impl Fn(usize) -> Fut) -> Vec<u64>
where
    Fut: Future<Output = (u64, G)>,
{
    let checker = Checker::default();
    let rounds = (0..10).map(|i| {
        let (granted, checker) = (acquire(i), &checker);
        async move {
            let (token, held) = granted.await;
            let start = checker.enter();
            tokio::time::sleep(Duration::from_millis(2)).await;
            checker.exit(token, start);
            held.release().await;
        }
    });
    within(Duration::from_secs(60), what, join_all(rounds)).await;
    let holds = checker.verify();
    assert_eq!(holds.len(), 10, "{what}");
    holds.iter().map(|h| h.token).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_joined_in_one_task_excludes() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let long = Duration::from_secs(60);

    let multi = MultiLock::new([client.get_lock("a"), client.get_lock("b")]);
    joined("multilock", |i| {
        let multi = &multi;
        async move {
            let guard = match i % 2 {
                0 => multi.lock().await.unwrap(),
                _ => multi
                    .try_lock_for(long, None)
                    .await
                    .unwrap()
                    .expect("granted"),
            };
            (guard.parts()[0].fencing_token(), guard)
        }
    })
    .await;

    let fenced = client.get_fenced_lock("fenced");
    let tokens = joined("fenced", |i| {
        let fenced = &fenced;
        async move {
            let lease = Duration::from_secs(30);
            let (token, guard) = match i % 3 {
                0 => fenced.lock_and_get_token().await.unwrap(),
                1 => fenced.lock_and_get_token_with_lease(lease).await.unwrap(),
                _ => fenced
                    .try_lock_and_get_token_for(long, None)
                    .await
                    .unwrap()
                    .expect("granted"),
            };
            assert_eq!(token, guard.fencing_token());
            (token, guard)
        }
    })
    .await;
    // Strictly increasing (checked by the checker): ten grants, ten tokens.
    assert_eq!(fenced.token().await.unwrap(), tokens.last().copied());
    freed(&fenced).await;

    let fair = client.get_fair_lock("fair");
    joined("fair", |_| async {
        let guard = fair.lock().await.unwrap();
        (guard.fencing_token(), guard)
    })
    .await;

    let rw = client.get_read_write_lock("rw");
    joined("write side", |i| {
        let write = rw.write_lock();
        async move {
            let guard = match i % 2 {
                0 => write.lock().await.unwrap(),
                _ => write
                    .try_lock_for(long, None)
                    .await
                    .unwrap()
                    .expect("granted"),
            };
            (guard.fencing_token(), guard)
        }
    })
    .await;
    for name in ["a", "b", "fair"] {
        freed(&client.get_lock(name)).await;
    }
    freed(&rw.write_lock()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_acquisitions_joined_in_one_task_exclude() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(client(server).await);
    }
    let red = RedLock::new(clients.iter().map(|c| c.get_lock("red")));
    // No one instance's tokens order grants of a majority: number them in grant order.
    let grants = AtomicU64::new(1);
    joined("redlock", |_| async {
        let guard = red.lock().await.unwrap();
        assert!(guard.granted() >= 2, "a majority");
        (grants.fetch_add(1, Ordering::SeqCst), guard)
    })
    .await;
    for c in &clients {
        freed(&c.get_lock("red")).await;
    }
}

/// `MultiLock::new`'s documentation: "Giving the same handle twice is reentrant". Both parts
/// are taken by one acquisition, so the second part should not wait for the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_given_the_same_handle_twice_is_granted() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("twice");
    let multi = MultiLock::new([lock.clone(), lock.clone()]);
    let granted = multi.try_lock_for(Duration::from_secs(5), None).await;
    let guard = granted
        .unwrap()
        .expect("one acquisition, the same lock twice: reentrant");
    assert_eq!(guard.parts().len(), 2);
    assert_eq!(
        guard.parts()[0].fencing_token(),
        guard.parts()[1].fencing_token()
    );
    guard.unlock().await.unwrap();
    freed(&lock).await;
}
