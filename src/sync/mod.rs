//! Synchronizers other than the lock family: the count-down latch, the semaphore and the
//! non-reentrant mutex.

mod latch;
mod mutex;
mod permit_guard;
mod permits;
mod semaphore;
mod with_lock;
pub(crate) mod with_permits;

pub use latch::RCountDownLatch;
pub use mutex::RMutex;
pub use permit_guard::PermitGuard;
pub use permits::RPermitExpirableSemaphore;
pub use semaphore::RSemaphore;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::no_answer_in_time;
use crate::core::Core;
use crate::deadline::{ATTEMPT_GRACE, within};
use crate::error::Result;
use crate::pubsub::Wake;

/// What one attempt of a wait found.
pub(crate) enum Attempt<T> {
    /// Done: the wait is over with this.
    Done(T),
    /// Not yet; when something is known to change by itself (a permit expiring), how soon.
    NotYet(Option<Duration>),
}

impl<T> crate::observe::Tried for Attempt<T> {
    fn refused(&self) -> bool {
        matches!(self, Attempt::NotYet(_))
    }
}

/// Waits until `ready` answers true: [`wait_for`] for checks that have nothing to hand back.
pub(crate) async fn wait_until<F, Fut>(
    inner: &Core,
    channel: &str,
    policy: Wake,
    wait: Option<Duration>,
    mut ready: F,
) -> Result<bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let attempt = || {
        let check = ready();
        async move {
            Ok(match check.await? {
                true => Attempt::Done(()),
                false => Attempt::NotYet(None),
            })
        }
    };
    Ok(wait_for(inner, channel, policy, wait, attempt)
        .await?
        .is_some())
}

/// Waits until `attempt` is done: tries once; then listens on `channel` (messages waking as
/// `policy` says) and tries again, so a change between the two is not missed; then sleeps until
/// a message, the change the attempt foresaw, or the client's re-check interval, whichever comes
/// first, and tries again, until an attempt is done (`Ok(Some(_))`) or `wait` is spent
/// (`Ok(None)`; `wait` `None`: wait for ever). The first try subscribes nothing, so a caller that
/// need not wait costs one round trip.
///
/// A wait budget is a deadline, as for the locks (see `lock::wait::acquire`): with `wait`
/// above zero every attempt ends by it (and a moment's grace), whatever Redis does, a paused or
/// unreachable server included. An attempt still unanswered then is dropped (each kind's
/// attempt undoes in the background what it may have done); the call answers `Ok(None)` when
/// Redis answered an earlier attempt, and a timeout when it answered none.
pub(crate) async fn wait_for<T, F, Fut>(
    inner: &Core,
    channel: &str,
    policy: Wake,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let deadline = wait.and_then(|w| Instant::now().checked_add(w));
    // Zero (one try): bounded by the response timeout, as every request is (and the reconnect
    // wait before it, when the connection is being reopened).
    let bound = deadline
        .filter(|_| wait != Some(Duration::ZERO))
        .map(|d| d + ATTEMPT_GRACE);
    // `None`: not answered by the deadline.
    let mut tried = || {
        let attempt = attempt();
        async move {
            match bound {
                None => attempt.await.map(Some),
                Some(by) => within(by, attempt).await.transpose(),
            }
        }
    };
    let Some(first) = tried().await? else {
        return Err(no_answer_in_time());
    };
    if let Attempt::Done(done) = first {
        return Ok(Some(done));
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return crate::clock::out_of_time();
    }
    let config = &inner.config;
    let budget = deadline.map_or(config.response_timeout, |d| {
        config
            .response_timeout
            .min(d.saturating_duration_since(Instant::now()))
    });
    let subscription = inner.hub.subscribe_with(channel, budget, policy).await?;
    loop {
        let tried_at = Instant::now();
        let Some(outcome) = tried().await? else {
            // Redis answered the first attempt: the wait was not had in time.
            return crate::clock::out_of_time();
        };
        subscription.used();
        let foreseen = match outcome {
            Attempt::Done(done) => return Ok(Some(done)),
            Attempt::NotYet(foreseen) => foreseen,
        };
        let mut until = tried_at + config.recheck_interval;
        if let Some(change) = foreseen {
            until = until.min(tried_at + change);
        }
        if let Some(d) = deadline {
            if Instant::now() >= d {
                return crate::clock::out_of_time();
            }
            until = until.min(d);
        }
        tokio::select! {
            woken = subscription.woken() => {
                woken?;
                crate::observe::woken(channel);
            }
            () = tokio::time::sleep_until(until) => {}
        }
    }
}
