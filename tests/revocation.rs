//! Revocation: a request reaches a holder in another process by message within milliseconds,
//! and at its next renewal when it does not listen; waiters and Java subscribers are left alone;
//! every kind of hold can be asked; a request for a free lock is answered as such.

mod support;

use std::time::{Duration, Instant};

use ferrisson::Error;
use redis::AsyncCommands;
use support::{HolderProcess, RedisServer, client, join_within};

const REVOKE_CHANNEL: &str = "ferrisson_revoke:{job}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_reaches_a_listening_holder_in_another_process_within_milliseconds() {
    let server = RedisServer::start();
    // A 30 s watchdog: its next renewal is 10 s away, so only the message can be in time.
    let mut holder = HolderProcess::spawn(&server, "job", 30_000, "revocable");
    holder.locked(Duration::from_secs(10)).await;
    server.wait_subscribers(REVOKE_CHANNEL, 1).await;
    let client = client(&server).await;
    let lock = client.get_lock("job");
    let asked_at = Instant::now();
    assert_eq!(lock.request_revocation().await.unwrap(), 1);
    assert_eq!(holder.line(Duration::from_secs(5)).await, "REVOKED");
    let heard = asked_at.elapsed();
    eprintln!("the holder heard the request {heard:?} after it was made");
    assert!(heard < Duration::from_secs(1), "took {heard:?}");
    assert_eq!(holder.exit_code(Duration::from_secs(5)).await, Some(0));
    assert!(lock.try_lock().await.unwrap().is_some(), "it let go");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_does_not_listen_learns_at_its_next_renewal() {
    const LEASE_MS: u64 = 900;
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(&server, "job", LEASE_MS, "revocable-unheard");
    holder.locked(Duration::from_secs(10)).await;
    let client = client(&server).await;
    let asked_at = Instant::now();
    assert_eq!(
        client.get_lock("job").request_revocation().await.unwrap(),
        1
    );
    assert_eq!(
        server.subscribers(REVOKE_CHANNEL).await,
        0,
        "nobody listens"
    );
    assert_eq!(holder.line(Duration::from_secs(5)).await, "REVOKED");
    let heard = asked_at.elapsed();
    eprintln!(
        "learnt {heard:?} after the request, renewals every {} ms",
        LEASE_MS / 3
    );
    assert!(
        heard < Duration::from_millis(LEASE_MS / 3 + 500),
        "took {heard:?}: more than one renewal interval"
    );
    assert_eq!(holder.exit_code(Duration::from_secs(5)).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_holder_in_another_process_hears_a_request() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_permit_expirable_semaphore("job");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let mut holder = HolderProcess::spawn(&server, "job", 30_000, "permit-revocable");
    holder.locked(Duration::from_secs(10)).await;
    server.wait_subscribers(REVOKE_CHANNEL, 1).await;
    let asked_at = Instant::now();
    assert_eq!(semaphore.request_revocation().await.unwrap(), 1);
    assert_eq!(holder.line(Duration::from_secs(5)).await, "REVOKED");
    assert!(asked_at.elapsed() < Duration::from_secs(1));
    assert_eq!(holder.exit_code(Duration::from_secs(5)).await, Some(0));
    assert_eq!(
        semaphore.available_permits().await.unwrap(),
        2,
        "it gave its permit back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_free_lock_asks_nobody_and_records_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("job");
    assert_eq!(lock.request_revocation().await.unwrap(), 0);
    let semaphore = client.get_permit_expirable_semaphore("permits");
    assert_eq!(semaphore.request_revocation().await.unwrap(), 0);
    let mut raw = server.raw().await;
    let mut keys: Vec<String> = raw.keys("*").await.unwrap();
    keys.retain(|k| !k.starts_with("ferrisson_client:")); // the client's identity
    assert!(keys.is_empty(), "recorded: {keys:?}");
    // A later holder is not asked.
    let guard = lock.lock().await.unwrap();
    let heard = tokio::time::timeout(Duration::from_millis(300), guard.revocation_requested());
    assert!(heard.await.is_err());
    assert!(!guard.is_revocation_requested());
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_not_woken_and_java_subscribers_hear_nothing() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let guard = holder.get_lock("job").lock().await.unwrap();
    let waiting = support::message_only_client(&server).await;
    let waiter = {
        let lock = waiting.get_lock("job");
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(20), None).await })
    };
    server
        .wait_subscribers("redisson_lock__channel:{job}", 1)
        .await;
    let mut java = support::Listener::on(&server, "redisson_lock__channel:{job}").await;
    let listening = {
        let guard = &guard;
        async move { guard.revocation_requested().await }
    };
    // Built before the count starts: connecting runs its identity's script.
    let asker = client(&server).await;
    server.reset_stats().await;
    let (asked, ()) = tokio::join!(
        async {
            server.wait_subscribers(REVOKE_CHANNEL, 1).await;
            asker.get_lock("job").request_revocation().await
        },
        async {
            tokio::time::timeout(Duration::from_secs(5), listening)
                .await
                .expect("the holder hears the request")
        }
    );
    assert_eq!(asked.unwrap(), 1);
    assert!(guard.is_revocation_requested());
    assert_eq!(
        java.next_within(Duration::from_millis(300)).await,
        None,
        "a Java waiter got a message"
    );
    assert_eq!(
        server.calls("evalsha").await,
        1,
        "only the request ran a script: the waiter did not try again"
    );
    assert!(!waiter.is_finished());
    guard.unlock().await.unwrap();
    let got = join_within(Duration::from_secs(3), vec![waiter], "waiter").await;
    assert!(got.into_iter().next().unwrap().unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_hold_can_be_asked() {
    let server = RedisServer::start();
    let one = client(&server).await;
    let two = client(&server).await;
    // Fair and fenced locks, and the mutex.
    let fair = one.get_fair_lock("fair").lock().await.unwrap();
    assert_eq!(
        two.get_fair_lock("fair")
            .request_revocation()
            .await
            .unwrap(),
        1
    );
    within(fair.revocation_requested()).await;
    fair.unlock().await.unwrap();
    let (_, fenced) = one
        .get_fenced_lock("fenced")
        .lock_and_get_token()
        .await
        .unwrap();
    assert_eq!(
        two.get_fenced_lock("fenced")
            .request_revocation()
            .await
            .unwrap(),
        1
    );
    within(fenced.revocation_requested()).await;
    fenced.unlock().await.unwrap();
    let mutex = one.get_mutex("mutex").lock().await.unwrap();
    assert_eq!(
        two.get_mutex("mutex").request_revocation().await.unwrap(),
        1
    );
    within(mutex.revocation_requested()).await;
    mutex.unlock().await.unwrap();

    // Read side: every reader; write side: the writer only, not its own read hold.
    let reader_one = one
        .get_read_write_lock("rw")
        .read_lock()
        .lock()
        .await
        .unwrap();
    let reader_two = two
        .get_read_write_lock("rw")
        .read_lock()
        .lock()
        .await
        .unwrap();
    let asker = client(&server).await.get_read_write_lock("rw");
    assert_eq!(
        asker.write_lock().request_revocation().await.unwrap(),
        0,
        "no writer"
    );
    assert_eq!(asker.read_lock().request_revocation().await.unwrap(), 2);
    within(reader_one.revocation_requested()).await;
    within(reader_two.revocation_requested()).await;
    reader_one.unlock().await.unwrap();
    reader_two.unlock().await.unwrap();
    // The request for those readers lives on; a fresh owner writing and reading is another
    // hold.
    let rw = client(&server).await.get_read_write_lock("rw");
    let writer = rw.write_lock().lock().await.unwrap();
    let own_read = writer.scope(rw.read_lock().lock()).await.unwrap();
    assert_eq!(asker.write_lock().request_revocation().await.unwrap(), 1);
    within(writer.revocation_requested()).await;
    let read_heard =
        tokio::time::timeout(Duration::from_millis(300), own_read.revocation_requested()).await;
    assert!(
        read_heard.is_err(),
        "the write side's request reached the read hold"
    );
    own_read.unlock().await.unwrap();
    writer.unlock().await.unwrap();

    // Permits: every permit out, on every client.
    let semaphore = one.get_permit_expirable_semaphore("permits");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let mine = semaphore.acquire().await.unwrap();
    let theirs = two
        .get_permit_expirable_semaphore("permits")
        .acquire_many(2)
        .await
        .unwrap();
    assert_eq!(semaphore.request_revocation().await.unwrap(), 3);
    within(mine.revocation_requested()).await;
    within(theirs.revocation_requested()).await;
    mine.release().await.unwrap();
    theirs.release().await.unwrap();
}

/// A request made before the holder listened is found when it starts listening, fixed lease
/// or not; the requests live about one lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_before_listening_is_found() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("job");
    let guard = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
    assert_eq!(lock.request_revocation().await.unwrap(), 1);
    assert!(!guard.is_revocation_requested(), "not learnt yet");
    within(guard.revocation_requested()).await;
    assert!(guard.is_revocation_requested());
    let mut raw = server.raw().await;
    let ttl: i64 = raw.pttl("ferrisson_revoke:{job}").await.unwrap();
    assert!(ttl > 15_000 && ttl <= 30_000, "lives {ttl} ms");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.set("word", "precious").await.unwrap();
    assert!(matches!(
        client.get_lock("word").request_revocation().await,
        Err(Error::WrongType { .. })
    ));
    let _: () = raw.set("{word}:timeout", "not a zset").await.unwrap();
    assert!(matches!(
        client
            .get_permit_expirable_semaphore("word")
            .request_revocation()
            .await,
        Err(Error::WrongType { .. })
    ));
    for name in ["", "a{b"] {
        assert!(matches!(
            client.get_lock(name).request_revocation().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            client
                .get_permit_expirable_semaphore(name)
                .request_revocation()
                .await,
            Err(Error::InvalidArgument(_))
        ));
    }
    let word: String = raw.get("word").await.unwrap();
    assert_eq!(word, "precious");
}

async fn within(heard: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(3), heard)
        .await
        .expect("the holder hears the request");
}

/// Whether `requested` resolves within `within`.
async fn heard(requested: impl std::future::Future<Output = ()>, within: Duration) -> bool {
    tokio::time::timeout(within, requested).await.is_ok()
}

/// A request is for the holds there are when it is made. A later hold of the same owner name
/// (a read nested in a write hold's scope keeps the writer's owner; a new acquisition may take
/// the name of an owner whose last hold is gone) is not reached by it, neither by listening nor
/// through its renewals; a new request reaches it. Permits are the same: a new permit is not reached by a request
/// for the permit before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_reaches_a_later_hold() {
    let server = RedisServer::start();
    // Renewals every 200 ms, each reading the requests; re-checks every 100 ms.
    let client = support::builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .recheck_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let quiet = Duration::from_millis(700);
    let loud = Duration::from_secs(3);

    // The read side, nested in a write hold's scope, which keeps its owner (and owner name).
    let rw = client.get_read_write_lock("job:rw");
    let write = rw.write_lock().lock().await.unwrap();
    let first = write.scope(rw.read_lock().lock()).await.unwrap();
    assert_eq!(rw.read_lock().request_revocation().await.unwrap(), 1);
    assert!(heard(first.revocation_requested(), loud).await);
    first.unlock().await.unwrap();
    let later = write.scope(rw.read_lock().lock()).await.unwrap();
    assert!(
        !heard(later.revocation_requested(), quiet).await,
        "a later read hold heard the request for the one before"
    );
    assert!(!later.is_revocation_requested(), "nor through its renewals");
    assert_eq!(rw.read_lock().request_revocation().await.unwrap(), 1);
    assert!(
        heard(later.revocation_requested(), loud).await,
        "a new request reaches it"
    );
    later.unlock().await.unwrap();
    write.unlock().await.unwrap();

    // A plain lock whose guard was dropped: the task locks again (a new acquisition) as soon as
    // the background release is done, maybe under the same owner name.
    let lock = client.get_lock("job:plain");
    let first = lock.lock().await.unwrap();
    assert_eq!(lock.request_revocation().await.unwrap(), 1);
    assert!(heard(first.revocation_requested(), loud).await);
    drop(first);
    let later = lock.lock().await.unwrap();
    assert!(!heard(later.revocation_requested(), quiet).await);
    assert!(!later.is_revocation_requested());
    later.unlock().await.unwrap();

    // Permits.
    let permits = client.get_permit_expirable_semaphore("job:permits");
    assert!(permits.try_set_permits(1).await.unwrap());
    let first = permits.acquire().await.unwrap();
    assert_eq!(permits.request_revocation().await.unwrap(), 1);
    assert!(heard(first.revocation_requested(), loud).await);
    first.release().await.unwrap();
    let later = permits.acquire().await.unwrap();
    assert!(!heard(later.revocation_requested(), quiet).await);
    assert!(!later.is_revocation_requested());
    later.release().await.unwrap();
}
