//! Nesting keeps every promise of docs/semantics.md, for every lock kind:
//!
//! - a scope takes effect where and while its future runs: a `gb.scope(..)` future built inside
//!   A's work and spawned, or awaited after A's work ended, is not inside A (a lock of A there is
//!   a new acquisition: it waits, or gets a token of its own); `ga.scope(gb.scope(work))` is
//!   inside both;
//! - a nested acquisition checks on the server, in the same call, that the hold it nests in
//!   stands: a hold forced open (DEL) before the client noticed gives `LockLost`, never a fresh
//!   grant under the old owner, nor `Ok(None)` when somebody else took the lock meanwhile; so
//!   does `reenter`, without taking (and giving back) a grant or moving the token counter;
//! - a read nested in a write hold carries the write hold's token, also after a downgrade.

mod support;

use std::time::Duration;

use ferrisson::{Client, Error, LockGuard, RLock};
use redis::AsyncCommands;
use support::{RedisServer, client, within};

/// Every reentrant lock kind, as a handle of `name`.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fair,
    Fenced,
    Read,
    Write,
}

const KINDS: [Kind; 5] = [
    Kind::Plain,
    Kind::Fair,
    Kind::Fenced,
    Kind::Read,
    Kind::Write,
];

impl Kind {
    fn handle(self, client: &Client, name: &str) -> RLock {
        match self {
            Kind::Plain => client.get_lock(name),
            Kind::Fair => client.get_fair_lock(name),
            Kind::Fenced => (*client.get_fenced_lock(name)).clone(),
            Kind::Read => client.get_read_write_lock(name).read_lock(),
            Kind::Write => client.get_read_write_lock(name).write_lock(),
        }
    }

    /// Whether two acquisitions of this kind exclude each other (readers share).
    fn exclusive(self) -> bool {
        !matches!(self, Kind::Read)
    }
}

fn is_lost<T: std::fmt::Debug>(result: &ferrisson::Result<T>) -> bool {
    matches!(result, Err(Error::LockLost { .. }))
}

async fn exists(server: &RedisServer, key: &str) -> bool {
    let mut raw = server.raw().await;
    raw.exists(key).await.unwrap()
}

async fn counter(server: &RedisServer, lock: &RLock) -> Option<String> {
    let mut raw = server.raw().await;
    raw.get(lock.token_counter_key()).await.unwrap()
}

/// Deletes the lock's key behind its holders' backs, as `force_unlock` from another process
/// or an operator's DEL would.
async fn forced_open(server: &RedisServer, name: &str) {
    let mut raw = server.raw().await;
    let _: i64 = raw.del(name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_acquisition_in_a_hold_forced_open_is_lost_for_every_kind() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let other = support::client(&server).await;
    for kind in KINDS {
        let name = format!("forced:{kind:?}");
        let lock = kind.handle(&client, &name);
        let guard = lock.lock().await.unwrap();
        let token = guard.fencing_token();
        forced_open(&server, &name).await;
        let before = counter(&server, &lock).await;

        // try_lock and lock nested in the scope: lost, at once, and nothing granted.
        let tried = guard.scope(lock.try_lock()).await;
        assert!(is_lost(&tried), "{kind:?}: nested try_lock gave {tried:?}");
        let locked = within(
            Duration::from_secs(5),
            "nested lock",
            guard.scope(lock.lock()),
        )
        .await;
        assert!(is_lost(&locked), "{kind:?}: nested lock gave {locked:?}");
        assert!(
            !exists(&server, &name).await,
            "{kind:?}: no fresh grant under the old owner"
        );

        // reenter: lost without taking a grant (the token counter does not move).
        let again = guard.reenter().await;
        assert!(is_lost(&again), "{kind:?}: reenter gave {again:?}");
        assert!(
            !exists(&server, &name).await,
            "{kind:?}: reenter granted nothing"
        );
        assert_eq!(
            counter(&server, &lock).await,
            before,
            "{kind:?}: no token drawn"
        );
        assert!(guard.is_lost(), "{kind:?}: the guard heard of its loss");
        let _ = guard.unlock().await;

        // With another holder meanwhile: lost too, not `Ok(None)`.
        let guard = lock.lock().await.unwrap();
        forced_open(&server, &name).await;
        let theirs = kind.handle(&other, &name).lock().await.unwrap();
        assert!(theirs.fencing_token() > token);
        let tried = guard.scope(lock.try_lock()).await;
        assert!(
            is_lost(&tried),
            "{kind:?}: beside another holder: {tried:?}"
        );
        let in_with_lock = guard
            .scope(lock.try_lock_for(Duration::from_millis(300), None))
            .await;
        assert!(is_lost(&in_with_lock), "{kind:?}: {in_with_lock:?}");
        let _ = guard.unlock().await;
        assert!(
            !theirs.is_lost() && kind.handle(&other, &name).is_locked().await.unwrap(),
            "{kind:?}: the other holder keeps the lock"
        );
        theirs.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_nested_in_a_forced_write_and_writes_in_a_forced_read_are_lost() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("forced:rw");
    let (read, write) = (rw.read_lock(), rw.write_lock());

    let writing = write.lock().await.unwrap();
    forced_open(&server, "forced:rw").await;
    let nested = writing.scope(read.lock()).await;
    assert!(
        is_lost(&nested),
        "a read in a forced write scope: {nested:?}"
    );
    assert!(!exists(&server, "forced:rw").await, "no read hold granted");
    let _ = writing.unlock().await;

    // Inside with_lock's work too.
    let out = write
        .with_lock(|_| {
            let (server, read) = (&server, &read);
            async move {
                forced_open(server, "forced:rw").await;
                read.try_lock().await
            }
        })
        .await;
    assert!(
        matches!(
            out,
            Err(Error::LockLost { .. }) | Ok(Err(Error::LockLost { .. }))
        ),
        "{out:?}"
    );
    assert!(!exists(&server, "forced:rw").await);

    // An upgrade in a forced read scope: the read hold is gone, so the answer is that.
    let reading = read.lock().await.unwrap();
    forced_open(&server, "forced:rw").await;
    let upgrade = reading.scope(write.try_lock()).await;
    assert!(is_lost(&upgrade), "{upgrade:?}");
    assert!(!exists(&server, "forced:rw").await, "no write hold granted");
    let _ = reading.unlock().await;

    // While it stands, the upgrade is still refused at once.
    let reading = read.lock().await.unwrap();
    let upgrade = reading.scope(write.lock()).await;
    assert!(
        matches!(upgrade, Err(Error::UpgradeNotSupported { .. })),
        "{upgrade:?}"
    );
    reading.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_nested_in_a_write_hold_carries_its_token_through_a_downgrade() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("nested:token");
    let (read, write) = (rw.read_lock(), rw.write_lock());

    // In a guard's scope.
    let writing = write.lock().await.unwrap();
    let token = writing.fencing_token();
    let first = writing.scope(read.lock()).await.unwrap();
    let second = writing.scope(read.try_lock()).await.unwrap().unwrap();
    assert_eq!(first.fencing_token(), token, "the write hold's token");
    assert_eq!(second.fencing_token(), token);
    assert_eq!(first.hold_count().await.unwrap(), 2);
    second.unlock().await.unwrap();
    // The downgrade: the write hold goes, the read hold stays, with the same token.
    writing.unlock().await.unwrap();
    assert!(!first.is_lost());
    assert_eq!(first.fencing_token(), token);
    let mode = rw.snapshot().await.unwrap().mode;
    assert_eq!(
        mode,
        Some(ferrisson::inspect::RwMode::Read),
        "a read lock now"
    );
    // Another reader shares it, with a token of its own (above), and a writer waits.
    let reader = read.lock().await.unwrap();
    assert!(reader.fencing_token() > token);
    assert!(write.try_lock().await.unwrap().is_none());
    // Nested in the downgraded read: one more read hold, same token.
    let third = first.scope(read.lock()).await.unwrap();
    assert_eq!(third.fencing_token(), token);
    for g in [third, reader, first] {
        g.unlock().await.unwrap();
    }

    // Inside with_lock's work.
    let (outer, inner) = write
        .with_lock(|token| {
            let read = &read;
            async move {
                let r = read.lock().await?;
                let inner = r.fencing_token();
                r.unlock().await?;
                Ok::<_, Error>((token, inner))
            }
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outer, inner);
}

/// Runs `body` with a hold of `a` taken inside A's `with_lock` work, a hold `gb` of another lock
/// beside it. Exclusion: a task spawned inside A's work that runs `gb.scope(work)` is not inside
/// A's scope, whichever kind A is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_future_spawned_inside_another_holds_work_is_not_inside_it() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for kind in KINDS {
        let a = kind.handle(&client, &format!("spawned:{kind:?}"));
        let b = client.get_lock(&format!("spawned:b:{kind:?}"));
        let held_b = b.lock().await.unwrap();
        let (a2, gb) = (a.clone(), &held_b);
        let (parent, child) = a
            .with_lock(|token| async move {
                // Built here, inside A's work, and run by another task while the work goes on.
                let work = gb.scope(async move {
                    let g = a2.lock().await?;
                    let t = g.fencing_token();
                    g.unlock().await?;
                    Ok::<_, Error>(t)
                });
                let child = tokio::spawn(work);
                tokio::time::sleep(Duration::from_millis(300)).await;
                if kind.exclusive() {
                    assert!(
                        !child.is_finished(),
                        "{kind:?}: the child waited for A's hold"
                    );
                }
                (token, child)
            })
            .await
            .unwrap();
        let child = within(Duration::from_secs(10), "child", child)
            .await
            .unwrap()
            .unwrap();
        assert_ne!(
            child, parent,
            "{kind:?}: the child had an acquisition of its own"
        );
        held_b.unlock().await.unwrap();
    }
}

// The scope future is returned from A's work unawaited on purpose.
#[allow(clippy::async_yields_async)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_future_built_in_one_scope_and_awaited_after_it_is_not_inside_it() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for kind in KINDS {
        let a = kind.handle(&client, &format!("later:{kind:?}"));
        let b = client.get_lock(&format!("later:b:{kind:?}"));
        let (ga, gb) = (a.lock().await.unwrap(), b.lock().await.unwrap());
        // Built inside A's scope, returned from it unawaited.
        let built = ga.scope(async { gb.scope(a.try_lock()) }).await;
        // A's scope has ended (ga is still held): a lock of A now is a new acquisition.
        let got = built.await.unwrap();
        match got {
            Some(g) if kind.exclusive() => panic!(
                "{kind:?}: nested in a scope that had ended ({})",
                g.fencing_token()
            ),
            Some(g) => {
                assert_ne!(
                    g.fencing_token(),
                    ga.fencing_token(),
                    "{kind:?}: a reader of its own"
                );
                g.unlock().await.unwrap();
            }
            None => assert!(kind.exclusive()),
        }
        assert_eq!(ga.hold_count().await.unwrap(), 1, "{kind:?}");
        ga.unlock().await.unwrap();
        gb.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_composed_directly_are_inside_both() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for kind in KINDS {
        let a = kind.handle(&client, &format!("composed:{kind:?}"));
        let b = client.get_lock(&format!("composed:b:{kind:?}"));
        let (ga, gb) = (a.lock().await.unwrap(), b.lock().await.unwrap());
        let work = async {
            let inner_a = a.lock().await?;
            let inner_b = b.try_lock().await?;
            Ok::<_, Error>((inner_a, inner_b))
        };
        let (inner_a, inner_b) = within(
            Duration::from_secs(5),
            "ga.scope(gb.scope(work))",
            ga.scope(gb.scope(work)),
        )
        .await
        .unwrap();
        let inner_b: LockGuard = inner_b.expect("nested in B");
        assert_eq!(
            inner_a.fencing_token(),
            ga.fencing_token(),
            "{kind:?}: nested in A"
        );
        assert_eq!(inner_b.fencing_token(), gb.fencing_token());
        assert_eq!(ga.hold_count().await.unwrap(), 2);
        for g in [inner_a, inner_b, ga, gb] {
            g.unlock().await.unwrap();
        }
    }
}

#[test]
fn blocking_nested_acquisitions_in_a_forced_hold_are_lost() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lock = client.get_lock("blocking:forced");
    let guard = lock.lock().unwrap();
    rt.block_on(forced_open(&server, "blocking:forced"));
    let nested = guard.scope(|| lock.try_lock());
    assert!(matches!(nested, Err(Error::LockLost { .. })), "{nested:?}");
    assert!(matches!(guard.reenter(), Err(Error::LockLost { .. })));
    assert!(!rt.block_on(exists(&server, "blocking:forced")));
    let _ = guard.unlock();

    // A read nested in a blocking write scope: the write hold's token.
    let rw = client.get_read_write_lock("blocking:rw");
    let writing = rw.write_lock().lock().unwrap();
    let read = writing.scope(|| rw.read_lock().lock()).unwrap();
    assert_eq!(read.fencing_token(), writing.fencing_token());
    writing.unlock().unwrap();
    read.unlock().unwrap();
}

/// A nested acquisition never waits or lines up: beside another owner of the same client that
/// holds the lock (after a force-unlock), a nested `try_lock_for` in the old hold's scope is
/// `LockLost` at once, never `Ok(None)` after its budget, and never handed the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_acquisition_beside_another_owner_of_its_client_is_lost_at_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let other = support::client(&server).await;
    let lock = client.get_lock("nested:beside");
    let guard = lock.lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        other
            .get_lock("nested:beside")
            .force_unlock()
            .await
            .unwrap()
    );
    let second = within(Duration::from_secs(5), "the waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    let started = std::time::Instant::now();
    let nested = guard
        .scope(lock.try_lock_for(Duration::from_secs(2), None))
        .await;
    assert!(is_lost(&nested), "{nested:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "at once");
    let nested = within(
        Duration::from_secs(2),
        "nested lock",
        guard.scope(lock.lock()),
    )
    .await;
    assert!(is_lost(&nested), "{nested:?}");
    assert!(!second.is_lost(), "the other owner keeps the lock");
    drop(guard);
    second.unlock().await.unwrap();
}

/// A read nested in a write hold that is gone (the write field removed, the lock now read
/// locked by the owner's earlier nested read) is lost, and only the write hold is told: the
/// owner's read hold, which stands, is not marked lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_write_hold_under_a_nested_read_leaves_the_read_hold_standing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("nested:sides");
    let (read, write) = (rw.read_lock(), rw.write_lock());
    let writing = write.lock().await.unwrap();
    let reading = writing.scope(read.lock()).await.unwrap();
    let writer = rw.snapshot().await.unwrap().writer.unwrap().owner;
    let mut raw = server.raw().await;
    let _: i64 = raw
        .hdel("nested:sides", format!("{writer}:write"))
        .await
        .unwrap();
    let _: i64 = raw.hset("nested:sides", "mode", "read").await.unwrap();
    let again = writing.scope(read.lock()).await;
    assert!(is_lost(&again), "{again:?}");
    assert!(writing.is_lost(), "the write hold heard of its loss");
    assert!(!reading.is_lost(), "the read hold stands");
    assert_eq!(reading.hold_count().await.unwrap(), 1);
    reading.unlock().await.unwrap();
    let _ = writing.unlock().await;
}
