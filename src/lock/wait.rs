//! Waiting for a lock: try once; on contention subscribe, try again, then sleep until an unlock
//! message or the holder's TTL (bounded by the re-check interval) and try again, until granted
//! or the wait budget is spent. Shared by every lock kind. Waiters of kinds that hand over also
//! line up in the client's local queue, where a release of the same client may grant them the
//! lock while they sleep.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::core::Core;
use crate::error::Result;
use crate::lock::handover::{Handed, HandedHold, Registration, Turn};
use crate::names;
use crate::presence::POLL;
use crate::pubsub::{Subscription, Wake};

/// A waiter's starvation mode (plain locks): once it has waited `after`, its attempts say it
/// starves, and it listens on `channel`, where a release that hands it the lock publishes.
#[derive(Debug)]
pub(crate) struct Starving {
    pub(crate) after: Duration,
    pub(crate) channel: Arc<str>,
}

/// How a kind's waiter naps, beyond the common rules.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// The longest a waiter may sleep between two attempts (a fair waiter must keep its place).
    pub(crate) max_nap: Option<Duration>,
    /// Starvation mode, for kinds that have it: how long until the waiter starves, and its
    /// owner name (its own channel is the lock's channel, `:`, that name).
    pub(crate) starving: Option<(Duration, Arc<str>)>,
    /// Whether a release may tell this kind's waiters, on the lock's channel + `:ferrisson`, to
    /// give waiters of other libraries (Java Redisson's) the first go at a freed lock (see
    /// [`COURTESY`]). Waiting, the waiter listens there too, which is how releases count
    /// ferrisson's subscribers.
    pub(crate) courtesy: bool,
}

/// How long after a release that invited other libraries' waiters a ferrisson waiter that does
/// not starve holds back: about what a JVM takes from the unlock message to its attempt, with
/// room to spare. ferrisson's waiters hear the message and ask sooner than such a waiter, and
/// would otherwise win every race for a freed lock (lock_release.lua).
const COURTESY: Duration = Duration::from_millis(3);

/// Until when a waiter holds back after a release that invited other libraries' waiters.
fn courtesy_until(client: &Core, channel: Option<&Arc<str>>) -> Option<Instant> {
    let until = client.hub.noted(channel?)? + COURTESY;
    (until > Instant::now()).then_some(until)
}

/// What one acquire attempt answered.
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    Granted(T),
    /// Held by somebody else; `ttl` is the holder's remaining lease (`None`: no TTL).
    Busy {
        ttl: Option<Duration>,
    },
}

impl<T> crate::observe::Tried for Attempt<T> {
    fn refused(&self) -> bool {
        matches!(self, Attempt::Busy { .. })
    }
}

/// Runs `attempt` until it grants or `wait` is spent (`None`: wait for ever). Once it has to
/// wait, `register` may line the waiter up locally; a lock handed over to it becomes a `T`
/// through `handed`. `attempt(true, _)` must ask Redis: it follows an unlock message or a
/// declined handover, which may contradict what the client believes about the lock.
/// `attempt(_, true, _)` says the waiter starves (see [`Starving`]); `attempt(_, _, true)` asks
/// whether the holder's process is gone, and takes its hold over if it is (see
/// [`presence`](crate::presence)): once the waiter has waited [`POLL`], when the client has
/// takeover on. Until then it naps at most until then.
///
/// A local release that could not hand over because others wait publishes the unlock: this
/// waiter then naps on and hears that message as the others do, instead of asking at once and
/// beating waiters of other clients (Java ones included) to the lock every time.
///
/// The first attempt subscribes nothing, so an uncontended acquire is one round trip.
///
/// A wait budget is a deadline: with `wait` above zero, every attempt, the subscription and a
/// handover's answer end by it, so the call returns within `wait` (and a few milliseconds)
/// whatever Redis does (an attempt sent as it ends gets 20 ms to be answered). An attempt still
/// unanswered then is dropped, which repairs a grant it
/// may have made in the background (as for a cancelled call). The call answers `Ok(None)` when
/// Redis answered an earlier attempt (the lock was seen taken: it was not had in time), and a
/// timeout when Redis answered nothing at all. Without a budget, or with a zero one
/// (`try_lock`), each attempt is bounded by the response timeout as every request is. Cancel safe as far as this loop goes: it holds only the subscription and the
/// local registration, which unregister on drop (a release that picked this waiter meanwhile
/// takes the handed hold back); `attempt` answers for what it sent.
pub(crate) async fn acquire<T, F, Fut, R, H>(
    client: &Core,
    channel: &str,
    wait: Option<Duration>,
    rules: Rules,
    mut attempt: F,
    register: R,
    mut handed: H,
) -> Result<Option<T>>
where
    F: FnMut(bool, bool, bool) -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
    R: FnOnce() -> Option<Registration>,
    H: FnMut(HandedHold) -> T,
{
    // Counted from before the first attempt. No deadline: wait for ever (also for a budget too
    // large for the clock). Only a bounded wait reads the clock.
    let deadline = wait.and_then(|w| Instant::now().checked_add(w));
    // An attempt sent as the budget ends (the last look, when a nap ran to the deadline) gets
    // a moment to be answered: a healthy server answers within it.
    let bound = deadline
        .filter(|_| wait != Some(Duration::ZERO))
        .map(|d| d + ATTEMPT_GRACE);
    // One try of a longer wait (a RedLock's round) looks whether the holder is gone as a wait
    // of that length would.
    let look = client.config.takeover_grace.is_some()
        && crate::presence::waited_since().is_some_and(|since| since.elapsed() >= POLL);
    let first = match bound {
        None => attempt(false, false, look).await?,
        // Boxed: the timer would make every acquire's future larger.
        Some(d) => match Box::pin(within(d, attempt(false, false, look))).await {
            Some(answer) => answer?,
            None => return Err(no_answer_in_time()),
        },
    };
    if let Attempt::Granted(granted) = first {
        return Ok(Some(granted));
    }
    // The wait keeps a subscription, timers and an offer in its state: kilobytes that every
    // uncontended acquire would otherwise carry, and copy each time its future moves.
    Box::pin(async move {
        // When the wait began, for starvation mode: the budget's start, or (an unbounded wait,
        // whose uncontended acquire reads no clock) now, one attempt later.
        let started = match (deadline, wait) {
            (Some(d), Some(w)) => d - w,
            _ => Instant::now(),
        };
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return crate::clock::out_of_time();
        }
        // Named only now: an acquire that waits for nothing allocates none of this.
        let Rules {
            max_nap,
            starving,
            courtesy,
        } = rules;
        let mut starving = starving.map(|(after, owner)| Starving {
            after,
            channel: names::shared(&[channel, ":", &owner]),
        });
        let courtesy = courtesy.then(|| names::shared(&[channel, ":ferrisson"]));
        let recheck = client.config.recheck_interval;
        let takeover = client.config.takeover_grace.is_some();
        let mut budget = client.config.response_timeout;
        if let Some(d) = deadline {
            budget = budget.min(d.saturating_duration_since(Instant::now()));
        }
        // The courtesy channel first: a release between the two must not count this client
        // as another library's waiter.
        let (invited, subscription) = match &courtesy {
            Some(note) => {
                let (invited, subscription) = futures::join!(
                    client.hub.subscribe_with(note, budget, Wake::Note),
                    client.hub.subscribe(channel, budget)
                );
                // Refused that channel (an ACL naming only the lock's), the waiter waits
                // without the courtesy; releases then count this client as another library.
                let invited = invited
                    .inspect_err(|e| {
                        tracing::debug!(channel = %note, error = %e, "cannot listen for invitations to other libraries' waiters");
                    })
                    .ok();
                (invited, subscription?)
            }
            None => (None, client.hub.subscribe(channel, budget).await?),
        };
        let courtesy = courtesy.filter(|_| invited.is_some());
        let local = register();
        // The receiver of the current nap, while a release may offer this waiter the lock.
        let mut offer: Option<oneshot::Receiver<Handed>> = None;
        let mut ask_server = false;
        // Once starving: the subscription of the waiter's own channel.
        let mut starved: Option<Subscription> = None;
        // Set when a local release freed the lock while this waiter napped: nap on until
        // `nap_end`, without an attempt.
        let mut nap_on = false;
        // Woken by the lock's unlock message (not by a timer or its own channel).
        let mut heard_unlock = false;
        let mut nap_end = Instant::now();
        loop {
            if let (Some(local), Some(rx)) = (&local, offer.take())
                && let Turn::Offered(rx) = local.wake(rx)
            {
                // A release picked this waiter: it is told the outcome with the release's reply,
                // within the wait budget. Giving up here leaves a hold handed meanwhile to be given
                // back (see `HandedHold`).
                let outcome = match deadline {
                    Some(d) => tokio::time::timeout_at(d, rx).await.ok(),
                    None => Some(rx.await),
                };
                local.settled();
                match outcome {
                    None => return crate::clock::out_of_time(),
                    Some(Ok(Handed::Granted(hold))) => return Ok(Some(handed(hold))),
                    Some(_) => ask_server = true,
                }
            }
            if !std::mem::take(&mut nap_on) {
                if starved.is_none()
                    && let Some(s) = &starving
                    && started.elapsed() >= s.after
                {
                    let mut budget = client.config.response_timeout;
                    if let Some(d) = deadline {
                        budget = budget.min(d.saturating_duration_since(Instant::now()));
                    }
                    match client.hub.subscribe_with(&s.channel, budget, Wake::All).await {
                        Ok(own) => {
                            starved = Some(own);
                            if let Some(local) = &local {
                                local.starving();
                            }
                        }
                        Err(e) => {
                            // Not heard when handed the lock, it must not say it starves.
                            tracing::debug!(channel = %s.channel, error = %e, "cannot listen for a handed lock; waiting without starvation mode");
                            starving = None;
                        }
                    }
                }
                if starved.is_none() && courtesy.is_some() {
                    if std::mem::take(&mut heard_unlock) {
                        // A release publishes its invitation to other libraries' waiters just
                        // after the unlock message that woke this waiter: the hub, on the
                        // client's own thread, reads both together, so a yield lets it note
                        // the second.
                        tokio::task::yield_now().await;
                    }
                    if let Some(until) = courtesy_until(client, courtesy.as_ref()) {
                        hold_back(until, deadline).await;
                    }
                }
                let look = takeover && started.elapsed() >= POLL;
                let asked = attempt(std::mem::take(&mut ask_server), starved.is_some(), look);
                let answer = match bound {
                    None => asked.await?,
                    Some(d) => match within(d, asked).await {
                        Some(answer) => answer?,
                        // Seen taken before: not had in time.
                        None => return crate::clock::out_of_time(),
                    },
                };
                // A local answer never follows a wake-up (wake-ups set `ask_server`), so a
                // wake-up marked used here always had its attempt reach Redis.
                subscription.used();
                if let Some(own) = &starved {
                    own.used();
                }
                let ttl = match answer {
                    Attempt::Granted(granted) => return Ok(Some(granted)),
                    Attempt::Busy { ttl } => ttl,
                };
                let mut nap = ttl.map_or(recheck, |t| t.min(recheck));
                if let Some(max) = max_nap {
                    nap = nap.min(max);
                }
                let now = Instant::now();
                if takeover && !look {
                    // The first look at whether the holder is gone is due then.
                    nap = nap.min((started + POLL).saturating_duration_since(now));
                }
                if let Some(d) = deadline {
                    if now >= d {
                        return crate::clock::out_of_time();
                    }
                    nap = nap.min(d - now);
                }
                nap_end = now + nap.max(Duration::from_millis(1));
                if starved.is_none()
                    && let Some(s) = &starving
                {
                    // Ask again once starving, so the next release already hands the lock
                    // here (not only the one after the release that wakes this waiter).
                    nap_end = nap_end.min((started + s.after).max(now + Duration::from_millis(1)));
                }
            }
            offer = local.as_ref().map(Registration::nap);
            tokio::select! {
                woken = subscription.woken() => {
                    woken?;
                    crate::observe::woken(channel);
                    ask_server = true;
                    heard_unlock = true;
                }
                woken = async {
                    match &starved {
                        Some(own) => own.woken().await,
                        None => std::future::pending().await,
                    }
                } => {
                    woken?;
                    ask_server = true;
                }
                // Only the attempt right after a busy answer may trust the client's own view.
                () = tokio::time::sleep_until(nap_end) => ask_server = true,
                outcome = async {
                    match offer.as_mut() {
                        Some(rx) => rx.await,
                        None => std::future::pending().await,
                    }
                }, if offer.is_some() =>
                {
                    offer = None;
                    if let Some(local) = &local {
                        local.settled();
                    }
                    match outcome {
                        Ok(Handed::Granted(hold)) => return Ok(Some(handed(hold))),
                        // The unlock message is on its way to every waiter: hear it as they do.
                        Ok(Handed::Freed) => nap_on = true,
                        _ => ask_server = true,
                    }
                }
            }
        }
    })
    .await
}

/// Sleeps until `until`, or the deadline if sooner.
async fn hold_back(until: Instant, deadline: Option<Instant>) {
    tokio::time::sleep_until(deadline.map_or(until, |d| d.min(until))).await;
}

use crate::deadline::ATTEMPT_GRACE;

/// `attempt`'s answer, unless `deadline` passes first (the attempt is dropped then, and repairs
/// what it may have done).
use crate::clock::no_answer_in_time;
use crate::deadline::within;
