//! The hard time cap every Redis request is sent under, and the deadline of the call a request
//! is part of.

use std::future::Future;
use std::time::Duration;

use redis::RedisError;
use tokio::time::Instant;

tokio::task_local! {
    /// The deadline of the caller's wait budget, set around each attempt of a bounded wait.
    static CALL_BY: Instant;
}

/// Runs `fut`, part of a call that must be over by `deadline`: a request in it that finds its
/// connection being reopened waits for it until then, not for the client's reconnect wait.
pub(crate) async fn by<F: Future>(deadline: Instant, fut: F) -> F::Output {
    CALL_BY.scope(deadline, fut).await
}

/// The deadline of the call the caller is part of, if it has a wait budget (see [`by`]).
pub(crate) fn call_deadline() -> Option<Instant> {
    CALL_BY.try_with(|d| *d).ok()
}

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

/// How long past a wait budget an attempt sent as it ends may still be answered: a healthy
/// server answers within it.
pub(crate) const ATTEMPT_GRACE: Duration = Duration::from_millis(20);

/// `attempt`, given up at `deadline` (`None` when it had not answered by then). A request in it
/// that finds its connection being reopened waits for it until then (see [`by`]).
pub(crate) async fn within<T>(deadline: Instant, attempt: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(deadline, by(deadline, attempt))
        .await
        .ok()
}
