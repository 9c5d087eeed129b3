//! RPermitExpirableSemaphore: never more permits out than there are, permits of a dead or stalled
//! holder come back within one lease (and a late release adds none), renewal in batches,
//! Redisson's layout and a Java client sharing the permits, cancellation, bad input.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::Error;
use redis::AsyncCommands;
use support::{
    HolderProcess, Mode, Proxy, RedisServer, builder, builder_for, client, eventually, join_within,
};

const CHANNEL: &str = "redisson_sc:{slots}";
const TIMEOUTS: &str = "{slots}:timeout";

/// The permit ids out, with their expiry (epoch ms).
async fn out(server: &RedisServer) -> Vec<(String, i64)> {
    let mut raw = server.raw().await;
    raw.zrange_withscores(TIMEOUTS, 0, -1).await.unwrap()
}

async fn server_ms(server: &RedisServer) -> i64 {
    let mut raw = server.raw().await;
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    s * 1000 + us / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_permits_out_than_the_semaphore_has_and_tokens_never_repeat() {
    const PERMITS: i64 = 3;
    let server = RedisServer::start();
    let holding = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = client(&server).await;
        if c == 0 {
            let semaphore = client.get_permit_expirable_semaphore("slots");
            assert!(semaphore.try_set_permits(PERMITS as u64).await.unwrap());
        }
        for t in 0..4 {
            let semaphore = client.get_permit_expirable_semaphore("slots");
            let (holding, most, tokens) = (holding.clone(), most.clone(), tokens.clone());
            // Mixed sizes: some tasks take two permits in one step.
            let n: u64 = if (c + t) % 3 == 0 { 2 } else { 1 };
            tasks.push(tokio::spawn(async move {
                for _ in 0..12 {
                    let guard = if n == 1 {
                        semaphore.acquire().await.unwrap()
                    } else {
                        semaphore.acquire_many(n).await.unwrap()
                    };
                    assert_eq!(guard.ids().len() as u64, n);
                    let now = holding.fetch_add(n as i64, Ordering::SeqCst) + n as i64;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= PERMITS, "{now} permits out of {PERMITS}");
                    tokens.lock().unwrap().push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    holding.fetch_sub(n as i64, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "contenders").await;
    let tokens = tokens.lock().unwrap().clone();
    let distinct: HashSet<u64> = tokens.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        tokens.len(),
        "a fencing token was handed out twice"
    );
    eprintln!(
        "at most {} of {PERMITS} permits were out at once; {} grants",
        most.load(Ordering::SeqCst),
        tokens.len()
    );
    let semaphore = client(&server)
        .await
        .get_permit_expirable_semaphore("slots");
    assert_eq!(semaphore.available_permits().await.unwrap(), PERMITS);
    assert!(out(&server).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_gives_its_permit_back_within_one_lease_without_polling() {
    const LEASE_MS: u64 = 1_000;
    let server = RedisServer::start();
    let here = support::message_only_client(&server).await;
    let semaphore = here.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let mut holder = HolderProcess::spawn(&server, "slots", LEASE_MS, "permit");
    let token = holder.locked(Duration::from_secs(10)).await;
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            let got = semaphore
                .try_acquire_for(1, Duration::from_secs(20), None)
                .await;
            (Instant::now(), got)
        })
    };
    server.wait_subscribers(CHANNEL, 1).await;
    // The holder lives on for two of its leases: its renewals keep the permit.
    tokio::time::sleep(Duration::from_millis(2 * LEASE_MS)).await;
    assert!(!waiter.is_finished(), "the live holder's permit was taken");
    holder.kill().await;
    let killed = Instant::now();
    server.reset_stats().await;
    let (got_at, got) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter gets the dead holder's permit")
        .unwrap();
    let permit = got.unwrap().expect("a permit within the wait");
    let after = got_at - killed;
    let scripts = server.calls("evalsha").await;
    eprintln!("the permit came back {after:?} after the kill; {scripts} script calls meanwhile");
    assert!(permit.fencing_token() > token);
    assert!(
        after < Duration::from_millis(LEASE_MS + 1_000),
        "took {after:?} for a {LEASE_MS} ms lease"
    );
    // Woken at the dead permit's expiry, not by polling (the re-check interval is 30 s).
    assert!(scripts <= 3, "{scripts} script calls while waiting");
    permit.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
}

/// A holder cut off from Redis loses its permit when its lease runs out; the permit goes to
/// another; the cut-off holder's late release adds nothing (Redisson once gave it back twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_sees_its_permit_lost_and_its_late_release_adds_none() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let cut_off = builder_for(&proxy.url())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let other = client(&server).await;
    let theirs = other.get_permit_expirable_semaphore("slots");
    assert!(theirs.try_set_permits(2).await.unwrap());
    let mine = cut_off
        .get_permit_expirable_semaphore("slots")
        .acquire()
        .await
        .unwrap();
    let fixed = cut_off
        .get_permit_expirable_semaphore("slots")
        .acquire_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    proxy.set(Mode::Blackhole);
    tokio::time::timeout(Duration::from_secs(3), mine.lost())
        .await
        .expect("the renewed permit is reported lost within its lease");
    tokio::time::timeout(Duration::from_secs(3), fixed.lost())
        .await
        .expect("the fixed-lease permit is lost when its lease runs out");
    assert!(mine.is_lost() && fixed.is_lost());
    let both = theirs
        .try_acquire_for(2, Duration::from_secs(3), None)
        .await
        .unwrap()
        .expect("the expired permits came back");
    proxy.set(Mode::Pass);
    for late in [mine, fixed] {
        assert!(
            matches!(
                late.release().await,
                Err(Error::PermitLost {
                    lost: 1,
                    held: 1,
                    ..
                })
            ),
            "a late release reports the loss"
        );
    }
    assert_eq!(
        theirs.available_permits().await.unwrap(),
        0,
        "late releases added permits"
    );
    both.release().await.unwrap();
    assert_eq!(theirs.available_permits().await.unwrap(), 2);
}

/// A permit whose lease ran out while nothing touched the semaphore is still in its zset; a
/// release of it then reports the loss: it comes back once, as an expired permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_lease_ran_out_reports_the_loss() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let late = semaphore
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(late.is_lost());
    assert_eq!(out(&server).await.len(), 1, "expired, not yet taken back");
    assert!(matches!(
        late.release().await,
        Err(Error::PermitLost {
            lost: 1,
            held: 1,
            ..
        })
    ));
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert!(out(&server).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_permits_in_batches() {
    const GUARDS: usize = 250;
    let server = RedisServer::start();
    // Without takeover, whose presence confirmations (two a second while the client holds
    // anything) would count among the renewals.
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(3_000))
        .takeover_grace(None)
        .build()
        .await
        .unwrap();
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(GUARDS as u64 + 1).await.unwrap());
    let mut guards = Vec::new();
    for _ in 0..GUARDS {
        guards.push(semaphore.acquire().await.unwrap());
    }
    let first_expiry = out(&server).await.iter().map(|(_, e)| *e).min().unwrap();
    // Renewals come every second (a third of the 3 s lease): over 2.5 s at most 3 ticks, each
    // with ceil(250 / 100) = 3 script calls.
    server.reset_stats().await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let scripts = server.calls("evalsha").await;
    eprintln!("{scripts} script calls renewed {GUARDS} permits for 2.5 s");
    assert!((3..=9).contains(&scripts), "{scripts} renewal calls");
    let now = server_ms(&server).await;
    for (id, expiry) in out(&server).await {
        assert!(expiry > first_expiry, "{id} was not renewed");
        assert!(expiry > now + 1_500, "{id} expires in {} ms", expiry - now);
    }
    assert!(guards.iter().all(|g| !g.is_lost()));
    assert!(semaphore.try_acquire().await.unwrap().is_some(), "one left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_when_the_first_permit_out_expires() {
    let server = RedisServer::start();
    // Without takeover: the holder's presence confirmations would count among the waiter's
    // calls.
    let holder = builder(&server).takeover_grace(None).build().await.unwrap();
    let held = holder.get_permit_expirable_semaphore("slots");
    assert!(held.try_set_permits(1).await.unwrap());
    // Never released: it comes back when its lease runs out, with no message.
    let _forgotten = held
        .acquire_with_lease(Duration::from_millis(700))
        .await
        .unwrap();
    let waiter = support::message_only_client(&server).await;
    server.reset_stats().await;
    let started = Instant::now();
    let got = waiter
        .get_permit_expirable_semaphore("slots")
        .try_acquire_for(1, Duration::from_secs(10), None)
        .await
        .unwrap()
        .expect("the expired permit");
    let waited = started.elapsed();
    let scripts = server.calls("evalsha").await;
    eprintln!("got the expired permit after {waited:?} with {scripts} script calls");
    assert!(waited < Duration::from_millis(2_000), "waited {waited:?}");
    // The first try, the try once subscribed (and one more if the subscription's confirmation
    // wakes it), the try at the expiry: a poller would have made dozens.
    assert!(scripts <= 4, "{scripts} script calls: polling");
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_permits_come_back_in_every_script_and_say_so() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .await
        .unwrap();
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let renewed = semaphore.acquire().await.unwrap();
    let _expiring = semaphore
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    let mut listener = support::Listener::on(&server, CHANNEL).await;
    // Nothing but the watchdog's renewal of `renewed` touches the semaphore from here.
    let message = listener
        .next_within(Duration::from_secs(3))
        .await
        .expect("the renewal gave the expired permit back and said so");
    assert_eq!(message, "2");
    let mut raw = server.raw().await;
    let count: i64 = raw.get("slots").await.unwrap();
    assert_eq!(count, 2, "the expired permit is free again");
    assert_eq!(out(&server).await.len(), 1);
    renewed.release().await.unwrap();
    assert_eq!(listener.next().await, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_and_operations_follow_redisson() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut listener = support::Listener::on(&server, CHANNEL).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert!(semaphore.try_set_permits(4).await.unwrap());
    assert!(!semaphore.try_set_permits(9).await.unwrap(), "set once");
    assert_eq!(listener.next().await, "4");
    let lease = Duration::from_secs(20);
    let before = server_ms(&server).await;
    let three = semaphore
        .try_acquire_for(3, Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .expect("three free");
    let after = server_ms(&server).await;
    let mut raw = server.raw().await;
    let count: String = raw.get("slots").await.unwrap();
    assert_eq!(count, "1", "a string count named like the semaphore");
    let ids = out(&server).await;
    assert_eq!(ids.len(), 3);
    for (id, expiry) in &ids {
        assert!(three.ids().contains(id));
        assert_eq!(id.len(), 32, "16 random bytes in hex, like Redisson's");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(
            (before + 20_000..=after + 20_000).contains(expiry),
            "expiry by the server's clock"
        );
    }
    assert!(
        semaphore
            .try_acquire_for(2, Duration::ZERO, None)
            .await
            .unwrap()
            .is_none()
    );
    // update_lease: a fixed lease from now, no longer renewed.
    three.update_lease(Duration::from_secs(60)).await.unwrap();
    let now = server_ms(&server).await;
    for (_, expiry) in out(&server).await {
        assert!((now + 59_000..=now + 60_000).contains(&expiry));
    }
    // release_by_id gives back one permit of the three; the guard's own release then reports
    // the one it no longer had and gives back the other two, once.
    semaphore.release_by_id(&three.ids()[0]).await.unwrap();
    assert_eq!(listener.next().await, "2");
    assert!(matches!(
        semaphore.release_by_id(&three.ids()[0]).await,
        Err(Error::UnknownPermit { .. })
    ));
    assert!(matches!(
        semaphore
            .release_by_id("0123456789abcdef0123456789abcdef")
            .await,
        Err(Error::UnknownPermit { .. })
    ));
    assert!(matches!(
        three.release().await,
        Err(Error::PermitLost {
            lost: 1,
            held: 3,
            ..
        })
    ));
    assert_eq!(listener.next().await, "4");
    assert_eq!(semaphore.add_permits(-1).await.unwrap(), 3);
    assert_eq!(listener.next().await, "3");
    assert_eq!(semaphore.add_permits(2).await.unwrap(), 5);
    assert_eq!(semaphore.available_permits().await.unwrap(), 5);
    // More than the semaphore has in all: an error, not an endless wait.
    let held = semaphore.acquire().await.unwrap();
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(2), semaphore.acquire_many(6)).await,
        Ok(Err(Error::InvalidArgument(_)))
    ));
    held.release().await.unwrap();
    let keys: Vec<String> = raw.keys("*").await.unwrap();
    assert!(
        keys.iter().all(|k| k == "slots"
            || k.starts_with("ferrisson_token:")
            || k.starts_with("ferrisson_client:")),
        "left behind: {keys:?}"
    );
}

/// Permits and locks draw tokens from their cluster slot's counter: a lock in the semaphore's
/// slot (a lock cannot have the semaphore's own name: that key is the count) is in one sequence
/// with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_tokens_and_lock_tokens_of_a_slot_increase_together() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let mut last = 0;
    for round in 0..3 {
        let guard = client.get_lock("{slots}:lock").lock().await.unwrap();
        let lock_token = guard.fencing_token();
        guard.unlock().await.unwrap();
        let permit = semaphore.acquire().await.unwrap();
        let permit_token = permit.fencing_token();
        permit.release().await.unwrap();
        assert!(
            last < lock_token && lock_token < permit_token,
            "round {round}"
        );
        last = permit_token;
    }
}

/// `acquire_many` waits for all its permits: it never holds some while waiting for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_takes_all_or_none() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let one = semaphore.acquire().await.unwrap();
    let many = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire_many(3).await })
    };
    server.wait_subscribers(CHANNEL, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        semaphore.available_permits().await.unwrap(),
        2,
        "none taken while waiting"
    );
    let other = semaphore.acquire().await.unwrap();
    one.release().await.unwrap();
    other.release().await.unwrap();
    let all = tokio::time::timeout(Duration::from_secs(3), many)
        .await
        .expect("woken by the releases")
        .unwrap()
        .unwrap();
    assert_eq!(all.ids().len(), 3);
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    drop(all);
    assert!(
        eventually(Duration::from_secs(3), || async {
            semaphore.available_permits().await.unwrap() == 3
        })
        .await,
        "a dropped guard gives its permits back"
    );
}

/// Redisson's own logic, written out here: acquire takes `n` when free (after giving back
/// permits expired by the client's clock) and adds the ids with their expiry; release removes
/// the id and, when it was there, adds one permit and publishes the count.
const JAVA_ACQUIRE: &str = "
local now = tonumber(ARGV[2])
local gone = redis.call('zrangebyscore', KEYS[2], 0, now)
if #gone > 0 then
  redis.call('zrem', KEYS[2], unpack(gone))
  redis.call('incrby', KEYS[1], #gone)
end
local free = tonumber(redis.call('get', KEYS[1]) or '0')
if free >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[1]), ARGV[3])
  return 1
end
return 0";
const JAVA_RELEASE: &str = "
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 then
  local free = redis.call('incrby', KEYS[1], 1)
  redis.call('publish', KEYS[3], free)
  return 1
end
return 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_shares_the_permits_both_ways() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let mut raw = server.raw().await;
    let java_id = "00112233445566778899aabbccddeeff";
    let java_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let taken: i64 = redis::Script::new(JAVA_ACQUIRE)
        .key("slots")
        .key(TIMEOUTS)
        .arg(30_000)
        .arg(java_now())
        .arg(java_id)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(taken, 1);
    let mine = semaphore.acquire().await.unwrap();
    assert!(
        semaphore.try_acquire().await.unwrap().is_none(),
        "Java holds the other"
    );
    // A ferrisson waiter wakes on the Java release's message.
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            semaphore
                .try_acquire_for(1, Duration::from_secs(10), None)
                .await
        })
    };
    server.wait_subscribers(CHANNEL, 1).await;
    let released: i64 = redis::Script::new(JAVA_RELEASE)
        .key("slots")
        .key(TIMEOUTS)
        .key(CHANNEL)
        .arg(java_id)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(released, 1);
    let theirs = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the Java release's message")
        .unwrap()
        .unwrap()
        .expect("the permit");
    // A Java waiter (a raw subscriber) hears ferrisson's release, and its acquire then works.
    let mut java_waiter = support::Listener::on(&server, CHANNEL).await;
    mine.release().await.unwrap();
    assert_eq!(java_waiter.next().await, "1");
    let taken: i64 = redis::Script::new(JAVA_ACQUIRE)
        .key("slots")
        .key(TIMEOUTS)
        .arg(30_000)
        .arg(java_now())
        .arg(java_id)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(taken, 1);
    // A Java permit is given back by id from ferrisson.
    semaphore.release_by_id(java_id).await.unwrap();
    theirs.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
}

/// Acquires dropped while their script is on its way, and acquires whose replies are lost: no
/// permit is left taken by a caller that did not get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_unanswered_acquires_leave_no_permit_taken() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let proxy = Proxy::start(server.port()).await;
    let proxied = builder_for(&proxy.url())
        .response_timeout(Duration::from_millis(400))
        .build()
        .await
        .unwrap();
    let through = proxied.get_permit_expirable_semaphore("slots");

    // Replies come 100 ms late: each acquire runs on the server, its caller gives up at 20 ms.
    proxy.set(Mode::Delay(Duration::from_millis(100)));
    for round in 0..10 {
        let before = server.calls("evalsha").await;
        let gave_up =
            tokio::time::timeout(Duration::from_millis(20), through.acquire_many(2)).await;
        assert!(gave_up.is_err(), "round {round}: answered within 20 ms");
        assert!(
            server.calls_reach("evalsha", before + 1).await,
            "the acquire ran"
        );
    }
    proxy.set(Mode::Pass);
    let back = || async {
        semaphore.available_permits().await.unwrap() == 2 && out(&server).await.is_empty()
    };
    assert!(
        eventually(Duration::from_secs(5), back).await,
        "cancelled acquires kept permits: {} free of 2",
        semaphore.available_permits().await.unwrap()
    );

    // Replies lost: the acquire ran on the server, its caller saw an error.
    server.reset_stats().await;
    proxy.set(Mode::DropReplies);
    assert!(through.try_acquire().await.is_err());
    assert!(server.calls_reach("evalsha", 1).await, "the acquire ran");
    proxy.set(Mode::Pass);
    assert!(
        eventually(Duration::from_secs(5), back).await,
        "the unanswered acquire kept its permit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let invalid = |r: Result<Option<ferrisson::PermitGuard>, Error>| {
        matches!(r, Err(Error::InvalidArgument(_)))
    };
    for n in [0, 10_001, u64::MAX] {
        assert!(
            invalid(semaphore.try_acquire_for(n, Duration::ZERO, None).await),
            "{n}"
        );
        assert!(matches!(
            semaphore.acquire_many(n).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        semaphore.try_set_permits(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(invalid(
        semaphore
            .try_acquire_for(1, Duration::ZERO, Some(Duration::ZERO))
            .await
    ));
    assert!(matches!(
        semaphore
            .acquire_with_lease(Duration::from_micros(10))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    for id in ["", "two words", &"x".repeat(2_000)] {
        assert!(matches!(
            semaphore.release_by_id(id).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    let guard = semaphore.acquire().await.unwrap();
    assert!(matches!(
        guard.update_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    guard.release().await.unwrap();
    for name in ["", "a{b", "a{}b"] {
        let bad = client.get_permit_expirable_semaphore(name);
        assert!(invalid(bad.try_acquire().await), "{name}");
        assert!(matches!(
            bad.available_permits().await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert!(out(&server).await.is_empty());

    // Keys of another type: refused, untouched.
    let mut raw = server.raw().await;
    let _: () = raw.hset("a-hash", "f", 1).await.unwrap();
    let _: () = raw.set("a-word", "precious").await.unwrap();
    let _: () = raw.set("ok", 5).await.unwrap();
    let _: () = raw.set("{ok}:timeout", "not a zset").await.unwrap();
    for key in ["a-hash", "a-word", "ok"] {
        let semaphore = client.get_permit_expirable_semaphore(key);
        let wrong = |r: Result<Option<ferrisson::PermitGuard>, Error>| {
            matches!(r, Err(Error::WrongType { .. }))
        };
        assert!(wrong(semaphore.try_acquire().await), "{key}");
        assert!(
            matches!(
                semaphore.try_set_permits(1).await,
                Err(Error::WrongType { .. })
            ),
            "{key}"
        );
        assert!(matches!(
            semaphore.add_permits(1).await,
            Err(Error::WrongType { .. })
        ));
        assert!(matches!(
            semaphore.available_permits().await,
            Err(Error::WrongType { .. })
        ));
        assert!(matches!(
            semaphore
                .release_by_id("00112233445566778899aabbccddeeff")
                .await,
            Err(Error::WrongType { .. })
        ));
    }
    let word: String = raw.get("a-word").await.unwrap();
    assert_eq!(word, "precious");
    let ok: i64 = raw.get("ok").await.unwrap();
    assert_eq!(ok, 5);
    let hash: i64 = raw.hget("a-hash", "f").await.unwrap();
    assert_eq!(hash, 1);
}
