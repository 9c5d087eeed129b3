//! Fencing tokens survive what Redis forgets: a new token is at least the server's clock in
//! microseconds, so a counter Redis lost (a restart without persistence, FLUSHALL, a DEL of the
//! counter) restarts above every token handed out before, for every kind that carries one; and
//! a counter ahead of the clock (a clock stepped back) goes on counting up from where it is.

mod support;

use std::time::Duration;

use ferrisson::{Client, MultiLock};
use redis::AsyncCommands;
use support::{RedisServer, client, eventually};

/// Every kind with a token: (what, token) of one grant each, released at once.
async fn grant_each(client: &Client, name: &str) -> Vec<(&'static str, u64)> {
    let mut tokens = Vec::new();
    let mut take = |what, guard: ferrisson::LockGuard| {
        tokens.push((what, guard.fencing_token()));
        guard
    };
    let g = take(
        "plain",
        client
            .get_lock(&format!("{name}:plain"))
            .lock()
            .await
            .unwrap(),
    );
    g.unlock().await.unwrap();
    let fenced = client.get_fenced_lock(&format!("{name}:fenced"));
    let g = take("fenced", fenced.lock_and_get_token().await.unwrap().1);
    g.unlock().await.unwrap();
    let g = take(
        "fair",
        client
            .get_fair_lock(&format!("{name}:fair"))
            .lock()
            .await
            .unwrap(),
    );
    g.unlock().await.unwrap();
    let rw = client.get_read_write_lock(&format!("{name}:rw"));
    let g = take("read", rw.read_lock().lock().await.unwrap());
    g.unlock().await.unwrap();
    let g = take("write", rw.write_lock().lock().await.unwrap());
    g.unlock().await.unwrap();
    let g = take(
        "mutex",
        client
            .get_mutex(&format!("{name}:mutex"))
            .lock()
            .await
            .unwrap(),
    );
    g.unlock().await.unwrap();
    let multi = MultiLock::new([
        client.get_lock(&format!("{name}:multi-a")),
        client.get_fair_lock(&format!("{name}:multi-b")),
    ]);
    let g = multi.lock().await.unwrap();
    for part in g.parts() {
        tokens.push(("multi part", part.fencing_token()));
    }
    g.unlock().await.unwrap();
    let permits = client.get_permit_expirable_semaphore(&format!("{name}:permits"));
    permits.try_set_permits(2).await.unwrap();
    let p = permits.acquire().await.unwrap();
    tokens.push(("permit", p.fencing_token()));
    p.release().await.unwrap();
    tokens
}

/// Every token after is above every token before, kind by kind (and above all of them).
fn above(before: &[(&str, u64)], after: &[(&str, u64)]) {
    let highest = before.iter().map(|(_, t)| *t).max().unwrap();
    for (what, token) in after {
        assert!(
            *token > highest,
            "{what}: token {token} after, not above {highest} handed out before ({before:?})"
        );
    }
}

async fn wait_until_back(client: &Client) {
    let probe = client.get_lock("probe");
    assert!(
        eventually(Duration::from_secs(10), || async {
            probe.is_locked().await.is_ok()
        })
        .await,
        "the client reconnects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_never_brings_a_token_back() {
    let mut server = RedisServer::start();
    let client = client(&server).await;
    let mut before = grant_each(&client, "restart").await;
    before.extend(grant_each(&client, "restart").await);
    server.restart(); // empty: no persistence
    wait_until_back(&client).await;
    let after = grant_each(&client, "restart").await;
    above(&before, &after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_and_a_deleted_counter_never_bring_a_token_back() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let before = grant_each(&client, "forgot").await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
    let after = grant_each(&client, "forgot").await;
    above(&before, &after);

    // The counter alone deleted (an eviction, a DEL by hand), right after a grant.
    let lock = client.get_lock("forgot:del");
    let first = lock.lock().await.unwrap();
    let token = first.fencing_token();
    first.unlock().await.unwrap();
    let _: () = raw.del(lock.token_counter_key()).await.unwrap();
    let next = lock.lock().await.unwrap();
    assert!(next.fencing_token() > token);
    next.unlock().await.unwrap();
}

/// The counter ahead of the clock (as after the clock stepped back, or more grants than
/// microseconds): tokens go on from the counter, one by one, never back to the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_ahead_of_the_clock_goes_on_counting() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let ahead = secs * 1_000_000 + micros + 1_000_000_000_000; // about 11.6 days ahead
    for (i, name) in ["ahead:plain", "ahead:fenced"].into_iter().enumerate() {
        let lock = client.get_lock(name);
        let counter = lock.token_counter_key();
        let _: () = raw.set(&counter, ahead).await.unwrap();
        let fenced = client.get_fenced_lock(name);
        for k in 1..=3u64 {
            let guard = if i == 0 {
                lock.lock().await.unwrap()
            } else {
                fenced.lock_and_get_token().await.unwrap().1
            };
            assert_eq!(guard.fencing_token(), ahead + k, "{name}");
            guard.unlock().await.unwrap();
        }
        let now: u64 = raw.get(&counter).await.unwrap();
        assert_eq!(now, ahead + 3, "the counter ends at the last token");
        let _: () = raw.set(&counter, ahead).await.unwrap();
        let _: () = raw
            .del(format!("redisson_lock_token:{{{name}}}"))
            .await
            .unwrap();
    }
    // Every kind, each from its name's slot counter set ahead (names may share a slot, so a
    // counter may serve several grants): every token counts on from the counter.
    let suffixes = [
        "plain", "fenced", "fair", "rw", "mutex", "multi-a", "multi-b", "permits",
    ];
    for suffix in suffixes {
        let counter = client
            .get_lock(&format!("kinds:{suffix}"))
            .token_counter_key();
        let _: () = raw.set(&counter, ahead).await.unwrap();
    }
    for (what, token) in grant_each(&client, "kinds").await {
        assert!(
            token > ahead && token <= ahead + 20,
            "{what}: {token} does not count on from {ahead}"
        );
    }
}

/// A Java `RFencedLock` takes its tokens from `redisson_lock_token:{name}` by INCR. A fenced
/// grant of ferrisson leaves that counter at its token, so after both counters were lost the
/// next grants of both clients still go up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_fenced_tokens_continue_above_across_a_counter_loss() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let name = "java-loss";
    let java_counter = format!("redisson_lock_token:{{{name}}}");
    let fenced = client.get_fenced_lock(name);
    let (first, guard) = fenced.lock_and_get_token().await.unwrap();
    guard.unlock().await.unwrap();
    let java_first: u64 = raw.incr(&java_counter, 1).await.unwrap();
    assert_eq!(java_first, first + 1, "Java continues above ferrisson");
    let _: () = raw
        .del(&[fenced.token_counter_key(), java_counter.clone()])
        .await
        .unwrap();
    let (second, guard) = fenced.lock_and_get_token().await.unwrap();
    guard.unlock().await.unwrap();
    assert!(second > java_first, "{second} after {java_first}");
    let java_second: u64 = raw.incr(&java_counter, 1).await.unwrap();
    assert_eq!(java_second, second + 1);
    let (third, guard) = fenced.lock_and_get_token().await.unwrap();
    guard.unlock().await.unwrap();
    assert!(third > java_second);
}

/// Contenders on three clients loop lock/unlock while the server restarts empty: no token is
/// ever handed out twice, and every grant after the restart carries a token above every grant
/// before it. (Holds that vanish with the restart cannot keep their exclusion: only tokens can.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_across_a_restart_never_share_a_token() {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    let mut server = RedisServer::start();
    let grants: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = support::builder(&server)
            .response_timeout(Duration::from_millis(300))
            .connection_timeout(Duration::from_millis(300))
            .build()
            .await
            .unwrap();
        for _ in 0..2 {
            let lock = client.get_lock("chaos:restart");
            let (grants, stop) = (grants.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(Some(guard)) = lock.try_lock_for(Duration::from_millis(200), None).await
                    else {
                        continue; // the server is away, or busy: try again
                    };
                    grants
                        .lock()
                        .unwrap()
                        .push((Instant::now(), guard.fencing_token()));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = guard.unlock().await; // may find the hold gone with the restart
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let killed = Instant::now();
    server.restart();
    let back = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    support::join_within(Duration::from_secs(10), tasks, "contenders stop").await;

    let grants = grants.lock().unwrap().clone();
    let mut tokens: Vec<u64> = grants.iter().map(|(_, t)| *t).collect();
    tokens.sort_unstable();
    let total = tokens.len();
    tokens.dedup();
    assert_eq!(tokens.len(), total, "a token was handed out twice");
    let before: Vec<u64> = grants
        .iter()
        .filter(|(at, _)| *at < killed)
        .map(|(_, t)| *t)
        .collect();
    let after: Vec<u64> = grants
        .iter()
        .filter(|(at, _)| *at > back)
        .map(|(_, t)| *t)
        .collect();
    assert!(
        !before.is_empty() && !after.is_empty(),
        "grants on both sides"
    );
    let highest = before.iter().max().unwrap();
    assert!(
        after.iter().all(|t| t > highest),
        "a grant after the restart went below one before it"
    );
    eprintln!(
        "{} grants before the restart, {} after",
        before.len(),
        after.len()
    );
}

/// A counter that is no whole number a Lua script can count on exactly (a fraction, hex, one at
/// or beyond 2^53) is refused as `WrongType` and left as it was, as INCR would leave it: a token
/// made from it could repeat (2^53 + 1 is 2^53 as a Lua number).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_no_script_can_count_on_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    for (i, bad) in ["1.5", "0x10", " 12", "9007199254740992", "1e300"]
        .into_iter()
        .enumerate()
    {
        let plain = client.get_lock(&format!("bad-counter:{i}"));
        let fair = client.get_fair_lock(&format!("bad-counter:{i}"));
        let counter = plain.token_counter_key();
        let _: () = raw.set(&counter, bad).await.unwrap();
        for err in [
            plain.lock().await.unwrap_err(),
            fair.lock().await.unwrap_err(),
        ] {
            assert!(
                matches!(&err, ferrisson::Error::WrongType { key } if *key == counter),
                "{bad}: {err:?}"
            );
        }
        let left: String = raw.get(&counter).await.unwrap();
        assert_eq!(left, bad, "the counter is left as it was");
        let locked: bool = raw.exists(format!("bad-counter:{i}")).await.unwrap();
        assert!(!locked, "{bad}: the lock was not taken");
    }
}
