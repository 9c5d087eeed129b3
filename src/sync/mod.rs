//! Synchronizers other than the lock family: the count-down latch, the semaphore and the
//! non-reentrant mutex.

mod latch;
mod mutex;
mod semaphore;

pub use latch::RCountDownLatch;
pub use mutex::RMutex;
pub use semaphore::RSemaphore;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::ClientInner;
use crate::error::Result;
use crate::pubsub::Wake;

/// Waits until `ready` answers true: asks it once; then listens on `channel` (messages waking
/// as `policy` says) and asks again, so a change between the two is not missed; then sleeps
/// until a message or the client's re-check interval and asks again, until `ready` answers true
/// (`Ok(true)`) or `wait` is spent (`Ok(false)`; `None`: wait for ever). The first ask subscribes
/// nothing, so a caller that need not wait costs one round trip.
pub(crate) async fn wait_until<F, Fut>(
    inner: &ClientInner,
    channel: &str,
    policy: Wake,
    wait: Option<Duration>,
    mut ready: F,
) -> Result<bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    if ready().await? {
        return Ok(true);
    }
    let deadline = wait.and_then(|w| Instant::now().checked_add(w));
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(false);
    }
    let config = &inner.config;
    let budget = deadline.map_or(config.response_timeout, |d| {
        config
            .response_timeout
            .min(d.saturating_duration_since(Instant::now()))
    });
    let subscription = inner.hub.subscribe_with(channel, budget, policy).await?;
    loop {
        let done = ready().await?;
        subscription.used();
        if done {
            return Ok(true);
        }
        let mut nap = config.recheck_interval;
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Ok(false);
            }
            nap = nap.min(d - now);
        }
        tokio::select! {
            woken = subscription.woken() => woken?,
            () = tokio::time::sleep(nap) => {}
        }
    }
}
