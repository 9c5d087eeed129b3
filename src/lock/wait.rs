//! Waiting for a lock: try once; on contention subscribe, try again, then sleep until an unlock
//! message or the holder's TTL (bounded by the re-check interval) and try again, until granted
//! or the wait budget is spent. Shared by every lock kind.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::ClientInner;
use crate::error::Result;

/// What one acquire attempt answered.
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    Granted(T),
    /// Held by somebody else; `ttl` is the holder's remaining lease (`None`: no TTL).
    Busy {
        ttl: Option<Duration>,
    },
}

/// Runs `attempt` until it grants or `wait` is spent (`None`: wait for ever).
///
/// The first attempt starts no timer and subscribes nothing, so an uncontended acquire is one
/// round trip. Cancel safe as far as this loop goes: it holds only the subscription, which
/// unregisters on drop; `attempt` answers for what it sent.
pub(crate) async fn acquire<T, F, Fut>(
    client: &ClientInner,
    channel: &str,
    wait: Option<Duration>,
    max_nap: Option<Duration>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let started = Instant::now();
    if let Attempt::Granted(granted) = attempt().await? {
        return Ok(Some(granted));
    }
    // No deadline: wait for ever (also for a budget too large for the clock).
    let deadline = wait.and_then(|w| started.checked_add(w));
    if let Some(d) = deadline
        && Instant::now() >= d
    {
        return Ok(None);
    }
    let recheck = client.config.recheck_interval;
    let mut budget = client.config.response_timeout;
    if let Some(d) = deadline {
        budget = budget.min(d.saturating_duration_since(Instant::now()));
    }
    let subscription = client.hub.subscribe(channel, budget).await;
    loop {
        let answer = attempt().await?;
        subscription.used();
        let ttl = match answer {
            Attempt::Granted(granted) => return Ok(Some(granted)),
            Attempt::Busy { ttl } => ttl,
        };
        let mut nap = ttl.map_or(recheck, |t| t.min(recheck));
        if let Some(max) = max_nap {
            nap = nap.min(max);
        }
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Ok(None);
            }
            nap = nap.min(d - now);
        }
        let nap = nap.max(Duration::from_millis(1));
        tokio::select! {
            () = subscription.woken() => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}
