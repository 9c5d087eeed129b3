//! NOSCRIPT never reaches a caller. A script cache is emptied by every restart, every failover
//! to a replica and every `SCRIPT FLUSH`; whatever path a call takes (acquire, release, renewal,
//! leave, inspection, a group-committed list, a waiter woken by a message), the client sends the
//! script's source instead and the caller sees its answer.
//!
//! Three ways in: a proxy that empties the cache before every script call (the worst case, and
//! deterministic: the client's first answer to NOSCRIPT must already work), contenders under a
//! storm of flushes on one server, and waiters woken on a cluster's new master after a manual
//! failover while its cache is flushed again and again.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrisson::Client;
use futures::future::join_all;
use support::cluster::RedisCluster;
use support::{Checker, Mode, Proxy, RedisServer, builder, builder_for};

/// Calls of EVAL since the last reset: the client's answer to NOSCRIPT. (The name is the same
/// on every server; SCRIPT LOAD is `script|load` from Redis 7.0 and `script` before.)
async fn evals(server: &RedisServer) -> u64 {
    server.calls("eval").await
}

/// Every kind of object, every path a test can reach, through a proxy that empties the script
/// cache before each EVALSHA: each call meets NOSCRIPT, and each caller gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_answers_when_the_cache_is_emptied_before_each_call() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let connect = || {
        builder_for(&proxy.url())
            .watchdog_timeout(Duration::from_millis(600))
            .recheck_interval(Duration::from_secs(30))
            .build()
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    proxy.set(Mode::FlushScripts);
    server.reset_stats().await;

    // A plain lock: acquire, nest, inspect, renew (600 ms leases, renewed every 200 ms), and a
    // waiter of another client woken by the release's message.
    let lock = a.get_lock("plain");
    let guard = lock.lock().await.unwrap();
    let inner = guard.reenter().await.unwrap();
    assert_eq!(guard.hold_count().await.unwrap(), 2);
    assert!(lock.is_locked().await.unwrap());
    let waiting = {
        let lock = b.get_lock("plain");
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(10), None).await })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!guard.is_lost(), "renewals went through");
    inner.unlock().await.unwrap();
    let asked = lock.request_revocation().await.unwrap();
    assert_eq!(asked, 1, "the holder was asked to give the lock up");
    guard.unlock().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the waiter was woken by the release's message")
        .unwrap()
        .unwrap()
        .expect("the waiter got the lock");
    assert!(lock.force_unlock().await.unwrap());
    assert!(woken.unlock().await.is_err(), "its hold was forced open");

    // A fair lock: a waiter that times out leaves the queue, the next one is granted.
    let fair = a.get_fair_lock("fair");
    let held = fair.lock().await.unwrap();
    let late = b.get_fair_lock("fair");
    assert!(
        late.try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    let next = {
        let fair = b.get_fair_lock("fair");
        tokio::spawn(async move { fair.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    next.await.unwrap().unwrap().unlock().await.unwrap();

    // A fenced lock: tokens grow.
    let fenced = a.get_fenced_lock("fenced");
    let (first, g) = fenced.lock_and_get_token().await.unwrap();
    g.unlock().await.unwrap();
    let (second, g) = fenced.lock_and_get_token().await.unwrap();
    assert!(second > first);
    assert_eq!(fenced.token().await.unwrap(), Some(second));
    g.unlock().await.unwrap();

    // A read-write lock: two readers, renewed; a writer that gives up leaves; a writer that
    // waits is granted when the readers are gone.
    let rw_a = a.get_read_write_lock("rw");
    let rw_b = b.get_read_write_lock("rw");
    let r1 = rw_a.read_lock().lock().await.unwrap();
    let r2 = rw_b.read_lock().lock().await.unwrap();
    assert!(
        rw_b.write_lock()
            .try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    let writer = {
        let write = rw_b.write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!r1.is_lost() && !r2.is_lost(), "read holds were renewed");
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(3), writer)
        .await
        .expect("the writer was granted")
        .unwrap()
        .unwrap();
    let nested = w.reenter().await.unwrap();
    nested.unlock().await.unwrap();
    w.unlock().await.unwrap();

    // Semaphores and a latch.
    let semaphore = a.get_semaphore("sem");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    semaphore.acquire(1).await.unwrap();
    assert!(!semaphore.try_acquire(2).await.unwrap());
    semaphore.release(1).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    let permits = a.get_permit_expirable_semaphore("permits");
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = permits.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!permit.is_lost(), "the permit's lease was renewed");
    permit.release().await.unwrap();
    let latch = b.get_count_down_latch("latch");
    assert!(latch.try_set_count(2).await.unwrap());
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    assert!(latch.await_for(Duration::from_secs(1)).await.unwrap());

    // Group commit: operations on many keys at once leave in lists.
    let many: Vec<_> = (0..32).map(|i| a.get_lock(&format!("many:{i}"))).collect();
    let guards = join_all(many.iter().map(|l| l.lock())).await;
    let guards: Vec<_> = guards.into_iter().map(Result::unwrap).collect();
    for result in join_all(guards.into_iter().map(|g| g.unlock())).await {
        result.unwrap();
    }

    let evals = evals(&server).await;
    assert!(
        evals >= 60,
        "each call met NOSCRIPT and went again as EVAL: {evals} EVALs"
    );
}

/// A lock's state, checked by its contenders: -1 while a writer holds it, the number of
/// readers otherwise.
#[derive(Default)]
struct Shared(AtomicIsize);

impl Shared {
    fn write(&self) {
        assert_eq!(
            self.0
                .compare_exchange(0, -1, Ordering::SeqCst, Ordering::SeqCst),
            Ok(0),
            "a writer was granted beside another holder"
        );
    }
    fn unwrite(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
    fn read(&self) {
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        assert!(before >= 0, "a reader was granted beside a writer");
    }
    fn unread(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `SCRIPT FLUSH` every `every` on `node` until `stop`; how many were sent.
fn storm(
    mut node: redis::aio::MultiplexedConnection,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut flushes = 0;
        while !stop.load(Ordering::SeqCst) {
            let flushed: redis::RedisResult<()> = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut node)
                .await;
            if flushed.is_ok() {
                flushes += 1;
            }
            tokio::time::sleep(every).await;
        }
        flushes
    })
}

/// Acquires within 5 s or fails the test: a release that failed would leave the lock held and
/// its contenders waiting out the lease (30 s).
async fn within_5s<T>(what: &str, f: impl std::future::Future<Output = ferrisson::Result<T>>) -> T {
    match tokio::time::timeout(Duration::from_secs(5), f).await {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => panic!("{what}: {e:?}"),
        Err(_) => panic!("{what}: waited more than 5 s"),
    }
}

/// Two clients' tasks contend for a plain, a fair, a fenced and a read-write lock, and for many
/// keys at once (group commit), while the script cache is flushed every 5 ms: every call is
/// answered, no two holders overlap, and nobody waits on a hold a failed release left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_under_a_flush_storm_see_no_noscript_and_never_overlap() {
    let server = RedisServer::start();
    let clients = [
        builder(&server).build().await.unwrap(),
        builder(&server).build().await.unwrap(),
    ];
    server.reset_stats().await;
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = storm(server.raw().await, Duration::from_millis(5), stop.clone());
    let until = Instant::now() + Duration::from_secs(6);
    let grants = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for kind in ["plain", "fair", "fenced"] {
        let checker = Arc::new(Checker::default());
        for i in 0..4 {
            let client = clients[i % 2].clone();
            let (checker, grants) = (checker.clone(), grants.clone());
            tasks.push(tokio::spawn(async move {
                let lock = match kind {
                    "fair" => client.get_fair_lock(kind),
                    "fenced" => (*client.get_fenced_lock(kind)).clone(),
                    _ => client.get_lock(kind),
                };
                while Instant::now() < until {
                    let guard = within_5s(kind, lock.lock()).await;
                    let start = checker.enter();
                    tokio::task::yield_now().await;
                    checker.exit(guard.fencing_token(), start);
                    within_5s(kind, guard.unlock()).await;
                    grants.fetch_add(1, Ordering::Relaxed);
                }
                Some(checker)
            }));
        }
    }
    let rw = Arc::new(Shared::default());
    for i in 0..6 {
        let client = clients[i % 2].clone();
        let (rw, grants) = (rw.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let lock = client.get_read_write_lock("rw");
            let mut n = 0;
            while Instant::now() < until {
                n += 1;
                if (i + n) % 3 == 0 {
                    let guard = within_5s("write", lock.write_lock().lock()).await;
                    rw.write();
                    tokio::task::yield_now().await;
                    rw.unwrite();
                    within_5s("write release", guard.unlock()).await;
                } else {
                    let guard = within_5s("read", lock.read_lock().lock()).await;
                    rw.read();
                    tokio::task::yield_now().await;
                    rw.unread();
                    within_5s("read release", guard.unlock()).await;
                }
                grants.fetch_add(1, Ordering::Relaxed);
            }
            None
        }));
    }
    for (i, client) in clients.iter().enumerate() {
        let client = client.clone();
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            let locks: Vec<_> = (0..16)
                .map(|k| client.get_lock(&format!("many:{i}:{k}")))
                .collect();
            while Instant::now() < until {
                let guards = join_all(locks.iter().map(|l| within_5s("many", l.lock()))).await;
                join_all(
                    guards
                        .into_iter()
                        .map(|g| within_5s("many release", g.unlock())),
                )
                .await;
                grants.fetch_add(16, Ordering::Relaxed);
            }
            None
        }));
    }
    for task in tasks {
        if let Some(checker) = task.await.expect("a contender failed") {
            checker.verify();
        }
    }
    stop.store(true, Ordering::SeqCst);
    let flushes = flushes.await.unwrap();
    let evals = evals(&server).await;
    let grants = grants.load(Ordering::Relaxed);
    eprintln!("{grants} grants under {flushes} flushes; {evals} calls went again as EVAL");
    assert!(flushes > 200, "the storm ran: {flushes} flushes");
    assert!(evals > 50, "calls met NOSCRIPT: {evals} EVALs");
}

async fn cluster_client(cluster: &RedisCluster) -> Client {
    Client::builder()
        .cluster(cluster.seed_urls())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
        .recheck_interval(Duration::from_secs(30))
        .build()
        .await
        .expect("client connects to the test cluster")
}

/// After a manual failover, the new master's cache is empty (scripts are not replicated) and is
/// flushed again every 2 ms while waiters are woken one after the other: each call there meets
/// NOSCRIPT, and each goes again as EVAL to the key's node (a `SCRIPT LOAD` has no key, and a
/// cluster client sends it to every node it knows, which after a failover need not be the one
/// the next EVALSHA reaches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_woken_on_a_new_master_with_a_flushed_cache_get_the_lock() {
    let cluster = RedisCluster::start().await;
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;
    let key = "race:lock";
    let held = a.get_lock(key).lock().await.unwrap();
    let checker = Arc::new(Checker::default());
    let mut waiters = Vec::new();
    for i in 0..6 {
        let lock = [&a, &b][i % 2].get_lock(key);
        let checker = checker.clone();
        waiters.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = lock
                    .try_lock_for(Duration::from_secs(20), None)
                    .await
                    .expect("acquire on the new master")
                    .expect("granted within 20 s");
                let start = checker.enter();
                tokio::time::sleep(Duration::from_millis(5)).await;
                checker.exit(guard.fencing_token(), start);
                guard.unlock().await.expect("release on the new master");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (new_master, took) = cluster.failover_manual(key).await;
    eprintln!("manual failover to {new_master} in {took:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = storm(
        cluster.raw_node(new_master).await,
        Duration::from_millis(2),
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    cluster.reset_stats().await;
    held.unlock().await.expect("the first holder's release");
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the waiters finished")
            .expect("a waiter failed");
    }
    stop.store(true, Ordering::SeqCst);
    let flushes = flushes.await.unwrap();
    let evals = cluster.calls_on(new_master, "eval").await;
    eprintln!("{flushes} flushes of the new master; {evals} calls went again as EVAL there");
    assert_eq!(checker.verify().len(), 30);
    assert!(evals > 0, "calls met NOSCRIPT on the new master");
}

/// A user whose ACL rule predates EVAL (it grants `evalsha` and `script|load` only) still gets
/// through an emptied cache: refused EVAL, the client loads the script and calls it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_eval_gets_through_by_loading_the_script() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "no-eval", "on", ">pw", "~*", "&*", "+@all", "-eval",
        ])
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    let url = format!("redis://no-eval:pw@127.0.0.1:{}/", server.port());
    let client = builder_for(&url).build().await.unwrap();
    let lock = client.get_lock("old-rule");
    let guard = lock.lock().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    server.reset_stats().await;
    guard.unlock().await.expect("the release after the flush");
    assert!(!lock.is_locked().await.unwrap());
    let loads = server.calls("script|load").await + server.calls("script").await;
    assert_eq!(loads, 2, "{:?}", server.commandstats().await);
    assert_eq!(server.calls("eval").await, 0, "EVAL was refused, not run");
}
