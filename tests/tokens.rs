//! Fencing tokens when the client's view of its holds is wrong: a hold the server still has but
//! the client lost track of (a lost acquire reply whose repair failed too, a failed unlock) is
//! never answered as "one more hold" of a new guard. Every new guard's token is greater than
//! every token granted before, for every kind of lock.

mod support;

use std::time::Duration;

use ferrisson::{Client, RLock};
use redis::AsyncCommands;
use support::{Mode, Proxy, RedisServer, builder_for, client, eventually};

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

fn handle(client: &Client, kind: Kind, name: &str) -> RLock {
    match kind {
        Kind::Plain => client.get_lock(name),
        Kind::Fair => client.get_fair_lock(name),
        Kind::Fenced => (*client.get_fenced_lock(name)).clone(),
        Kind::Read => client.get_read_write_lock(name).read_lock(),
        Kind::Write => client.get_read_write_lock(name).write_lock(),
    }
}

/// A fencing counter ahead of the server's clock in microseconds (2^52, about the year 2112):
/// tokens then count on from the counter one by one, which a test can foresee.
const AHEAD: u64 = 1 << 52;

/// Writes into Redis a hold of `owner` that its client knows nothing of, as a release or
/// repair that never reached the server leaves it: two holds, granted with a token at most
/// `AHEAD + 41`.
async fn plant_leftover(server: &RedisServer, lock: &RLock, kind: Kind, owner: &str) {
    let name = lock.name();
    let mut raw = server.raw().await;
    let _: () = raw.set(lock.token_counter_key(), AHEAD + 41).await.unwrap();
    if let Kind::Fenced = kind {
        let _: () = raw
            .set(format!("redisson_lock_token:{{{name}}}"), AHEAD + 41)
            .await
            .unwrap();
    }
    let mut hset = redis::cmd("HSET");
    hset.arg(name);
    match kind {
        Kind::Plain | Kind::Fair | Kind::Fenced => hset.arg(owner).arg(2),
        Kind::Read => hset.arg("mode").arg("read").arg(owner).arg(2),
        Kind::Write => hset
            .arg("mode")
            .arg("write")
            .arg(format!("{owner}:write"))
            .arg(2),
    };
    let _: () = hset.query_async(&mut raw).await.unwrap();
    let _: () = raw.pexpire(name, 30_000).await.unwrap();
    if let Kind::Read = kind {
        for k in 1..=2 {
            let key = format!("{{{name}}}:{owner}:rwlock_timeout:{k}");
            let _: () = raw.pset_ex(key, 1, 30_000).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_hold_is_replaced_by_a_fresh_grant_for_every_kind() {
    let server = RedisServer::start();
    for kind in KINDS {
        let name = format!("leftover-{kind:?}");
        // A new client, so the handle below is its first owner, `<client-id>:1`.
        let client = client(&server).await;
        let owner = format!("{}:1", client.id());
        let lock = handle(&client, kind, &name);
        plant_leftover(&server, &lock, kind, &owner).await;

        let guard = lock.lock().await.unwrap();
        assert_eq!(
            guard.fencing_token(),
            AHEAD + 42,
            "{kind:?}: a new guard gets a new token, not the leftover's"
        );
        assert_eq!(
            guard.hold_count().await.unwrap(),
            1,
            "{kind:?}: the leftover holds are gone, the new guard holds once"
        );
        let again = guard.reenter().await.unwrap();
        assert_eq!(
            again.fencing_token(),
            AHEAD + 42,
            "{kind:?}: a reentrant hold of a live guard shares its token"
        );
        again.unlock().await.unwrap();
        guard.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap(), "{kind:?}: freed");
        if let Kind::Read = kind {
            let mut raw = server.raw().await;
            let left: Vec<String> = raw.keys(format!("{{{name}}}:*")).await.unwrap();
            assert!(left.is_empty(), "leftover read timeouts remain: {left:?}");
        }
    }
}

/// A client behind a fault proxy, with a short response timeout.
async fn proxied(server: &RedisServer) -> (Proxy, Client) {
    let proxy = Proxy::start(server.port()).await;
    // A call that finds the connection being reopened waits up to the reconnect wait for it
    // (tests/reconnect_ride.rs): short here, so that a blackholed repair gives up soon.
    let client = builder_for(&proxy.url())
        .response_timeout(Duration::from_millis(400))
        .connection_timeout(Duration::from_millis(400))
        .reconnect_wait(Duration::from_millis(800))
        .build()
        .await
        .unwrap();
    (proxy, client)
}

/// Cuts every connection through `proxy` (throwing away whatever they held back), lets traffic
/// pass again, and waits until `client` has its connection back (the first command on a cut
/// connection fails, and the client reconnects).
async fn reconnect(proxy: &Proxy, client: &Client) {
    proxy.set(Mode::Reset);
    proxy.set(Mode::Pass);
    let probe = client.get_lock("probe");
    assert!(
        eventually(Duration::from_secs(5), || async {
            probe.is_locked().await.is_ok()
        })
        .await,
        "the client reconnects"
    );
}

/// The path: a read acquire runs on the server but its reply is lost; the repair that
/// should take the hold back never reaches the server either. The owner's next read acquire
/// must not present that leftover as a new guard with whatever token the counter holds (which
/// another reader's grant moved meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_share_a_token_after_a_lost_reply_and_a_failed_repair() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    let first = client.get_read_write_lock("shared-token");
    let second = client.get_read_write_lock("shared-token");
    // The first owner is a task of its own, which locks again below.
    let first = support::Elsewhere::rw(&first).0;

    server.reset_stats().await;
    proxy.set(Mode::DropReplies);
    let attempt = tokio::spawn({
        let read = first.clone();
        async move { read.lock().await }
    });
    assert!(
        server.calls_reach("evalsha", 1).await,
        "the read acquire reached the server"
    );
    // The acquire ran; now nothing gets through: its repair hangs and fails.
    proxy.set(Mode::Blackhole);
    let failed = tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .expect("the acquire gives up within its timeouts")
        .unwrap();
    assert!(failed.is_err(), "the acquire's reply never came");
    reconnect(&proxy, &client).await;

    let mut raw = server.raw().await;
    let owner = format!("{}:1", client.id());
    let leftover: Option<u32> = raw.hget("shared-token", &owner).await.unwrap();
    // The background retry of the repair may already have removed it; either way the
    // property below must hold, and with the leftover still there it is the path under test.
    eprintln!("leftover read holds of the first owner: {leftover:?}");

    let other = second.read_lock().lock().await.unwrap();
    let again = first.lock().await.unwrap();
    assert_ne!(
        again.fencing_token(),
        other.fencing_token(),
        "two owners hold the same token"
    );
    assert!(again.fencing_token() > other.fencing_token());
    assert_eq!(again.hold_count().await.unwrap(), 1);
    again.unlock().await.unwrap();
    other.unlock().await.unwrap();
    // The first acquisition's leftover read hold, if the background removal had not taken it
    // yet, goes at its next try.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !first.is_locked().await.unwrap()
        })
        .await
    );
}

/// A lock is granted, its unlock fails (the server never answers and the release is lost with
/// the connection), and the same handle locks again: the new acquisition's token is a new one,
/// for every kind, and the old acquisition's leftover is gone before it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_unlock_is_never_followed_by_a_grant_with_the_old_token() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    for kind in KINDS {
        let name = format!("failed-unlock-{kind:?}");
        let lock = handle(&client, kind, &name);
        let guard = lock.lock().await.unwrap();
        let first = guard.fencing_token();

        proxy.set(Mode::Blackhole);
        let unlocked = tokio::time::timeout(Duration::from_secs(5), guard.unlock())
            .await
            .expect("the unlock gives up within its timeouts");
        assert!(unlocked.is_err(), "{kind:?}: the server never answered");
        reconnect(&proxy, &client).await;

        let again = lock.lock().await.unwrap();
        assert!(
            again.fencing_token() > first,
            "{kind:?}: token {} again after {first}",
            again.fencing_token()
        );
        assert_eq!(again.hold_count().await.unwrap(), 1, "{kind:?}");
        again.unlock().await.unwrap();
        // A new reader shares the lock with the old reader's leftover, which goes in the
        // background at the removal's next try since Redis answers again.
        assert!(
            eventually(Duration::from_secs(5), || async {
                !lock.is_locked().await.unwrap()
            })
            .await,
            "{kind:?}: freed"
        );
    }
}

/// The fields of a read-write lock's hash but `mode`, sorted.
async fn rw_fields(server: &RedisServer, name: &str) -> Vec<(String, String)> {
    let mut raw = server.raw().await;
    let mut fields: Vec<(String, String)> = raw.hgetall(name).await.unwrap();
    fields.retain(|(f, _)| f != "mode");
    fields.sort();
    fields
}

/// A read-write hold whose unlocks went unanswered, on one side or on both (a read nested in a
/// write's scope shares the writer's owner): the next acquisition is a new owner, granted once
/// the old one's leftovers are gone (removed in the background when Redis answers again), never
/// beside them. Neither a leftover read hold taken for its own (a write refused as an upgrade)
/// nor a late release reaching the new name can follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_hold_whose_unlocks_failed_is_never_met_by_the_next_acquisition() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    let rw = client.get_read_write_lock("rw-taint");

    // The read side's unlock goes unanswered; the task then writes.
    let read = rw.read_lock().lock().await.unwrap();
    let old = rw_fields(&server, "rw-taint").await;
    assert_eq!(old.len(), 1, "{old:?}");
    proxy.set(Mode::Blackhole);
    let unlocked = tokio::time::timeout(Duration::from_secs(5), read.unlock())
        .await
        .expect("the unlock gives up within its timeouts");
    assert!(unlocked.is_err());
    reconnect(&proxy, &client).await;
    let write = tokio::time::timeout(Duration::from_secs(5), rw.write_lock().lock())
        .await
        .expect("the write is not held up by the old read hold")
        .expect("not refused as an upgrade: the old read hold is not this owner's");
    let now = rw_fields(&server, "rw-taint").await;
    assert_eq!(now.len(), 1, "only the new owner's write hold: {now:?}");
    assert!(now[0].0.ends_with(":write") && !now[0].0.starts_with(&old[0].0));
    write.unlock().await.unwrap();
    assert!(!rw.read_lock().is_locked().await.unwrap());

    // Both sides' unlocks go unanswered (write, then a read nested in it).
    let write = rw.write_lock().lock().await.unwrap();
    let read = write.scope(rw.read_lock().lock()).await.unwrap();
    let old = rw_fields(&server, "rw-taint").await;
    assert_eq!(old.len(), 2, "{old:?}");
    proxy.set(Mode::Blackhole);
    for unlocked in [
        tokio::time::timeout(Duration::from_secs(5), read.unlock()).await,
        tokio::time::timeout(Duration::from_secs(5), write.unlock()).await,
    ] {
        assert!(unlocked.expect("gives up within its timeouts").is_err());
    }
    reconnect(&proxy, &client).await;
    let again = rw.read_lock().lock().await.unwrap();
    // A new reader is granted beside the old read hold (readers share) or after it; either way
    // the old holds go in the background, and the new reader's is under a new name.
    assert!(
        eventually(Duration::from_secs(5), || async {
            rw_fields(&server, "rw-taint").await.len() == 1
        })
        .await,
        "the old owner's holds are removed: {:?}",
        rw_fields(&server, "rw-taint").await
    );
    let now = rw_fields(&server, "rw-taint").await;
    assert!(old.iter().all(|(f, _)| f != &now[0].0), "a new name");
    again.unlock().await.unwrap();
    assert!(!rw.read_lock().is_locked().await.unwrap(), "freed");
}

/// The hold a failed unlock leaves behind does not wait for its lease: the client sets it right
/// as soon as Redis answers again, so other clients get the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_a_failed_unlock_leaves_is_taken_back_once_redis_answers() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    let lock = client.get_lock("taken-back");
    let guard = lock.lock().await.unwrap();
    proxy.set(Mode::Blackhole);
    assert!(guard.unlock().await.is_err());
    reconnect(&proxy, &client).await;
    let mut raw = server.raw().await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut raw = raw.clone();
            async move { !raw.exists::<_, bool>("taken-back").await.unwrap() }
        })
        .await,
        "the leftover of the failed unlock is still there (its lease is 30 s)"
    );
    let _: () = raw.ping().await.unwrap();
}

/// Review finding: the release a failed unlock sent may still reach Redis late (it sat in the
/// buffer of a connection the client gave up), after the same handle was granted the lock
/// again. The handle then locks under a new owner name, so the late release, played here by
/// running the release script for the old name, cannot take the new hold away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_of_a_failed_unlock_cannot_undo_the_next_grant() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    for kind in [Kind::Plain, Kind::Fair, Kind::Fenced] {
        let name = format!("late-release-{kind:?}");
        let lock = handle(&client, kind, &name);
        let guard = lock.lock().await.unwrap();
        let mut raw = server.raw().await;
        let fields: Vec<String> = raw.hkeys(&name).await.unwrap();
        let old_owner = fields[0].clone();

        proxy.set(Mode::Blackhole);
        assert!(guard.unlock().await.is_err());
        reconnect(&proxy, &client).await;

        let again = lock.lock().await.unwrap();
        let fields: Vec<String> = raw.hkeys(&name).await.unwrap();
        assert_eq!(fields.len(), 1, "{kind:?}: {fields:?}");
        assert_ne!(
            fields[0], old_owner,
            "{kind:?}: granted under the tainted owner name"
        );
        // The late release of the old hold arrives now.
        let late = redis::Script::new(include_str!("../lua/lock_release.lua"));
        let _: Option<i64> = late
            .key(&name)
            .key(format!("redisson_lock__channel:{{{name}}}"))
            .key(format!("ferrisson_lock_starving:{{{name}}}"))
            .key(format!("redisson_unlock_latch:{{{name}}}:late"))
            .arg(&old_owner)
            .arg(30_000)
            .arg(5_000)
            .arg("0")
            .arg(500)
            .invoke_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(
            again.hold_count().await.unwrap(),
            1,
            "{kind:?}: the late release took the new hold away"
        );
        again.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap(), "{kind:?}: freed");
    }
}

/// lock_acquire.lua's one-integer reply, on the script itself: a fresh grant is its token (at
/// least the server's clock in microseconds, so far above 1), a reentrant one 0, a busy lock `-2 - pttl`, which keeps "no TTL" (-1) apart from a
/// TTL of 0 (-2) and from every grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_acquire_answers_one_integer_that_no_two_outcomes_share() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let script = redis::Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/lock_acquire.lua")
    ));
    let acquire = |name: &str, owner: &str, stale: &str| {
        let mut inv = script.prepare_invoke();
        inv.key(name)
            .key("ferrisson_token:{t}")
            .arg(owner)
            .arg(30_000)
            .arg(stale);
        inv
    };
    let first: i64 = acquire("{t}a", "me", "1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert!(first > 1_000_000_000_000_000, "the clock in µs: {first}");
    let again: i64 = acquire("{t}a", "me", "0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(again, 0, "one more hold");
    let holds: i64 = raw.hget("{t}a", "me").await.unwrap();
    assert_eq!(holds, 2);
    let replaced: i64 = acquire("{t}a", "me", "1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert!(replaced > first, "a stale hold gets a fresh token");

    let busy: i64 = acquire("{t}a", "you", "1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    let pttl: i64 = raw.pttl("{t}a").await.unwrap();
    assert!(
        busy <= -2 && -2 - busy >= pttl && -2 - busy <= 30_000,
        "busy {busy}, pttl {pttl}"
    );

    // A Java holder that set no TTL.
    let _: () = raw.hset("{t}b", "java", 1).await.unwrap();
    let busy: i64 = acquire("{t}b", "me", "1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(busy, -1);
    let counter: i64 = raw.get("ferrisson_token:{t}").await.unwrap();
    assert_eq!(counter, replaced, "a busy lock takes no token");
}
