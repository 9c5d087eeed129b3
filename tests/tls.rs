//! `rediss://`: locking, waiting and renewal over TLS against a real TLS server.
//!
//! A server binary built without TLS (the Valkey 8 and Redis 6.2 of `.ci/servers` are) refuses
//! `--tls-port` at start and says why; each test is then skipped with a line on stderr naming
//! the binary and its words (`RedisServer::start_tls_or_skip`). Only those words count: any
//! other failure to start fails the test, and `FERRISSON_REQUIRE_TLS=1` (set by `.ci/run` for
//! Debian's Redis, which has TLS) turns a skip into a failure.
#![cfg(feature = "tls")]

mod support;

use std::time::Duration;

use support::{RedisServer, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_with_a_private_ca() {
    let Some(server) = RedisServer::start_tls_or_skip("locks_work_over_tls_with_a_private_ca")
    else {
        return;
    };
    let connect = || {
        ferrisson::Client::builder()
            .url(server.tls_url())
            .tls_root_certificates(server.ca_pem())
            .watchdog_timeout(Duration::from_millis(600))
            .build()
    };
    let a = connect().await.expect("TLS client connects");
    let b = connect().await.unwrap();
    let guard = a.get_lock("over-tls").lock().await.unwrap();
    let waiter = b.get_lock("over-tls");
    let task = tokio::spawn(async move { waiter.lock().await.map(|g| g.fencing_token()) });
    tokio::time::sleep(Duration::from_millis(800)).await; // a renewal or two over TLS
    assert!(!guard.is_lost());
    assert!(!task.is_finished());
    let first = guard.fencing_token();
    guard.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(second > first);
    let lock = a.get_lock("over-tls");
    assert!(
        eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_refused() {
    let Some(server) = RedisServer::start_tls_or_skip("an_untrusted_server_certificate_is_refused")
    else {
        return;
    };
    let err = ferrisson::Client::builder()
        .url(server.tls_url())
        .connection_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect_err("the test CA is not in the platform's root store");
    assert!(matches!(err, ferrisson::Error::Connect { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_cannot_talk_to_the_tls_port() {
    let Some(server) = RedisServer::start_tls_or_skip("a_plain_client_cannot_talk_to_the_tls_port")
    else {
        return;
    };
    let plain = server.tls_url().replace("rediss://", "redis://");
    let result = ferrisson::Client::builder()
        .url(plain)
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await;
    assert!(result.is_err());
}
