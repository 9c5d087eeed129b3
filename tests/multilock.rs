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
    assert!(matches!(broken.lock().await, Err(Error::WrongType { .. })));
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
        c2.get_read_write_lock("doc")
            .write_lock()
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
            assert!(errors.iter().all(|e| matches!(e, Error::Redis(_))));
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
