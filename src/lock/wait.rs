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
    // When other local waiters already keep the channel subscribed, join them before the first
    // attempt: an unlock after it cannot be missed, so a refused first attempt needs no second.
    let early = match wait {
        Some(w) if w.is_zero() => None,
        _ => client.hub.join_subscribed(channel),
    };
    let first = attempt().await?;
    if let Some(subscription) = &early {
        subscription.used();
    }
    let mut ttl = match first {
        Attempt::Granted(granted) => return Ok(Some(granted)),
        Attempt::Busy { ttl } => ttl,
    };
    // No deadline: wait for ever (also for a budget too large for the clock).
    let deadline = wait.and_then(|w| started.checked_add(w));
    if let Some(d) = deadline
        && Instant::now() >= d
    {
        return Ok(None);
    }
    let mut answered = early.is_some();
    let subscription = match early {
        Some(subscription) => subscription,
        None => {
            let cap = client.config.response_timeout;
            let budget = deadline.map_or(cap, |d| {
                cap.min(d.saturating_duration_since(Instant::now()))
            });
            client.hub.subscribe(channel, budget).await
        }
    };
    let recheck = client.config.recheck_interval;
    loop {
        if !answered {
            let answer = attempt().await?;
            subscription.used();
            ttl = match answer {
                Attempt::Granted(granted) => return Ok(Some(granted)),
                Attempt::Busy { ttl } => ttl,
            };
        }
        answered = false;
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
