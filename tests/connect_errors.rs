//! Errors at connect say what to do, in one line: a server that wants a password, a password
//! refused, a URL of another scheme or without one, and a test runtime whose clock is paused
//! (`start_paused`, `tokio::time::pause`), where the client cannot run, and says so instead of
//! "timed out".

mod support;

use std::time::Duration;

use ferrisson::{Client, Error};
use support::RedisServer;

/// A server that asks for `password`.
async fn server_with_password(password: &str) -> RedisServer {
    let server = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    server
}

async fn connect_error(url: &str) -> Error {
    let err = support::builder_for(url)
        .build()
        .await
        .expect_err("the connect fails");
    eprintln!("{url}: {err}");
    err
}

/// One line, short, with no dump of a pipeline's failures.
fn one_short_line(shown: &str) {
    assert!(!shown.contains('\n'), "more than one line: {shown}");
    assert!(shown.len() < 200, "{} chars: {shown}", shown.len());
    assert!(!shown.contains("Pipeline"), "a pipeline dump: {shown}");
    assert!(!shown.contains("Index"), "a pipeline dump: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_for_a_server_that_wants_one_says_to_put_it_in_the_url() {
    let server = server_with_password("s3cret").await;
    let err = connect_error(&server.url()).await;
    let shown = err.to_string();
    one_short_line(&shown);
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(
        shown.starts_with(&format!(
            "cannot connect to redis at 127.0.0.1:{}: the server requires a password (NOAUTH); \
             put it in the URL: redis://:PASSWORD@host:port",
            server.port()
        )),
        "{shown}"
    );
    assert_eq!(shown.matches("NOAUTH").count(), 1, "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_user_says_it_was_refused_and_never_shows_it() {
    let server = server_with_password("s3cret").await;
    for url in [
        format!("redis://:wrong-one@127.0.0.1:{}/", server.port()),
        format!("redis://nobody:wrong-one@127.0.0.1:{}/", server.port()),
    ] {
        let err = connect_error(&url).await;
        let shown = err.to_string();
        one_short_line(&shown);
        assert!(matches!(err, Error::Connect { .. }), "{err:?}");
        assert!(
            shown.starts_with(&format!(
                "cannot connect to redis at 127.0.0.1:{}: the server refused the user name or \
                 password in the URL (WRONGPASS)",
                server.port()
            )),
            "{shown}"
        );
        assert!(
            !shown.contains("wrong-one"),
            "the password is shown: {shown}"
        );
    }
    // The right one works.
    let url = format!("redis://:s3cret@127.0.0.1:{}/", server.port());
    let client = support::builder_for(&url).build().await.unwrap();
    client
        .get_lock("auth")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_of_another_scheme_says_to_use_redis_or_rediss() {
    for (url, says) in [
        (
            "http://127.0.0.1:6379",
            "url: `http://127.0.0.1:6379` is not a Redis URL (http:// is not a scheme of Redis); \
             use redis://127.0.0.1:6379, or rediss://127.0.0.1:6379 for TLS",
        ),
        (
            "https://cache.internal:6380/0",
            "url: `https://cache.internal:6380/0` is not a Redis URL (https:// is not a scheme of \
             Redis); use redis://cache.internal:6380, or rediss://cache.internal:6380 for TLS",
        ),
        (
            "https://user:hunter2@cache.internal:6380",
            "url: `https://user:***@cache.internal:6380` is not a Redis URL",
        ),
    ] {
        let err = Client::connect(url).await.unwrap_err();
        let shown = err.to_string();
        eprintln!("{url}: {shown}");
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(
            shown.starts_with(&format!("invalid client configuration: {says}")),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "the password is shown: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_without_a_scheme_suggests_the_redis_url() {
    for url in ["localhost:6379", "127.0.0.1:6379", "redis-host"] {
        let err = Client::connect(url).await.unwrap_err();
        let shown = err.to_string();
        eprintln!("{url}: {shown}");
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert_eq!(
            shown,
            format!(
                "invalid client configuration: url: `{url}` has no scheme; use redis://{url}, \
                 or rediss://{url} for TLS"
            )
        );
    }
    let err = Client::connect("").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid client configuration: url: the URL is empty; use redis://host:port, or \
         rediss://host:port for TLS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_seeds_and_sentinels_of_another_scheme_say_so_too() {
    let err = Client::builder()
        .cluster(["redis://127.0.0.1:7000", "127.0.0.1:7001"])
        .build()
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid client configuration: cluster: `127.0.0.1:7001` has no scheme; use \
         redis://127.0.0.1:7001, or rediss://127.0.0.1:7001 for TLS"
    );
    let err = Client::builder()
        .sentinel("mymaster", ["http://127.0.0.1:26379"])
        .build()
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "invalid client configuration: sentinel: `http://127.0.0.1:26379` is not a Redis URL"
        ),
        "{err}"
    );
}

/// What a paused clock must never look like: the server's fault.
fn not_a_timeout(shown: &str) {
    let lower = shown.to_lowercase();
    for word in ["timed out", "no reply", "no answer"] {
        assert!(!lower.contains(word), "`{shown}` blames the server");
    }
}

fn names_paused_time(err: &Error) {
    let shown = err.to_string();
    eprintln!("{shown}");
    assert!(matches!(err, Error::PausedClock), "{err:?}");
    assert!(
        shown.starts_with(
            "the Tokio clock is paused (tokio::time::pause or #[tokio::test(start_paused = true)])"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("connecting before pausing is not enough"),
        "{shown}"
    );
    not_a_timeout(&shown);
}

#[tokio::test(start_paused = true)]
async fn connecting_on_paused_time_names_it() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let err = Client::connect(&server.url()).await.unwrap_err();
    names_paused_time(&err);
}

#[tokio::test]
async fn pausing_after_connect_names_it_at_the_next_call() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let lock = client.get_lock("paused-after");
    let held = lock.lock().await.unwrap();
    tokio::time::pause();
    let err = lock.lock().await.unwrap_err();
    names_paused_time(&err);
    let err = lock
        .try_lock_for(Duration::from_secs(1), None)
        .await
        .unwrap_err();
    names_paused_time(&err);
    let err = client
        .get_semaphore("paused-after:s")
        .try_acquire(1)
        .await
        .unwrap_err();
    names_paused_time(&err);
    // The client's own thread kept the lease meanwhile, and once the clock runs again the
    // client works.
    tokio::time::resume();
    assert!(!held.is_lost());
    held.unlock().await.unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_test_that_starts_paused_and_resumes_to_connect_hears_it_after_pausing_again() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    tokio::time::resume();
    let client = support::client(&server).await;
    let lock = client.get_lock("paused-again");
    lock.lock().await.unwrap().unlock().await.unwrap();
    tokio::time::pause();
    names_paused_time(&lock.lock().await.unwrap_err());
    names_paused_time(&lock.is_locked().await.unwrap_err());
}

/// The way that works: the code that uses the client runs on a second runtime, in real time,
/// and the paused test awaits it.
#[tokio::test(start_paused = true)]
async fn calls_made_on_a_second_runtime_work_from_a_paused_test() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let real_time = tokio::runtime::Runtime::new().unwrap();
    let url = server.url();
    let client = real_time
        .spawn(async move { Client::connect(&url).await })
        .await
        .unwrap()
        .unwrap();
    let lock = client.get_lock("second-runtime");
    let guard = real_time
        .spawn({
            let lock = lock.clone();
            async move { lock.lock().await }
        })
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await; // paused: no time passes
    let other = lock.clone();
    let (lost, busy) = real_time
        .spawn(async move {
            let busy = other
                .try_lock_for(Duration::from_millis(200), None)
                .await
                .map(|g| g.is_none());
            let lost = guard.is_lost();
            guard.unlock().await.unwrap();
            (lost, busy)
        })
        .await
        .unwrap();
    assert!(!lost, "the hold was kept");
    assert!(busy.unwrap(), "the lock was held");
    drop(client);
    real_time.shutdown_background();
}
