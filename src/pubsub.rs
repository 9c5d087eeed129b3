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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};

use crate::deadline::capped;
use crate::error::{Error, Result, permission_refusal};
use crate::link::{Event, Link};
use crate::map::Map;
use crate::topology::Target;

/// The message that wakes every waiter of a channel (Redisson: a read or write unlock).
const WAKE_ALL: &[u8] = b"1";

/// How long the hub waits between two reconnection attempts while waiters need it.
const RECONNECT_DELAY: Duration = Duration::from_millis(200);

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
    /// Starts the hub's task. It connects when the first channel is subscribed.
    pub(crate) fn start(
        target: Target,
        sharded: bool,
        connection_timeout: Duration,
        response_timeout: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let (commands, rx) = mpsc::unbounded_channel();
        let task = HubTask {
            shared: shared.clone(),
            target,
            sharded,
            connection_timeout,
            response_timeout,
            conn: None,
        };
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

struct HubTask {
    shared: Arc<Shared>,
    target: Target,
    sharded: bool,
    connection_timeout: Duration,
    response_timeout: Duration,
    conn: Option<Link>,
}

impl HubTask {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        loop {
            let reconnect_due = self.conn.is_none() && !self.shared.channels().is_empty();
            tokio::select! {
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(channel)) => self.subscribe(channel).await,
                    Some(Command::Unsubscribe(channel)) => self.unsubscribe(channel).await,
                    Some(Command::Reconnect) => {
                        tracing::warn!("the master moved; moving the pub/sub connection");
                        self.disconnected();
                        self.ensure_connected().await;
                    }
                },
                event = Link::next(&mut self.conn) => match event {
                    Event::Message { channel, payload } => self.dispatch(&channel, &payload),
                    Event::Dropped(channel) => self.dropped(channel).await,
                    Event::Resumed => {
                        tracing::warn!("pub/sub connection to a node was cut and came back; waking every waiter");
                        self.resumed();
                    }
                    Event::Lost => {
                        tracing::warn!("pub/sub connection lost; reconnecting");
                        self.disconnected();
                        self.ensure_connected().await;
                    }
                },
                () = tokio::time::sleep(RECONNECT_DELAY), if reconnect_due => {
                    self.ensure_connected().await;
                }
            }
        }
    }

    /// The connection came back by itself, subscriptions included: a message may have been
    /// missed meanwhile, so every waiter asks again.
    fn resumed(&self) {
        for entry in self.shared.channels().values_mut() {
            entry.stamp = self.shared.new_stamp();
            Shared::wake_all_of(entry);
        }
    }

    /// The server ended the subscription of `channel` by itself (its slot moved, or its node
    /// was demoted): subscribe again while it has waiters, and wake them, since a message may
    /// have been missed.
    async fn dropped(&mut self, channel: String) {
        let wanted = match self.shared.channels().get_mut(&channel) {
            Some(entry) if entry.confirmed && !entry.waiters.is_empty() => {
                entry.confirmed = false;
                entry.stamp = self.shared.new_stamp();
                Shared::wake_all_of(entry);
                true
            }
            _ => false,
        };
        if wanted {
            tracing::warn!(channel = %channel, "the server dropped a subscription; subscribing again");
            self.subscribe_one(&channel).await;
        }
    }

    /// The connection is gone: no channel is subscribed any more.
    fn disconnected(&mut self) {
        self.conn = None;
        for entry in self.shared.channels().values_mut() {
            entry.confirmed = false;
            entry.stamp = self.shared.new_stamp();
        }
    }

    /// Makes sure there is a connection. A new one subscribes every channel that has waiters,
    /// settles every pending subscription and wakes every waiter, since an unlock may have been
    /// published while there was no connection. False when Redis cannot be reached; the
    /// waiters are then released to their re-check timers and the task tries again shortly.
    async fn ensure_connected(&mut self) -> bool {
        if self.conn.is_some() {
            return true;
        }
        match capped(
            self.connection_timeout,
            Link::open(&self.target, self.sharded),
        )
        .await
        {
            Ok(link) => self.conn = Some(link),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the pub/sub connection");
                self.settle_all(false);
                return false;
            }
        }
        let names: Vec<String> = self.shared.channels().keys().cloned().collect();
        let ok = match self.send(&names, true).await {
            Sent::Done => {
                self.settle_all(true);
                true
            }
            // Redis does not say which channel it refused: ask for each on its own.
            Sent::Refused(_) => {
                let mut ok = true;
                for name in &names {
                    if !self.subscribe_one(name).await {
                        ok = false;
                        break;
                    }
                }
                ok
            }
            Sent::Failed => {
                self.settle_all(false);
                false
            }
        };
        if ok {
            for channel in self.shared.channels().values() {
                Shared::wake_all_of(channel);
            }
        }
        ok
    }

    async fn subscribe(&mut self, channel: String) {
        if !self.shared.channels().contains_key(&channel) {
            return;
        }
        if self.conn.is_none() {
            // A new connection subscribes this channel along with all the others.
            self.ensure_connected().await;
            return;
        }
        self.subscribe_one(&channel).await;
    }

    /// Subscribes one channel on the current connection and settles its waiters; false when
    /// the connection failed (every waiter is then released to its re-check timer).
    async fn subscribe_one(&mut self, channel: &str) -> bool {
        match self.send(&[channel.to_owned()], true).await {
            Sent::Done => {
                self.settle(channel, true);
                true
            }
            Sent::Refused(reason) => {
                self.refuse(channel, reason);
                true
            }
            Sent::Failed => {
                self.settle_all(false);
                false
            }
        }
    }

    async fn unsubscribe(&mut self, channel: String) {
        let subscribed = {
            let mut channels = self.shared.channels();
            match channels.get(&channel) {
                Some(entry) if entry.waiters.is_empty() => {
                    let subscribed = entry.confirmed;
                    channels.remove(&channel);
                    subscribed
                }
                _ => return,
            }
        };
        // A channel Redis refused was never subscribed.
        if subscribed
            && self.conn.is_some()
            && let Sent::Refused(reason) = self.send(std::slice::from_ref(&channel), false).await
        {
            tracing::warn!(
                channel = %channel,
                reason = %reason,
                "redis refused UNSUBSCRIBE for lack of permission; the channel stays subscribed \
                 on this connection and its messages are ignored"
            );
        }
    }

    /// Sends SUBSCRIBE or UNSUBSCRIBE for `names`. A failure drops the connection (the task
    /// reconnects shortly); a refusal for lack of permission leaves it as it was.
    async fn send(&mut self, names: &[String], subscribe: bool) -> Sent {
        let Some(link) = self.conn.as_mut() else {
            return Sent::Failed;
        };
        if names.is_empty() {
            return Sent::Done;
        }
        let result = if subscribe {
            capped(self.response_timeout, link.subscribe(names)).await
        } else {
            capped(self.response_timeout, link.unsubscribe(names)).await
        };
        match result {
            Ok(()) => Sent::Done,
            Err(e) => match permission_refusal(&e) {
                Some(reason) => Sent::Refused(reason),
                None => {
                    tracing::warn!(error = %e, subscribe, "pub/sub request failed; reconnecting");
                    self.disconnected();
                    Sent::Failed
                }
            },
        }
    }

    /// Redis refused to subscribe `name`: its waiters are told (they fail with the reason), and
    /// the next waiter of the channel asks again.
    fn refuse(&self, name: &str, reason: String) {
        tracing::warn!(
            channel = %name,
            reason = %reason,
            "redis refused SUBSCRIBE for lack of permission; the channel's waiters fail"
        );
        if let Some(entry) = self.shared.channels().get_mut(name) {
            entry.refused = Some(reason);
            self.settle_entry(entry, false);
            Shared::wake_all_of(entry);
        }
    }

    /// A SUBSCRIBE of `name` was confirmed: release the waiters waiting for it.
    fn settle(&self, name: &str, ok: bool) {
        if let Some(entry) = self.shared.channels().get_mut(name) {
            self.settle_entry(entry, ok);
        }
    }

    fn settle_all(&self, ok: bool) {
        for entry in self.shared.channels().values_mut() {
            self.settle_entry(entry, ok);
        }
    }

    /// Records a subscription's state and releases its pending waiters. A failed one is not
    /// "requested" any more, so the next waiter asks again.
    fn settle_entry(&self, entry: &mut Channel, ok: bool) {
        entry.confirmed = ok;
        entry.stamp = self.shared.new_stamp();
        entry.requested = ok;
        if ok {
            entry.refused = None;
        }
        for tx in entry.pending.drain(..) {
            let _ = tx.send(());
        }
    }

    fn dispatch(&self, name: &str, payload: &[u8]) {
        let mut channels = self.shared.channels();
        let Some(channel) = channels.get_mut(name) else {
            return;
        };
        channel.stamp = self.shared.new_stamp();
        let wake = match channel.policy {
            Wake::Note => {
                channel.noted = Some(tokio::time::Instant::now());
                0
            }
            Wake::All => usize::MAX,
            Wake::Unlock if payload == WAKE_ALL => usize::MAX,
            Wake::Unlock => 1,
            // A count that cannot be read still wakes one, which asks Redis.
            Wake::Count => std::str::from_utf8(payload)
                .ok()
                .and_then(|p| p.parse::<i64>().ok())
                .map_or(1, |n| usize::try_from(n).unwrap_or(0)),
        };
        if wake >= channel.waiters.len() {
            Shared::wake_all_of(channel);
        } else {
            for _ in 0..wake {
                Shared::wake_one(&mut channels, name);
            }
        }
    }
}

/// How a SUBSCRIBE or UNSUBSCRIBE went.
enum Sent {
    Done,
    /// Redis refused it for lack of permission (its reason); the connection is fine.
    Refused(String),
    /// The connection failed; it was dropped.
    Failed,
}
