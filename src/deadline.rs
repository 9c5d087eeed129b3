//! The hard time cap every Redis request is sent under.

use std::time::Duration;

use redis::RedisError;

/// Bounds a Redis future by `cap`, turning the overrun into an I/O timeout error: the command
/// may still run on the server, and callers treat the outcome as unknown.
pub(crate) async fn capped<T>(
    cap: Duration,
    fut: impl std::future::Future<Output = std::result::Result<T, RedisError>>,
) -> std::result::Result<T, RedisError> {
    match tokio::time::timeout(cap, fut).await {
        Ok(result) => result,
        // Fired at once by a paused clock, not by a silent server.
        Err(_) if crate::clock::paused() => Err(crate::clock::error()),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply from redis within {cap:?}"),
        )
        .into()),
    }
}
