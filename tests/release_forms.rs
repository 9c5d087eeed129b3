//! The plain lock's release script in its two forms: the short one a first send of the owner's
//! last hold takes, and the full one every other release and every resend takes.

mod support;

use redis::AsyncCommands;
use std::time::Duration;

use support::{Listener, Mode, Proxy, RedisServer, builder_for, client, eventually};

const CHANNEL: &str = "redisson_lock__channel:{forms}";

/// The release script as the library sends it: short (lock, channel, starving waiters;
/// owner, handed lease) or full.
fn release(owner: &str, full: Option<(&str, &str)>) -> redis::ScriptInvocation<'static> {
    static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
    let script = SCRIPT.get_or_init(|| redis::Script::new(include_str!("../lua/lock_release.lua")));
    let mut inv = script.prepare_invoke();
    inv.key("forms")
        .key(CHANNEL)
        .key("ferrisson_lock_starving:{forms}");
    if let Some((request, resend)) = full {
        inv.key(format!("redisson_unlock_latch:{{forms}}:{request}"));
        inv.arg(owner).arg(30_000).arg(5_000).arg(resend).arg(500);
    } else {
        inv.arg(owner).arg(500);
    }
    inv
}

async fn latches(raw: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    raw.keys("redisson_unlock_latch:*").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_release_of_the_last_hold_frees_and_its_full_resend_finds_it_gone() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let mut listener = Listener::on(&server, CHANNEL).await;
    let _: () = raw.hset("forms", "me", 1).await.unwrap();

    let first: Option<i64> = release("me", None).invoke_async(&mut raw).await.unwrap();
    assert_eq!(first, Some(1));
    assert_eq!(listener.next().await, "0");
    assert!(!raw.exists::<_, bool>("forms").await.unwrap());
    // The connection dropped under the short send: the resend, in full form, finds no hold and
    // no latch, and says so (2), which the client reads as freed.
    let resent: Option<i64> = release("me", Some(("req-1", "1")))
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(resent, Some(2));
    assert!(latches(&mut raw).await.is_empty());

    // No hold at all: not the owner, nothing changed.
    let none: Option<i64> = release("me", None).invoke_async(&mut raw).await.unwrap();
    assert_eq!(none, None);
    assert_eq!(
        listener
            .next_within(std::time::Duration::from_millis(200))
            .await,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_release_leaves_several_holds_alone_and_its_full_resend_takes_one() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let _: () = raw.hset("forms", "me", 2).await.unwrap();
    let _: () = raw.pexpire("forms", 10_000).await.unwrap();

    let first: Option<i64> = release("me", None).invoke_async(&mut raw).await.unwrap();
    assert_eq!(first, Some(3), "several holds: nothing changed");
    assert_eq!(raw.hget::<_, _, i64>("forms", "me").await.unwrap(), 2);
    assert!(
        latches(&mut raw).await.is_empty(),
        "the short form writes no latch"
    );
    let ttl: i64 = raw.pttl("forms").await.unwrap();
    assert!(
        ttl > 0 && ttl <= 10_000,
        "the short form leaves the TTL: {ttl}"
    );

    // Its resends, in full form: one hold goes, once.
    for _ in 0..2 {
        let resent: Option<i64> = release("me", Some(("req-2", "1")))
            .invoke_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(resent, Some(0));
        assert_eq!(raw.hget::<_, _, i64>("forms", "me").await.unwrap(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_release_of_another_type_is_wrongtype_and_changes_nothing() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let _: () = raw.set("forms", "a string").await.unwrap();
    let err = release("me", None)
        .invoke_async::<Option<i64>>(&mut raw)
        .await
        .expect_err("a string is no lock");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(raw.get::<_, String>("forms").await.unwrap(), "a string");
}

/// A hold the server counts but the client does not know of (an earlier repair failed): the
/// client's last release must still free the lock and tell waiters, and leaves no latch behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_release_over_a_stray_hold_frees_the_lock_and_publishes() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    for (name, fenced) in [("stray", false), ("stray-fenced", true)] {
        let mut listener =
            Listener::on(&server, &format!("redisson_lock__channel:{{{name}}}")).await;
        let guard = if fenced {
            client
                .get_fenced_lock(name)
                .lock_and_get_token()
                .await
                .unwrap()
                .1
        } else {
            client.get_lock(name).lock().await.unwrap()
        };
        let owner: String = raw.hkeys::<_, Vec<String>>(name).await.unwrap().remove(0);
        let _: () = raw.hset(name, &owner, 2).await.unwrap();

        guard.unlock().await.expect("the last release");
        assert!(
            !raw.exists::<_, bool>(name).await.unwrap(),
            "{name} still held"
        );
        assert_eq!(listener.next().await, "0");
        assert!(
            latches(&mut raw).await.is_empty(),
            "a release that frees the lock needs no latch"
        );
        let again = client.get_lock(name).try_lock().await.unwrap();
        assert!(again.is_some(), "{name} is free for the next owner");
        again.unwrap().unlock().await.unwrap();
    }
}

/// An unlock cancelled while it repairs a stray hold (its short send found several holds and
/// changed nothing; the repair has gone out but not through) must still give the lock back: its
/// background resend finds the hold counted and takes it back with the full form. The proxy
/// holds the short send's reply back, then lets nothing through, so the repair never reaches
/// the server until the unlock was cancelled and its connection cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_cancelled_during_its_stray_hold_repair_still_frees_the_lock() {
    let server = RedisServer::start();
    let proxy = std::sync::Arc::new(Proxy::start(server.port()).await);
    let client = builder_for(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let mut raw = server.raw().await;
    let guard = client
        .get_lock("cancelled-repair")
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let owner: String = raw
        .hkeys::<_, Vec<String>>("cancelled-repair")
        .await
        .unwrap()
        .remove(0);
    let _: () = raw.hset("cancelled-repair", &owner, 2).await.unwrap();

    proxy.set(Mode::Delay(Duration::from_millis(400)));
    let blackhole = tokio::spawn({
        let proxy = proxy.clone();
        async move {
            // The short send has reached the server; its reply waits in the delay.
            tokio::time::sleep(Duration::from_millis(200)).await;
            proxy.set(Mode::Blackhole);
        }
    });
    let cancelled = tokio::time::timeout(Duration::from_millis(800), guard.unlock()).await;
    assert!(
        cancelled.is_err(),
        "the unlock was to be cancelled mid-repair"
    );
    blackhole.await.unwrap();
    let count: Option<i64> = raw.hget("cancelled-repair", &owner).await.unwrap();
    assert_eq!(
        count,
        Some(2),
        "the short send changed nothing and the repair was held back"
    );
    // The held-back repair is lost with its connection; the background resend reconnects.
    proxy.set(Mode::Reset);
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.set(Mode::Pass);
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut raw = raw.clone();
            async move { !raw.exists::<_, bool>("cancelled-repair").await.unwrap() }
        })
        .await,
        "the cancelled unlock left the lock held: {:?}",
        raw.hgetall::<_, Vec<(String, i64)>>("cancelled-repair")
            .await
            .unwrap()
    );
}
