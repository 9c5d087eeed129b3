//! Errors say why: each failure a new user meets first shows its cause (and, for a connect, the
//! server's address) in its `Display`, so `{e}` and `tracing::error!(%e)` keep it.

mod support;

use std::time::Duration;

use ferrisson::{Client, Error};
use support::RedisServer;

async fn connect_error(url: &str) -> (Error, String) {
    let err = Client::builder()
        .url(url)
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect_err("the connect fails");
    let shown = err.to_string();
    eprintln!("{url}: {shown}");
    (err, shown)
}

fn says(shown: &str, words: &[&str]) {
    let lower = shown.to_lowercase();
    for word in words {
        assert!(
            lower.contains(&word.to_lowercase()),
            "`{shown}` does not say `{word}`"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_names_the_address_and_the_refusal() {
    let port = support::server::free_port();
    let (err, shown) = connect_error(&format!("redis://127.0.0.1:{port}/")).await;
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    says(
        &shown,
        &["cannot connect", &format!("127.0.0.1:{port}"), "refused"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_does_not_resolve_says_so() {
    // Where the machine's resolver itself does not answer within the connection timeout (no
    // name server reachable), the connect times out instead, and says that.
    let lookup = tokio::task::spawn_blocking(|| {
        std::net::ToSocketAddrs::to_socket_addrs(&("no-such-host.invalid", 6379)).map(drop)
    });
    let resolver_answers = tokio::time::timeout(Duration::from_millis(400), lookup)
        .await
        .is_ok();
    let (err, shown) = connect_error("redis://no-such-host.invalid:6379/").await;
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    says(&shown, &["cannot connect", "no-such-host.invalid:6379"]);
    let why: &[&str] = if resolver_answers {
        &[
            "resolve",
            "lookup",
            "name or service",
            "not known",
            "dns",
            "address information",
        ]
    } else {
        eprintln!("this machine's resolver does not answer: the connect times out");
        &["timed out", "no reply"]
    };
    assert!(
        why.iter().any(|w| shown.to_lowercase().contains(w)),
        "`{shown}` does not say the name did not resolve"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_says_so_and_never_shows_it() {
    let server = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("right-one")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    let url = format!("redis://:wrong-one@127.0.0.1:{}/", server.port());
    let (err, shown) = connect_error(&url).await;
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    says(
        &shown,
        &["cannot connect", &format!("127.0.0.1:{}", server.port())],
    );
    assert!(
        ["password", "auth"]
            .iter()
            .any(|w| shown.to_lowercase().contains(w)),
        "`{shown}` does not say the password was refused"
    );
    assert!(
        !shown.contains("wrong-one"),
        "the password is shown: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_server_does_not_have_says_so() {
    let server = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}/99", server.port());
    let (err, shown) = connect_error(&url).await;
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    says(&shown, &["cannot connect", "db index is out of range"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_is_a_timeout_at_connect_and_for_a_command() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let lock = client.get_lock("paused");
    server.pause();
    let (err, shown) = connect_error(&server.url()).await;
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    says(
        &shown,
        &["cannot connect", &format!("127.0.0.1:{}", server.port())],
    );
    assert!(
        ["timed out", "timeout", "no reply"]
            .iter()
            .any(|w| shown.to_lowercase().contains(w)),
        "`{shown}` does not say it timed out"
    );
    let err = lock.try_lock().await.expect_err("no answer");
    server.resume();
    let shown = err.to_string();
    eprintln!("a command to the paused server: {shown}");
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    says(&shown, &["redis request failed"]);
    assert!(
        ["timed out", "timeout", "no reply"]
            .iter()
            .any(|w| shown.to_lowercase().contains(w)),
        "`{shown}` does not say it timed out"
    );
}
