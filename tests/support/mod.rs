//! The test harness: real servers, clients with test-sized timeouts, and the mutual-exclusion
//! checker.

#![allow(dead_code, unreachable_pub)]

pub mod checker;
pub mod server;

use std::time::Duration;

#[allow(unused_imports)]
pub use checker::Checker;
pub use server::RedisServer;

/// A client of `server` with timeouts sized for tests.
pub async fn client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .build()
        .await
        .expect("client connects to the test server")
}

/// A builder for `server` with timeouts sized for tests; adjust and build.
pub fn builder(server: &RedisServer) -> ferrisson::ClientBuilder {
    ferrisson::Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
}

/// Polls `check` every 10 ms until it is true or `within` has passed.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
