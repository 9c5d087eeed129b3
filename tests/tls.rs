//! `rediss://`: locking, waiting and renewal over TLS against a real TLS server.
//!
//! No test here skips: when `FERRISSON_SERVER` names a server built without TLS (the Valkey 8
//! and Redis 6.2 of `.ci/servers` are), they run against `redis-server` from `PATH`, which has
//! it, and say so (`RedisServer::start_tls`); a default server without TLS fails them with how
//! to install one.
#![cfg(feature = "tls")]

mod support;

use std::time::Duration;

use support::{RedisServer, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_with_a_private_ca() {
    let server = RedisServer::start_tls();
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
    let server = RedisServer::start_tls();
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
    let server = RedisServer::start_tls();
    let plain = server.tls_url().replace("rediss://", "redis://");
    let result = ferrisson::Client::builder()
        .url(plain)
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await;
    assert!(result.is_err());
}
