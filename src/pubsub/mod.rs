//! The pub/sub hub: one subscription connection per client, shared by every waiter.
//!
//! Waiters register interest in a channel and get a [`Subscription`]; the first one for a
//! channel makes the hub SUBSCRIBE, the last one to leave makes it UNSUBSCRIBE. One task owns the
//! connection, so subscribe and unsubscribe reach Redis in the order they were asked for. A
//! message `1` wakes every local waiter of its channel, any other message wakes one (rotating).
//! When the connection drops, the task reconnects, subscribes every channel again and wakes all
//! waiters, because an unlock may have been missed meanwhile.
//!
//! A SUBSCRIBE that Redis refuses for lack of permission (an ACL user without that channel or
//! without the command) fails the waiters of that channel with [`Error::PermissionDenied`]
//! naming it, and leaves the connection and every other channel as they were.

mod task;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::{Error, Result};
use crate::map::Map;
use crate::outage::{Outage, Peer};
use crate::topology::Target;
use task::HubTask;

/// The message that wakes every waiter of a channel (Redisson: a read or write unlock).
const WAKE_ALL: &[u8] = b"1";

#[derive(Debug)]
enum Command {
    Subscribe(String),
    Unsubscribe(String),
    /// Drop the connection and open a new one (the master moved).
    Reconnect,
}

#[derive(Debug, Default)]
struct Channel {
    waiters: VecDeque<Arc<Waiter>>,
    /// SUBSCRIBE was sent and is not known to have failed.
    requested: bool,
    /// Redis confirmed the subscription on the current connection.
    confirmed: bool,
    /// Waiters to tell once the subscription is confirmed (or has failed).
    pending: Vec<oneshot::Sender<()>>,
    /// Redis' reason when it refused the last SUBSCRIBE of this channel for lack of permission.
    refused: Option<String>,
    /// Changes whenever something may have been published on the channel that this client
    /// did not hear as it happened: a message came, or the subscription started or ended.
    stamp: u64,
    /// Whom a message wakes.
    policy: Wake,
    /// When the last message came ([`Wake::Note`] channels only).
    noted: Option<tokio::time::Instant>,
}

/// Whom a message on a channel wakes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A lock's: `1` wakes every waiter, anything else one (Redisson's unlock messages).
    #[default]
    Unlock,
    /// Every message wakes every waiter (a count-down latch's: it opened, or a new count).
    All,
    /// The message is a count of free permits (a semaphore's): it wakes that many waiters.
    Count,
    /// A message wakes nobody; the hub notes when it came (see [`Hub::noted`]).
    Note,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    notify: Notify,
    /// Wake-ups handed to this waiter so far.
    wakes: AtomicU64,
    /// Wake-ups it had received when it last woke up.
    seen: AtomicU64,
    /// Wake-ups followed by an attempt that reached Redis: those are used.
    used: AtomicU64,
}

impl Waiter {
    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_one();
    }
}

#[derive(Debug, Default)]
struct Shared {
    channels: Mutex<Map<String, Channel>>,
    next_waiter: AtomicU64,
    /// Source of channel stamps: every stamp ever given out differs from every other.
    next_stamp: AtomicU64,
}

impl Shared {
    fn new_stamp(&self) -> u64 {
        self.next_stamp.fetch_add(1, Ordering::Relaxed)
    }

    fn channels(&self) -> MutexGuard<'_, Map<String, Channel>> {
        // A panic while holding this lock cannot leave the map half-changed in a way that
        // matters more than losing every waiter, so the poison flag is ignored.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake_one(channels: &mut Map<String, Channel>, name: &str) {
        if let Some(channel) = channels.get_mut(name)
            && let Some(waiter) = channel.waiters.pop_front()
        {
            waiter.wake();
            channel.waiters.push_back(waiter);
        }
    }

    fn wake_all_of(channel: &Channel) {
        for waiter in &channel.waiters {
            waiter.wake();
        }
    }
}

/// The client's pub/sub hub. Dropping it (with every subscription) stops its task.
#[derive(Debug)]
pub(crate) struct Hub {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Hub {
    /// Starts the hub's task. It connects when the first channel is subscribed; its outages are
    /// logged as `peer`'s.
    pub(crate) fn start(
        target: Target,
        sharded: bool,
        timeouts: (Duration, Duration),
        peer: Peer,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let (commands, rx) = mpsc::unbounded_channel();
        let outage = Outage::new("pub/sub", peer);
        let task = HubTask::new(shared.clone(), target, sharded, timeouts, outage);
        runtime.spawn(task.run(rx));
        Hub { shared, commands }
    }

    /// What makes the hub drop its connection and subscribe everything again on a new one (to
    /// wherever the master is now), waking every waiter.
    pub(crate) fn reconnector(&self) -> impl Fn() + Send + Sync + 'static {
        let commands = self.commands.clone();
        move || {
            let _ = commands.send(Command::Reconnect);
        }
    }

    /// Registers a waiter on `channel` and waits (at most `budget`) until Redis confirms the
    /// subscription. A subscription that could not be confirmed still works once the hub
    /// reconnects; meanwhile the waiter relies on its re-check timer.
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`] when Redis refused to subscribe the channel.
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    pub(crate) async fn subscribe(&self, channel: &str, budget: Duration) -> Result<Subscription> {
        self.subscribe_with(channel, budget, Wake::Unlock).await
    }

    /// As [`subscribe`](Self::subscribe), on a channel whose messages wake as `policy` says.
    pub(crate) async fn subscribe_with(
        &self,
        channel: &str,
        budget: Duration,
        policy: Wake,
    ) -> Result<Subscription> {
        let waiter = Arc::new(Waiter {
            id: self.shared.next_waiter.fetch_add(1, Ordering::Relaxed),
            notify: Notify::new(),
            wakes: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            used: AtomicU64::new(0),
        });
        let confirmed = {
            let mut channels = self.shared.channels();
            let entry = channels.entry(channel.to_owned()).or_default();
            entry.policy = policy;
            entry.waiters.push_back(waiter.clone());
            if entry.confirmed {
                None
            } else {
                let (tx, rx) = oneshot::channel();
                entry.pending.push(tx);
                if !entry.requested {
                    entry.requested = true;
                    entry.refused = None;
                    let _ = self.commands.send(Command::Subscribe(channel.to_owned()));
                }
                Some(rx)
            }
        };
        let subscription = Subscription {
            shared: self.shared.clone(),
            commands: self.commands.clone(),
            channel: channel.to_owned(),
            waiter,
        };
        if let Some(rx) = confirmed {
            let _ = tokio::time::timeout(budget, rx).await;
        }
        subscription.refusal()?;
        Ok(subscription)
    }
}

impl Hub {
    /// Whether the hub is subscribed to `channel` right now (Redis confirmed it on the current
    /// connection): the releasing side of a handover counts its own subscriber with this.
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        self.stamp(channel).is_some()
    }

    /// While the hub is subscribed to `channel`, a stamp that stays the same as long as nothing
    /// has been published there: two equal stamps mean the hub was subscribed all along in
    /// between and heard no message. `None` while not subscribed.
    pub(crate) fn stamp(&self, channel: &str) -> Option<u64> {
        self.shared
            .channels()
            .get(channel)
            .and_then(|c| c.confirmed.then_some(c.stamp))
    }

    /// When the last message on `channel`, a [`Wake::Note`] channel, came (`None`: none while
    /// subscribed).
    pub(crate) fn noted(&self, channel: &str) -> Option<tokio::time::Instant> {
        self.shared.channels().get(channel).and_then(|c| c.noted)
    }
}

/// A waiter's registration on one channel. Dropping it unregisters the waiter.
#[derive(Debug)]
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    waiter: Arc<Waiter>,
}

impl Subscription {
    /// Resolves when a message (or a reconnection) wakes this waiter. A wake-up that arrived
    /// while nobody was listening is kept, so none is missed between two attempts.
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`] when Redis refused to subscribe the channel (this wakes the
    /// waiter too): no message will come.
    pub(crate) async fn woken(&self) -> Result<()> {
        self.waiter.notify.notified().await;
        let wakes = self.waiter.wakes.load(Ordering::Acquire);
        self.waiter.seen.store(wakes, Ordering::Release);
        self.refusal()
    }

    /// The refusal of the channel's subscription, if Redis refused it.
    fn refusal(&self) -> Result<()> {
        match self
            .shared
            .channels()
            .get(&self.channel)
            .and_then(|c| c.refused.clone())
        {
            Some(reason) => Err(Error::PermissionDenied {
                what: format!("SUBSCRIBE {}", self.channel),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// An attempt made after the last wake-up got its answer from Redis: that wake-up is used.
    /// One that was not (the waiter gave up, or its attempt failed) is passed on when the
    /// subscription is dropped.
    pub(crate) fn used(&self) {
        let seen = self.waiter.seen.load(Ordering::Acquire);
        self.waiter.used.store(seen, Ordering::Release);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        channel.waiters.retain(|w| w.id != self.waiter.id);
        let empty = channel.waiters.is_empty();
        if self.waiter.wakes.load(Ordering::Acquire) > self.waiter.used.load(Ordering::Acquire) {
            // This waiter was handed the wake-up of an unlock and leaves without using it:
            // pass it on, or another local waiter sleeps until its re-check.
            Shared::wake_one(&mut channels, &self.channel);
        }
        if empty {
            let _ = self
                .commands
                .send(Command::Unsubscribe(self.channel.clone()));
        }
    }
}
