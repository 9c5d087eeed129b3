//! RFairLock queues shared with Java Redisson clients (played by `support/redisson_fair.lua`, an
//! emulation of Redisson's fair-lock scripts): a Java grant or give-up lowers every waiter's turn
//! timeout by the thread wait time, so ferrisson's timeouts must mean what Redisson's do, or a
//! Java grant pushes live ferrisson waiters out of the queue (issue 9).

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use support::redisson::JavaFairLock;
use support::{HolderProcess, RedisServer, eventually, join_within};

/// The queue (owners, in order) and the turn timeouts (owner → ms) of fair lock `name`, read in
/// one step.
async fn queue(server: &RedisServer, name: &str) -> (Vec<String>, HashMap<String, i64>) {
    let mut raw = server.raw().await;
    let (list, scores): (Vec<String>, Vec<(String, f64)>) = redis::pipe()
        .atomic()
        .lrange(format!("redisson_lock_queue:{{{name}}}"), 0, -1)
        .zrange_withscores(format!("redisson_lock_timeout:{{{name}}}"), 0, -1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let scores = scores.into_iter().map(|(o, s)| (o, s as i64)).collect();
    (list, scores)
}

/// Waits until the queue of `name` is `len` long; returns it.
async fn queued(server: &RedisServer, name: &str, len: usize) -> Vec<String> {
    assert!(
        eventually(Duration::from_secs(5), || async {
            queue(server, name).await.0.len() == len
        })
        .await,
        "the queue of {name} never reached {len}: {:?}",
        queue(server, name).await
    );
    queue(server, name).await.0
}

/// Every key left on the server, but the fencing counters (kept by design) and the live
/// clients' identities.
async fn keys_left(server: &RedisServer) -> Vec<String> {
    let mut raw = server.raw().await;
    let mut keys: Vec<String> = raw.keys("*").await.unwrap();
    keys.retain(|k| {
        !k.starts_with("ferrisson_token:")
            && !k.starts_with("redisson_lock_token:")
            && !k.starts_with("ferrisson_client:")
    });
    keys.sort();
    keys
}

/// A client whose fair waiters lose their place 600 ms after they stop calling (the holder
/// process's queue timeout in these tests), and that timeout.
async fn short_queue_client(server: &RedisServer) -> (ferrisson::Client, Duration) {
    let queue_timeout = Duration::from_millis(600);
    let client = support::builder(server)
        .fair_lock_queue_timeout(queue_timeout)
        .build()
        .await
        .unwrap();
    (client, queue_timeout)
}

/// A ferrisson waiter that takes the lock, reports it, and holds it until told to let go.
fn ferrisson_waiter(
    lock: ferrisson::RFairLock,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let _ = granted_tx.send(());
        let _ = release_rx.await;
        guard.unlock().await.unwrap();
    });
    (task, granted_rx, release_tx)
}

/// Issue 9: queue Java J1, ferrisson F, Java J2. J1's grant (Redisson's logic) lowers every turn
/// timeout by the thread wait time; F's must still lie ahead, so that J1's release keeps F and
/// J2 is served after F.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_grant_keeps_a_queued_ferrisson_waiter_in_its_place() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let name = "issue-9";
    let holder = client.get_fair_lock(name).lock().await.unwrap();
    let mut j1 = JavaFairLock::new(&server, name, 1).await;
    let mut j2 = JavaFairLock::new(&server, name, 2).await;
    assert!(j1.acquire().await.is_some(), "J1 queues");
    let (f_task, f_granted, f_release) = ferrisson_waiter(client.get_fair_lock(name));
    let f = queued(&server, name, 2).await.remove(1);
    assert!(j2.acquire().await.is_some(), "J2 queues");
    assert_eq!(
        queue(&server, name).await.0,
        [j1.owner(), &f, j2.owner()],
        "queue J1, F, J2"
    );

    holder.unlock().await.unwrap(); // tells J1, the head
    assert_eq!(j1.acquire().await, None, "J1 is granted by the Java logic");
    let (list, scores) = queue(&server, name).await;
    let now = j1.now_ms().await;
    assert_eq!(list, [&f, j2.owner()]);
    assert!(
        scores[&f] > now,
        "J1's grant pushed F's turn {} ms into the past",
        now - scores[&f]
    );

    assert_eq!(j1.release().await, Some(1), "J1 releases");
    let (list, _) = queue(&server, name).await;
    let f_holds: bool = server.raw().await.hexists(name, &f).await.unwrap();
    assert!(
        f_holds || list.first() == Some(&f),
        "J1's release dropped the live ferrisson waiter F: queue {list:?}"
    );
    assert!(
        j2.acquire().await.is_some(),
        "J2 was served before the ferrisson waiter F queued ahead of it"
    );
    tokio::time::timeout(Duration::from_secs(5), f_granted)
        .await
        .expect("F is served after J1")
        .unwrap();
    assert!(j2.acquire().await.is_some(), "J2 waits while F holds");
    f_release.send(()).unwrap();
    join_within(Duration::from_secs(5), [f_task], "F").await;
    j2.lock(Duration::from_secs(5)).await;
    assert_eq!(j2.release().await, Some(1));
    assert_eq!(keys_left(&server).await, Vec::<String>::new());
}

/// A Java waiter behind a ferrisson waiter gets the turn a Redisson waiter gets behind a Java
/// one, its turn moves up by the thread wait time at the ferrisson grant exactly as at a Java
/// grant, and it is told and served next, before a ferrisson waiter that came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_behind_a_ferrisson_waiter_keeps_its_place_across_the_grant() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let (java_lock, rust_lock) = ("behind-java", "behind-ferrisson");
    let java_holder = client.get_fair_lock(java_lock).lock().await.unwrap();
    let rust_holder = client.get_fair_lock(rust_lock).lock().await.unwrap();

    // The same queue twice: the first waiter Java on one lock, ferrisson on the other.
    let mut j0 = JavaFairLock::new(&server, java_lock, 1).await;
    assert!(j0.acquire().await.is_some());
    let mut behind_java = JavaFairLock::new(&server, java_lock, 2).await;
    let ttl_behind_java = behind_java.acquire().await.expect("queued");
    let (f_task, f_granted, f_release) = ferrisson_waiter(client.get_fair_lock(rust_lock));
    let f = queued(&server, rust_lock, 1).await.remove(0);
    let mut j = JavaFairLock::new(&server, rust_lock, 2).await;
    let ttl_behind_f = j.acquire().await.expect("queued");
    assert!(
        (ttl_behind_f - ttl_behind_java).abs() < 2_000,
        "a Java waiter waits {ttl_behind_f} ms behind a ferrisson waiter, {ttl_behind_java} ms \
         behind a Java one"
    );
    // A ferrisson waiter that comes after the Java one.
    let (late_task, mut late_granted, late_release) =
        ferrisson_waiter(client.get_fair_lock(rust_lock));
    let late = queued(&server, rust_lock, 3).await.remove(2);
    assert_eq!(queue(&server, rust_lock).await.0, [&f, j.owner(), &late]);

    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(j.channel()).await.unwrap();

    let before = queue(&server, rust_lock).await.1;
    let java_before = queue(&server, java_lock).await.1;
    rust_holder.unlock().await.unwrap(); // tells F
    tokio::time::timeout(Duration::from_secs(5), f_granted)
        .await
        .expect("F is served first")
        .unwrap();
    java_holder.unlock().await.unwrap(); // tells J0
    assert_eq!(j0.acquire().await, None);
    let after = queue(&server, rust_lock).await.1;
    let java_after = queue(&server, java_lock).await.1;
    let w = support::redisson::REDISSON_THREAD_WAIT.as_millis() as i64;
    assert_eq!(
        java_after[behind_java.owner()],
        java_before[behind_java.owner()] - w,
        "a Java grant moves the next turn up by the thread wait time"
    );
    assert_eq!(
        after[j.owner()],
        before[j.owner()] - w,
        "the ferrisson grant moves the Java waiter's turn up as a Java grant does"
    );
    assert!(after[j.owner()] > j.now_ms().await);

    f_release.send(()).unwrap(); // F's release tells J
    join_within(Duration::from_secs(5), [f_task], "F").await;
    let told = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next())
        .await
        .expect("the Java waiter is told when F releases")
        .expect("a message");
    assert_eq!(told.get_payload::<String>().unwrap(), "0");
    assert_eq!(j.acquire().await, None, "the Java waiter is served next");
    assert!(
        late_granted.try_recv().is_err(),
        "the later ferrisson waiter overtook the Java waiter"
    );
    assert_eq!(j.release().await, Some(1)); // tells the later ferrisson waiter
    tokio::time::timeout(Duration::from_secs(5), late_granted)
        .await
        .expect("the later ferrisson waiter is served after the Java one")
        .unwrap();
    late_release.send(()).unwrap();
    join_within(Duration::from_secs(5), [late_task], "late").await;
    assert_eq!(j0.release().await, Some(1));
    behind_java.lock(Duration::from_secs(5)).await;
    assert_eq!(behind_java.release().await, Some(1));
    assert_eq!(keys_left(&server).await, Vec::<String>::new());
}

/// Java and ferrisson waiters, alternating, over several rounds: every round is served in the
/// order its waiters arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_queue_is_served_in_arrival_order_round_after_round() {
    let server = RedisServer::start();
    let clients = [
        support::client(&server).await,
        support::client(&server).await,
    ];
    let name = "mixed";
    let mut javas = Vec::new();
    for thread in 0..3 {
        javas.push(Some(JavaFairLock::new(&server, name, thread).await));
    }
    let rusts: Vec<_> = (0..3).map(|i| clients[i % 2].get_fair_lock(name)).collect();
    for round in 0..3 {
        let holder = clients[round % 2].get_fair_lock(name).lock().await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut arrivals = Vec::new();
        let mut java_tasks = Vec::new();
        let mut rust_tasks = Vec::new();
        for i in 0..6 {
            // Java first in even rounds, ferrisson first in odd ones.
            let java = (i + round) % 2 == 0;
            let (label, slot) = (format!("{}{}", if java { 'J' } else { 'F' }, i / 2), i / 2);
            let order = order.clone();
            if java {
                let mut j = javas[slot].take().unwrap();
                assert!(j.acquire().await.is_some(), "{label} queues");
                java_tasks.push(tokio::spawn(async move {
                    j.lock(Duration::from_secs(20)).await;
                    order.lock().unwrap().push(label);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    assert_eq!(j.release().await, Some(1));
                    (slot, j)
                }));
            } else {
                let lock = rusts[slot].clone();
                rust_tasks.push(tokio::spawn(async move {
                    let g = lock.lock().await.unwrap();
                    order.lock().unwrap().push(label);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    g.unlock().await.unwrap();
                }));
            }
            queued(&server, name, i + 1).await;
            arrivals.push(format!("{}{}", if java { 'J' } else { 'F' }, i / 2));
        }
        holder.unlock().await.unwrap();
        for (slot, j) in join_within(Duration::from_secs(30), java_tasks, "Java waiters").await {
            javas[slot] = Some(j);
        }
        join_within(Duration::from_secs(30), rust_tasks, "ferrisson waiters").await;
        assert_eq!(*order.lock().unwrap(), arrivals, "round {round}");
        assert_eq!(queue(&server, name).await, (vec![], HashMap::new()));
    }
    assert_eq!(keys_left(&server).await, Vec::<String>::new());
}

/// Waiters of both kinds that give up, time out or die leave nothing behind once the last
/// holder is gone: only the fencing counter stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_queue_leaves_no_key_behind() {
    let server = RedisServer::start();
    let (client, queue_timeout) = short_queue_client(&server).await;
    let name = "tidy";
    let holder = client.get_fair_lock(name).lock().await.unwrap();
    // A ferrisson waiter whose process dies while it waits.
    let mut dead = HolderProcess::spawn(&server, name, queue_timeout.as_millis() as u64, "fair");
    queued(&server, name, 1).await;
    dead.kill().await;
    let mut j = JavaFairLock::new(&server, name, 1).await;
    assert!(j.acquire().await.is_some());
    let (f_task, f_granted, f_release) = ferrisson_waiter(client.get_fair_lock(name));
    let f = queued(&server, name, 3).await.remove(2);
    // A ferrisson waiter whose budget runs out, and a Java one that gives up.
    let timed_out = support::Elsewhere::new(client.get_fair_lock(name))
        .try_lock_for(Duration::from_millis(150), None)
        .await
        .unwrap();
    assert!(timed_out.is_none());
    let mut quitter = JavaFairLock::new(&server, name, 2).await;
    assert!(quitter.acquire().await.is_some());
    quitter.give_up().await;
    // The dead waiter may be gone already (its place ran out).
    let list = queue(&server, name).await.0;
    assert!(
        list.len() <= 3 && list.ends_with(&[j.owner().to_owned(), f]),
        "queue {list:?}"
    );
    for key in server_keys(&server).await {
        let ttl: i64 = server.raw().await.pttl(&key).await.unwrap();
        let persistent = key == name
            || key.starts_with("redisson_lock_queue:")
            || key.starts_with("redisson_lock_timeout:")
            || key.starts_with("ferrisson_token:")
            || key.starts_with("redisson_lock_token:");
        assert!(
            persistent || ttl > 0,
            "{key} has no TTL ({ttl}) while the lock is in use"
        );
    }

    holder.unlock().await.unwrap();
    j.lock(Duration::from_secs(5)).await; // after the dead waiter is dropped
    assert!(
        !queue(&server, name).await.0.iter().any(|o| o == j.owner()),
        "granted waiters leave the queue"
    );
    assert_eq!(j.release().await, Some(1));
    tokio::time::timeout(Duration::from_secs(5), f_granted)
        .await
        .expect("the ferrisson waiter is served after the Java one")
        .unwrap();
    f_release.send(()).unwrap();
    join_within(Duration::from_secs(5), [f_task], "F").await;
    assert_eq!(keys_left(&server).await, Vec::<String>::new());
    let left = server_keys(&server).await;
    assert_eq!(left.len(), 1, "only the fencing counter stays: {left:?}");
}

/// Every key on the server, but the live clients' identities.
async fn server_keys(server: &RedisServer) -> Vec<String> {
    let mut raw = server.raw().await;
    let mut keys: Vec<String> = raw.keys("*").await.unwrap();
    keys.retain(|k| !k.starts_with("ferrisson_client:"));
    keys
}

/// A ferrisson waiter that waits much longer than its turn (here W is 1 s) keeps its place, and
/// so do the Java waiter behind it and the ferrisson one behind that: the first one's calls keep
/// its turn ahead and the turns behind it W apart, so neither a grant nor a sweep drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_keep_their_place_past_their_turn_while_a_ferrisson_waiter_ahead_lives() {
    let server = RedisServer::start();
    let wait = Duration::from_secs(1);
    let client = support::builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .fair_lock_queue_timeout(Duration::from_millis(600))
        .fair_lock_thread_wait_time(wait)
        .build()
        .await
        .unwrap();
    let name = "long-wait";
    let holder = client.get_fair_lock(name).lock().await.unwrap();
    let (f_task, mut f_granted, f_release) = ferrisson_waiter(client.get_fair_lock(name));
    let f = queued(&server, name, 1).await.remove(0);
    let mut j = JavaFairLock::new(&server, name, 1).await.thread_wait(wait);
    assert!(j.acquire().await.is_some());
    let (g_task, mut g_granted, g_release) = ferrisson_waiter(client.get_fair_lock(name));
    let g = queued(&server, name, 3).await.remove(2);
    // All wait three times their share.
    tokio::time::sleep(wait * 3).await;
    let (list, turns) = queue(&server, name).await;
    let now = j.now_ms().await;
    assert_eq!(list, [&f, j.owner(), &g], "all keep their place");
    assert!(
        turns[&f] > now,
        "the live ferrisson waiter's turn lies ahead"
    );
    assert!(
        turns[j.owner()] - turns[&f] >= wait.as_millis() as i64,
        "the Java waiter's turn stays W after the ferrisson waiter's: {turns:?}"
    );
    assert!(f_granted.try_recv().is_err());
    holder.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), f_granted)
        .await
        .expect("the ferrisson waiter is served first")
        .unwrap();
    f_release.send(()).unwrap();
    join_within(Duration::from_secs(5), [f_task], "F").await;
    assert_eq!(
        j.acquire().await,
        None,
        "the Java waiter is served next, not dropped"
    );
    assert!(
        g_granted.try_recv().is_err(),
        "the ferrisson waiter behind the Java one overtook it"
    );
    assert_eq!(j.release().await, Some(1));
    tokio::time::timeout(Duration::from_secs(5), g_granted)
        .await
        .expect("the last waiter is served last")
        .unwrap();
    g_release.send(()).unwrap();
    join_within(Duration::from_secs(5), [g_task], "G").await;
    assert_eq!(keys_left(&server).await, Vec::<String>::new());
}

/// A ferrisson waiter that dies at the head of a free lock is dropped by the next ferrisson call
/// once its queue timeout has passed, and the Java waiter that becomes first is told at once
/// instead of sleeping until the dead waiter's turn (minutes) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_behind_a_dead_ferrisson_waiter_is_told_when_it_is_dropped() {
    let server = RedisServer::start();
    let (client, queue_timeout) = short_queue_client(&server).await;
    let name = "dead-ahead";
    let holder = client.get_fair_lock(name).lock().await.unwrap();
    let mut dead = HolderProcess::spawn(&server, name, queue_timeout.as_millis() as u64, "fair");
    let p = queued(&server, name, 1).await.remove(0);
    let mut j = JavaFairLock::new(&server, name, 1).await;
    assert!(j.acquire().await.is_some());
    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(j.channel()).await.unwrap();
    dead.kill().await;
    holder.unlock().await.unwrap(); // tells the dead head, unless its place ran out already
    tokio::time::sleep(queue_timeout + Duration::from_millis(100)).await;
    assert!(
        client
            .get_fair_lock(name)
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "the Java waiter is first"
    );
    assert_eq!(queue(&server, name).await.0, [j.owner()], "{p} is dropped");
    let told = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next())
        .await
        .expect("the Java waiter is told")
        .expect("a message");
    assert_eq!(told.get_payload::<String>().unwrap(), "0");
    assert_eq!(j.acquire().await, None);
    assert_eq!(j.release().await, Some(1));
    assert_eq!(keys_left(&server).await, Vec::<String>::new());
}
