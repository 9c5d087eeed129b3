//! MultiLock: all or nothing, no deadlock whatever the order, every release error reported.

mod support;

use std::time::Duration;

use ferrisson::{Error, MultiLock};
use redis::AsyncCommands;
use support::{RedisServer, builder, client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let names = ["m:a", "m:b", "m:c"];
    // A hold of this task outside any scope: another acquisition, which the MultiLock's part
    // waits for like anyone's.
    let blocker = client.get_lock("m:c").lock().await.unwrap();
    let multi = MultiLock::new(names.map(|n| client.get_lock(n)));
    assert!(multi.try_lock().await.unwrap().is_none());
    let started = std::time::Instant::now();
    assert!(
        multi
            .try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    for n in ["m:a", "m:b"] {
        assert!(
            !client.get_lock(n).is_locked().await.unwrap(),
            "{n} was left held"
        );
    }
    // An error on one part releases the others too.
    let mut raw = server.raw().await;
    let _: () = raw.set("m:z", "a string").await.unwrap();
    let broken = MultiLock::new(["m:a", "m:z"].map(|n| client.get_lock(n)));
    match broken.lock().await {
        Err(Error::Part {
            name,
            address,
            error,
        }) => {
            assert_eq!(name, "m:z");
            assert_eq!(address, format!("127.0.0.1:{}", server.port()));
            assert!(matches!(*error, Error::WrongType { .. }), "{error:?}");
        }
        other => panic!("expected the failed part named: {other:?}"),
    }
    assert!(!client.get_lock("m:a").is_locked().await.unwrap());

    blocker.unlock().await.unwrap();
    let guard = multi.lock().await.unwrap();
    assert_eq!(guard.parts().len(), 3);
    for n in names {
        assert!(client.get_lock(n).is_locked().await.unwrap());
    }
    guard.unlock().await.unwrap();
    for n in names {
        assert!(!client.get_lock(n).is_locked().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let forward = MultiLock::new([a.get_lock("x"), a.get_lock("y"), a.get_lock("z")]);
    let backward = MultiLock::new([b.get_lock("z"), b.get_lock("y"), b.get_lock("x")]);
    let run = |multi: MultiLock| {
        tokio::spawn(async move {
            for _ in 0..30 {
                let guard = multi.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await.unwrap();
            }
        })
    };
    let (f, g) = (run(forward), run(backward));
    tokio::time::timeout(Duration::from_secs(30), async {
        f.await.unwrap();
        g.await.unwrap();
    })
    .await
    .expect("deadlocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_kinds_across_servers_and_every_release_error_is_reported() {
    let one = RedisServer::start();
    let mut two = RedisServer::start();
    let c1 = client(&one).await;
    let c2 = builder(&two)
        .response_timeout(Duration::from_millis(300))
        .connection_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let multi = MultiLock::new([
        c1.get_lock("plain"),
        c1.get_fair_lock("fair"),
        c2.get_read_write_lock("doc").read_lock(),
        c2.get_read_write_lock("sheet").write_lock(),
    ]);
    let guard = multi.lock().await.unwrap();
    assert!(!guard.is_lost());
    assert!(
        support::Elsewhere::new(c2.get_read_write_lock("doc").write_lock())
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    two.kill();
    match guard.unlock().await {
        Err(Error::Multiple { errors }) => {
            assert_eq!(
                errors.len(),
                2,
                "one error per part on the dead server: {errors:?}"
            );
            // Each names its part and the server it was on.
            let dead = format!("127.0.0.1:{}", two.port());
            let mut named: Vec<&str> = Vec::new();
            for e in &errors {
                match e {
                    Error::Part {
                        name,
                        address,
                        error,
                    } => {
                        assert_eq!(address, &dead);
                        assert!(matches!(**error, Error::Redis(_)), "{error:?}");
                        let shown = e.to_string();
                        assert!(
                            shown.contains(&format!("lock `{name}` on {dead}: ")),
                            "{shown}"
                        );
                        named.push(name);
                    }
                    other => panic!("a part's failure without its part: {other:?}"),
                }
            }
            named.sort_unstable();
            assert_eq!(named, ["doc", "sheet"]);
        }
        other => panic!("expected both failures reported, got {other:?}"),
    }
    assert!(
        !c1.get_lock("plain").is_locked().await.unwrap(),
        "the live parts were released"
    );
    assert!(!c1.get_fair_lock("fair").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lost_part_makes_the_guard_lost() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let guard = MultiLock::new([client.get_lock("p"), client.get_lock("q")])
        .lock()
        .await
        .unwrap();
    let _: () = server.raw().await.del("q").await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost at the next renewal");
    assert!(guard.is_lost());
    assert!(matches!(guard.unlock().await, Err(Error::Multiple { errors }) if errors.len() == 1));
    assert!(matches!(
        MultiLock::new([]).try_lock().await,
        Err(Error::InvalidArgument(_))
    ));
}

/// Issue 9, item 1: client B holds `m:b` for 1.2 s; A asks for `[m:a, m:b]` with a 300 ms fixed
/// lease and waits for `m:b`. Meanwhile B keeps trying to take `m:a`. The part A took first must
/// stay A's for the whole wait, and the guard A gets must have every part held, on the fixed
/// lease. Both `lock_with_lease` and `try_lock_for(wait, Some(lease))`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_multilock_never_returns_a_guard_with_a_part_taken_by_another() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    for bounded in [false, true] {
        let (first, second) = if bounded {
            ("m:fixed-a2", "m:fixed-b2")
        } else {
            ("m:fixed-a1", "m:fixed-b1")
        };
        let blocker = b
            .get_lock(second)
            .lock_with_lease(Duration::from_millis(1200))
            .await
            .unwrap();
        let multi = MultiLock::new([a.get_lock(first), a.get_lock(second)]);
        let lease = Duration::from_millis(300);
        // Opened now: the checks below must run well within the 300 ms lease.
        let mut raw = server.raw().await;
        let acquire = tokio::spawn(async move {
            if bounded {
                multi
                    .try_lock_for(Duration::from_secs(5), Some(lease))
                    .await
                    .unwrap()
                    .expect("granted within the wait")
            } else {
                multi.lock_with_lease(lease).await.unwrap()
            }
        });
        // Once A has taken its first part, B tries to take it, again and again, until A has its
        // guard.
        let rival = b.get_lock(first);
        assert!(
            support::eventually(Duration::from_secs(2), || async {
                rival.is_locked().await.unwrap()
            })
            .await
        );
        let mut stolen = None;
        while !acquire.is_finished() {
            if let Some(guard) = rival.try_lock().await.unwrap() {
                stolen = Some(guard);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let guard = tokio::time::timeout(Duration::from_secs(5), acquire)
            .await
            .expect("granted once the blocker's lease ran out")
            .unwrap();
        assert!(
            stolen.is_none(),
            "{first} was taken by another client while the MultiLock waited (bounded: {bounded})"
        );
        assert!(!guard.is_lost());
        for part in [first, second] {
            let owners: Vec<String> = raw.hkeys(part).await.unwrap();
            assert_eq!(owners.len(), 1, "{part}: {owners:?}");
            assert!(
                owners[0].starts_with(&a.id().to_string()),
                "{part} is held by {owners:?}, not by the MultiLock's client"
            );
            let pttl: i64 = raw.pttl(part).await.unwrap();
            assert!(
                (1..=300).contains(&pttl),
                "{part}: TTL {pttl} ms, not the fixed 300 ms lease"
            );
        }
        drop(blocker);
        // The fixed lease is not renewed: the parts run out, and the guard says so.
        tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .expect("the fixed lease runs out");
        assert!(
            support::eventually(Duration::from_secs(1), || async {
                rival.try_lock().await.unwrap().is_some()
            })
            .await,
            "{first} is free once its fixed lease ran out"
        );
    }
}

/// A part forced open by another client while the MultiLock waits for a later one: the
/// MultiLock finds it out when it sets the fixed lease, lets everything go and starts over, so
/// the guard it returns holds every part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_forced_open_during_the_wait_is_taken_again_before_the_guard_is_returned() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let blocker = b
        .get_lock("m:forced-b")
        .lock_with_lease(Duration::from_millis(600))
        .await
        .unwrap();
    let multi = MultiLock::new([a.get_lock("m:forced-a"), a.get_lock("m:forced-b")]);
    let acquire =
        tokio::spawn(async move { multi.lock_with_lease(Duration::from_secs(5)).await.unwrap() });
    let first = b.get_lock("m:forced-a");
    assert!(
        support::eventually(Duration::from_secs(2), || async {
            first.is_locked().await.unwrap()
        })
        .await
    );
    assert!(first.force_unlock().await.unwrap());
    let guard = tokio::time::timeout(Duration::from_secs(5), acquire)
        .await
        .expect("granted after the blocker's lease ran out")
        .unwrap();
    drop(blocker);
    assert!(!guard.is_lost(), "a part of the returned guard is lost");
    for part in ["m:forced-a", "m:forced-b"] {
        assert!(
            a.get_lock(part).is_locked().await.unwrap(),
            "{part} is not held"
        );
    }
    guard.unlock().await.unwrap();
}
