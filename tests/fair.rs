//! RFairLock: grants in arrival order, dead waiters skipped within the queue timeout, cancelled
//! waiters gone at once, try_lock never queues, nothing left behind.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{Checker, HolderProcess, RedisServer, builder, eventually, join_within};

const QUEUE_TIMEOUT: Duration = Duration::from_millis(600);

async fn fair_client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .fair_lock_queue_timeout(QUEUE_TIMEOUT)
        .build()
        .await
        .unwrap()
}

/// The server's clock (`TIME`) in ms, which a fair lock's waiter deadlines use.
async fn server_time_ms(raw: &mut redis::aio::MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(raw).await.unwrap();
    secs * 1000 + micros / 1000
}

/// The queue of fair lock `name` and its waiters' deadlines to call again (server time in ms),
/// read in one step; checks that the queue's turns (Redisson's zset) are the queued owners'.
async fn queue(server: &RedisServer, name: &str) -> (Vec<String>, Vec<(String, i64)>) {
    let mut raw = server.raw().await;
    let (list, mut turns, deadlines): (Vec<String>, Vec<String>, Vec<(String, i64)>) =
        redis::pipe()
            .atomic()
            .lrange(format!("redisson_lock_queue:{{{name}}}"), 0, -1)
            .zrange(format!("redisson_lock_timeout:{{{name}}}"), 0, -1)
            .zrange_withscores(format!("ferrisson_fair_alive:{{{name}}}"), 0, -1)
            .query_async(&mut raw)
            .await
            .unwrap();
    let mut queued = list.clone();
    queued.sort();
    turns.sort();
    assert_eq!(
        turns, queued,
        "every queued owner has a turn, and only they"
    );
    (list, deadlines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_the_order_they_came() {
    let server = RedisServer::start();
    let clients = [fair_client(&server).await, fair_client(&server).await];
    let holder = clients[0].get_fair_lock("fifo");
    let guard = holder.lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let lock = clients[i % 2].get_fair_lock("fifo");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.unlock().await.unwrap();
        }));
        // Let this waiter join the queue before the next one starts.
        assert!(
            eventually(Duration::from_secs(2), || async {
                queue(&server, "fifo").await.0.len() == i + 1
            })
            .await
        );
    }
    guard.unlock().await.unwrap();
    join_within(Duration::from_secs(10), tasks, "fifo waiters").await;
    assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
    assert_eq!(queue(&server, "fifo").await, (vec![], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_at_the_head_delays_the_rest_by_at_most_the_queue_timeout() {
    let server = RedisServer::start();
    let client = fair_client(&server).await;
    let holder = client.get_fair_lock("dead-head");
    let guard = holder.lock().await.unwrap();
    let _process = {
        let mut p = HolderProcess::spawn(
            &server,
            "dead-head",
            QUEUE_TIMEOUT.as_millis() as u64,
            "fair",
        );
        assert!(
            eventually(Duration::from_secs(10), || async {
                queue(&server, "dead-head").await.0.len() == 1
            })
            .await
        );
        let next = client.get_fair_lock("dead-head");
        let waiter = tokio::spawn(async move {
            let g = next.lock().await.unwrap();
            let got = Instant::now();
            g.unlock().await.unwrap();
            got
        });
        assert!(
            eventually(Duration::from_secs(2), || async {
                queue(&server, "dead-head").await.0.len() == 2
            })
            .await
        );
        p.kill().await;
        let killed = Instant::now();
        guard.unlock().await.unwrap(); // wakes the dead head, who never answers
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        let delay = got - killed;
        eprintln!(
            "a dead head waiter delayed the next one by {delay:?} (queue timeout {QUEUE_TIMEOUT:?})"
        );
        assert!(
            delay <= QUEUE_TIMEOUT + Duration::from_millis(300),
            "delayed {delay:?}"
        );
        p
    };
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue(&server, "dead-head").await == (vec![], vec![])
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_timed_out_waiters_leave_the_queue_at_once() {
    let server = RedisServer::start();
    let client = fair_client(&server).await;
    let guard = client.get_fair_lock("leave").lock().await.unwrap();
    // Budgets that run out.
    for _ in 0..3 {
        let lock = support::Elsewhere::new(client.get_fair_lock("leave"));
        assert!(
            lock.try_lock_for(Duration::from_millis(100), None)
                .await
                .unwrap()
                .is_none()
        );
    }
    assert_eq!(queue(&server, "leave").await, (vec![], vec![]));
    // Futures dropped while waiting.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = client.get_fair_lock("leave");
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue(&server, "leave").await.0.len() == 3
        })
        .await
    );
    for w in &waiters {
        w.abort();
    }
    assert!(
        eventually(Duration::from_millis(500), || async {
            queue(&server, "leave").await == (vec![], vec![])
        })
        .await,
        "dropped waiters left entries behind: {:?}",
        queue(&server, "leave").await
    );
    // A live waiter keeps its place across many queue timeouts.
    let patient = client.get_fair_lock("leave");
    let task = tokio::spawn(async move { patient.lock().await.map(|g| g.fencing_token()) });
    tokio::time::sleep(QUEUE_TIMEOUT * 3).await;
    assert_eq!(
        queue(&server, "leave").await.0.len(),
        1,
        "a live waiter lost its place"
    );
    let late = client.get_fair_lock("leave");
    let late_task = tokio::spawn(async move { late.lock().await.map(|g| g.fencing_token()) });
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue(&server, "leave").await.0.len() == 2
        })
        .await
    );
    let first = guard.fencing_token();
    guard.unlock().await.unwrap();
    let patient_token = tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let late_token = tokio::time::timeout(Duration::from_secs(3), late_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        first < patient_token && patient_token < late_token,
        "the patient waiter went first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_never_queues_and_deadlines_use_server_time() {
    let server = RedisServer::start();
    let client = fair_client(&server).await;
    let guard = client.get_fair_lock("try").lock().await.unwrap();
    let other = support::Elsewhere::new(client.get_fair_lock("try"));
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(
        other
            .try_lock_for(Duration::ZERO, None)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(queue(&server, "try").await, (vec![], vec![]));

    let mut raw = server.raw().await;
    let started = server_time_ms(&mut raw).await;
    let task = tokio::spawn(async move { other.lock().await.map(drop) });
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue(&server, "try").await.0.len() == 1
        })
        .await
    );
    // The waiter refreshes its deadline every third of the queue timeout, so it may move while
    // it is read: it is the server's time at some call of the waiter, which came after
    // `started` and before `after`, plus the queue timeout.
    let (_, deadlines) = queue(&server, "try").await;
    let after = server_time_ms(&mut raw).await;
    let deadline = deadlines[0].1;
    let timeout = QUEUE_TIMEOUT.as_millis() as i64;
    assert!(
        deadline >= started + timeout && deadline <= after + timeout,
        "deadline {} ms ahead of the server's time before the wait began, {} ms ahead of its \
         time after the queue was read (queue timeout {timeout} ms)",
        deadline - started,
        deadline - after,
    );
    guard.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_never_overlap_and_leave_nothing_behind() {
    let server = RedisServer::start();
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = fair_client(&server).await;
        for _ in 0..3 {
            let lock = client.get_fair_lock("fair-checked");
            let checker = checker.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..12 {
                    let g = lock.lock().await.unwrap();
                    let start = checker.enter();
                    checker.exit(g.fencing_token(), start);
                    g.unlock().await.unwrap();
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "contenders").await;
    assert_eq!(checker.verify().len(), 108);
    let mut raw = server.raw().await;
    let mut left: Vec<String> = raw.keys("*").await.unwrap();
    left.retain(|k| {
        !k.starts_with("redisson_unlock_latch:") && !k.starts_with("ferrisson_client:")
    });
    let counter = fair_client(&server)
        .await
        .get_fair_lock("fair-checked")
        .token_counter_key();
    assert_eq!(left, vec![counter], "only the fencing counter stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_waiter_is_woken_on_its_own_channel() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    let guard = client.get_fair_lock("own-channel").lock().await.unwrap();
    let waiter = client.get_fair_lock("own-channel");
    let task = tokio::spawn(async move {
        let g = waiter.lock().await.unwrap();
        let got = Instant::now();
        g.unlock().await.unwrap();
        got
    });
    assert!(
        eventually(Duration::from_secs(2), || async {
            queue(&server, "own-channel").await.0.len() == 1
        })
        .await
    );
    let (list, _) = queue(&server, "own-channel").await;
    let channel = format!("redisson_lock__channel:{{own-channel}}:{}", list[0]);
    // The waiter joins the queue with its first attempt and subscribes only afterwards.
    assert!(
        eventually(Duration::from_secs(2), || async {
            server.subscribers(&channel).await == 1
        })
        .await,
        "the waiter listens on {channel}: {} subscribers",
        server.subscribers(&channel).await
    );
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .unwrap()
        .unwrap();
    let handoff = got - released;
    eprintln!("fair handoff by message: {handoff:?}");
    assert!(
        handoff < Duration::from_millis(500),
        "woken by its message, not a re-check: {handoff:?}"
    );
}
