//! The hub's task: it owns the pub/sub connection, sends SUBSCRIBE and UNSUBSCRIBE in the order
//! they were asked for, hands messages to waiters, and reconnects after an outage, as the
//! connection's [`Outage`] allows (logging it once, not at every attempt).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Channel, Command, Shared, WAKE_ALL, Wake};
use crate::deadline::capped;
use crate::error::permission_refusal;
use crate::link::{Event, Link};
use crate::outage::{Every, Outage};
use crate::topology::Target;

pub(super) struct HubTask {
    shared: Arc<Shared>,
    target: Target,
    sharded: bool,
    connection_timeout: Duration,
    response_timeout: Duration,
    conn: Option<Link>,
    outage: Outage,
    /// Reports of subscriptions the server ended by itself (one per channel of a node that
    /// failed): at most one per ten seconds.
    dropped: Every,
}

impl HubTask {
    pub(super) fn new(
        shared: Arc<Shared>,
        target: Target,
        sharded: bool,
        (connection_timeout, response_timeout): (Duration, Duration),
        outage: Outage,
    ) -> Self {
        HubTask {
            shared,
            target,
            sharded,
            connection_timeout,
            response_timeout,
            conn: None,
            outage,
            dropped: Every::new(),
        }
    }

    pub(super) async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        loop {
            let reconnect_due = self.conn.is_none() && !self.shared.channels().is_empty();
            let pause = self.outage.wait().unwrap_or(Duration::ZERO);
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
                        // redis-rs reconnected a node by itself: a loss and a return at once.
                        self.outage.lost(&"the connection to a node was cut (and is back); waking every waiter");
                        self.outage.opened();
                        self.resumed();
                    }
                    Event::Lost => {
                        self.outage.lost(&"the server closed it");
                        self.disconnected();
                        self.ensure_connected().await;
                    }
                },
                () = tokio::time::sleep(pause), if reconnect_due => {
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
            match self.dropped.due() {
                Some(left_out) => tracing::warn!(
                    channel = %channel,
                    more_since_last_report = left_out,
                    "the server dropped a subscription; subscribing again"
                ),
                None => {
                    tracing::debug!(channel = %channel, "the server dropped a subscription; subscribing again")
                }
            }
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
    /// published while there was no connection. False when Redis cannot be reached, or the
    /// next attempt is not due yet; the waiters are then released to their re-check timers and
    /// the task tries again once the backoff allows.
    async fn ensure_connected(&mut self) -> bool {
        if self.conn.is_some() {
            return true;
        }
        if self.outage.wait().is_some() {
            self.settle_all(false);
            return false;
        }
        match capped(
            self.connection_timeout,
            Link::open(&self.target, self.sharded),
        )
        .await
        {
            Ok(link) => self.conn = Some(link),
            Err(e) => {
                self.outage.failed(&e);
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
        // Back only once subscribed again: a connection that opens but cannot subscribe is an
        // attempt that failed, so the next one backs off too.
        if ok {
            self.outage.opened();
            for channel in self.shared.channels().values() {
                Shared::wake_all_of(channel);
            }
        } else {
            self.outage
                .failed(&"subscribing again on the new connection failed");
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
                    self.outage.lost(&format_args!(
                        "{} failed: {e}",
                        if subscribe {
                            "SUBSCRIBE"
                        } else {
                            "UNSUBSCRIBE"
                        }
                    ));
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
pub(super) enum Sent {
    Done,
    /// Redis refused it for lack of permission (its reason); the connection is fine.
    Refused(String),
    /// The connection failed; it was dropped.
    Failed,
}
