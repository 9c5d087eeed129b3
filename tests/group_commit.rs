//! Group commit: lock operations that callers of one client send while another of their kind is
//! on its way leave together in one script call, and each keeps its own reply, error and
//! cancellation.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ferrisson::Error;
use futures::future::join_all;
use redis::AsyncCommands;
use support::{Checker, Mode, Proxy, RedisServer, builder, builder_for, eventually, join_within};

async fn exists(server: &RedisServer, key: &str) -> bool {
    server.raw().await.exists(key).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_sent_together_keep_their_own_replies() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.set("g:wrong", "not a lock").await.unwrap();
    let other = support::client(&server).await;
    let busy = other.get_lock("g:busy").lock().await.unwrap();
    server.reset_stats().await;

    // Polled together, one acquire goes out alone and the others queue behind it; on an idle
    // machine they leave in 2 to 5 calls. What this test is about is that replies reach their
    // own callers, for which it is enough that some went together: on a loaded machine (other
    // test binaries running) the lanes drain in more calls (10 and 13 were seen).
    let names: Vec<String> = (0..20)
        .map(|i| match i {
            7 => "g:wrong".to_owned(),
            11 => "g:busy".to_owned(),
            _ => format!("g:{i}"),
        })
        .collect();
    let locks: Vec<_> = names.iter().map(|n| client.get_lock(n)).collect();
    let replies = join_all(locks.iter().map(|l| l.try_lock())).await;
    let scripts = server.calls("evalsha").await;
    assert!(
        (2..20).contains(&scripts),
        "20 acquires went out in {scripts} script calls"
    );

    let mut guards = Vec::new();
    for (name, reply) in names.iter().zip(replies) {
        match name.as_str() {
            "g:wrong" => assert!(
                matches!(&reply, Err(Error::WrongType { key }) if key == "g:wrong"),
                "{reply:?}"
            ),
            "g:busy" => assert!(matches!(reply, Ok(None)), "{reply:?}"),
            _ => {
                let guard = reply.unwrap().expect("a free lock is granted");
                // Tokens order the grants of one name; other names may share a value.
                assert!(guard.fencing_token() > 0);
                guards.push(guard);
            }
        }
    }
    assert_eq!(guards.len(), 18);
    let held: String = raw.get("g:wrong").await.unwrap();
    assert_eq!(held, "not a lock", "the refused operation changed nothing");

    server.reset_stats().await;
    let released = join_all(guards.into_iter().map(|g| g.unlock())).await;
    assert!(released.iter().all(Result::is_ok), "{released:?}");
    let scripts = server.calls("evalsha").await;
    assert!(
        scripts < 18,
        "18 releases went out in {scripts} script calls"
    );
    for i in (0..20).filter(|i| *i != 7 && *i != 11) {
        assert!(!exists(&server, &format!("g:{i}")).await);
    }
    drop(busy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_group_commit_every_operation_is_its_own_call() {
    let server = RedisServer::start();
    let client = builder(&server).group_commit(false).build().await.unwrap();
    server.reset_stats().await;
    let locks: Vec<_> = (0..10)
        .map(|i| client.get_lock(&format!("s:{i}")))
        .collect();
    let guards = join_all(locks.iter().map(|l| l.lock())).await;
    assert_eq!(server.calls("evalsha").await, 10);
    for g in guards {
        g.unwrap().unlock().await.unwrap();
    }
}

/// Replies come late (the proxy delays them, for less than an operation queues before it gives
/// up and goes alone), so the first acquires are still on their way while the others queue;
/// some of those are cancelled there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_cancelled_while_queued_never_reaches_redis() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = builder_for(&proxy.url()).build().await.unwrap();
    proxy.set(Mode::Delay(Duration::from_millis(150)));
    server.reset_stats().await;

    // A lane lets two calls out at once (CALLS_PER_LANE in src/script/commit.rs).
    let firsts: Vec<_> = (0..2)
        .map(|i| {
            let lock = client.get_lock(&format!("q:first{i}"));
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(40)).await;
    let queued: Vec<_> = (0..6)
        .map(|i| {
            let lock = client.get_lock(&format!("q:{i}"));
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(40)).await;
    let mut kept = Vec::new();
    for (i, task) in queued.into_iter().enumerate() {
        if i % 2 == 0 {
            task.abort();
        } else {
            kept.push(task);
        }
    }
    let _firsts = join_within(Duration::from_secs(5), firsts, "first acquires").await;
    let _guards: Vec<_> = join_within(Duration::from_secs(5), kept, "queued acquires")
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // Three grants of the queued ones and the first two: the cancelled never ran.
    assert_eq!(
        server.calls("hset").await,
        5,
        "{:?}",
        server.commandstats().await
    );
    for i in [0, 2, 4] {
        assert!(
            !exists(&server, &format!("q:{i}")).await,
            "q:{i} was granted"
        );
    }
    for i in [1, 3, 5] {
        assert!(exists(&server, &format!("q:{i}")).await, "q:{i} is held");
    }
}

/// SCRIPT FLUSH while operations queue: their list meets NOSCRIPT, is sent again whole as EVAL
/// of the list form's source, and every operation runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_meets_noscript_is_sent_again_as_eval() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = builder_for(&proxy.url()).build().await.unwrap();
    proxy.set(Mode::Delay(Duration::from_millis(150)));
    let locks: Vec<_> = (0..9).map(|i| client.get_lock(&format!("n:{i}"))).collect();
    let all = {
        let locks = locks.clone();
        tokio::spawn(async move {
            join_all(
                locks
                    .iter()
                    .map(|l| async move { l.lock().await.map(|g| g.fencing_token()) }),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.reset_stats().await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    let tokens = tokio::time::timeout(Duration::from_secs(5), all)
        .await
        .unwrap()
        .unwrap();
    assert!(tokens.iter().all(Result::is_ok), "{tokens:?}");
    assert!(
        server.calls("eval").await >= 1,
        "the list went again as EVAL"
    );
    // Two of the nine went out alone before the flush (a lane lets two calls out at once).
    assert_eq!(
        server.calls("hset").await,
        7,
        "each queued acquire ran once"
    );
}

/// The replies of a list are lost (the proxy throws them away): every operation in it hears
/// that its outcome is unknown and is repaired on its own, so no grant is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_whose_reply_is_lost_is_repaired_per_operation() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = builder_for(&proxy.url()).build().await.unwrap();
    proxy.set(Mode::Delay(Duration::from_millis(150)));
    server.reset_stats().await;
    let first = client.get_lock("l:first");
    let first = tokio::spawn(async move { first.try_lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(40)).await;
    let queued: Vec<_> = (0..6)
        .map(|i| {
            let lock = client.get_lock(&format!("l:{i}"));
            tokio::spawn(async move { lock.try_lock().await.map(drop) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(40)).await;
    // The first reply is on its way through the proxy already; the list goes out when it is
    // in, and its reply is thrown away.
    proxy.set(Mode::DropReplies);
    first.await.unwrap().unwrap();
    let outcomes = join_within(Duration::from_secs(10), queued, "lost list").await;
    assert_eq!(server.calls("hset").await, 7, "the list ran");
    proxy.set(Mode::Pass);
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Err(Error::Redis(_))),
            "each operation hears of the lost reply: {outcome:?}"
        );
    }
    for i in 0..6 {
        let key = format!("l:{i}");
        assert!(
            eventually(Duration::from_secs(10), || async {
                !exists(&server, &key).await
            })
            .await,
            "{key}'s grant was undone"
        );
    }
}

/// Many tasks of one client over a few locks, with a second client (group commit off) in the
/// mix: no two holds of a lock overlap, and its tokens strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_grants_never_overlap() {
    const LOCKS: usize = 4;
    const TASKS: usize = 24;
    const ROUNDS: usize = 12;
    let server = RedisServer::start();
    let grouped = support::client(&server).await;
    let solo = builder(&server).group_commit(false).build().await.unwrap();
    let checkers: Vec<Arc<Checker>> = (0..LOCKS).map(|_| Arc::default()).collect();
    server.reset_stats().await;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = if t % 4 == 3 { &solo } else { &grouped };
        let lock = client.get_lock(&format!("x:{}", t % LOCKS));
        let checker = checkers[t % LOCKS].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                let start = checker.enter();
                tokio::task::yield_now().await;
                checker.exit(guard.fencing_token(), start);
                guard.unlock().await.unwrap();
            }
        }));
    }
    join_within(Duration::from_secs(60), tasks, "contenders").await;
    for checker in &checkers {
        assert_eq!(checker.verify().len(), TASKS / LOCKS * ROUNDS);
    }
}

/// Calls from a current-thread runtime, which nobody drives once they are back, never hold a
/// lane: operations from another runtime sent meanwhile still go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_queued_behind_a_current_thread_runtime_still_goes_out() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = builder_for(&proxy.url()).build().await.unwrap();
    proxy.set(Mode::Delay(Duration::from_millis(300)));
    let (parked_tx, parked_rx) = std::sync::mpsc::channel::<()>();
    let elsewhere = {
        let client = client.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // Both calls a lane lets out at once, from this runtime.
            let guards = runtime.block_on(async {
                let a = client.get_lock("ct:a");
                let b = client.get_lock("ct:b");
                let (a, b) = futures::join!(
                    a.lock_with_lease(Duration::from_secs(30)),
                    b.lock_with_lease(Duration::from_secs(30))
                );
                (a.unwrap(), b.unwrap())
            });
            // Nobody drives this runtime until the test is over.
            let _ = parked_rx.recv();
            drop(guards);
            drop(runtime);
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued: Vec<_> = (0..3)
        .map(|i| {
            let lock = client.get_lock(&format!("ct:{i}"));
            tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
        })
        .collect();
    let tokens = join_within(
        Duration::from_secs(5),
        queued,
        "operations queued behind a parked runtime",
    )
    .await;
    assert!(tokens.iter().all(Result::is_ok), "{tokens:?}");
    parked_tx.send(()).unwrap();
    elsewhere.join().unwrap();
}

/// Releases sent together, some of locks that were taken from their holders meanwhile: those
/// answer "not held" (a nil reply inside the list), the others release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_sent_together_answer_each_for_its_own_lock() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let locks: Vec<_> = (0..12)
        .map(|i| client.get_lock(&format!("r:{i}")))
        .collect();
    let guards = join_all(
        locks
            .iter()
            .map(|l| l.lock_with_lease(Duration::from_secs(30))),
    )
    .await;
    let guards: Vec<_> = guards.into_iter().map(Result::unwrap).collect();
    let mut raw = server.raw().await;
    for i in [3, 4, 9] {
        let _: () = raw.del(format!("r:{i}")).await.unwrap();
    }
    server.reset_stats().await;
    let released = join_all(guards.into_iter().map(|g| g.unlock())).await;
    assert!(
        server.calls("evalsha").await < 12,
        "the releases went out together"
    );
    for (i, outcome) in released.iter().enumerate() {
        if [3, 4, 9].contains(&i) {
            assert!(
                matches!(outcome, Err(Error::LockLost { .. })),
                "r:{i}: {outcome:?}"
            );
        } else {
            assert!(outcome.is_ok(), "r:{i}: {outcome:?}");
            assert!(!exists(&server, &format!("r:{i}")).await);
        }
    }
}
