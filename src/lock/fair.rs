//! The fair lock's scripts: grants in arrival order, waiters keep their place by calling again,
//! in a queue shared with Java Redisson clients.

use std::sync::Arc;
use std::time::Duration;

use crate::config::FairQueue;
use crate::lock::ops::LockOps;
use crate::lock::ops::{ReleaseRequest, TAKEOVER_POLL_MS, Want, flag};
use crate::lock::owner::Owner;
use crate::lock::plain::UNLOCK_MESSAGE;
use crate::script::{
    FAIR_ACQUIRE, FAIR_LEAVE, FAIR_RELEASE, LOCK_FORCE_UNLOCK, LOCK_REPAIR, ScriptCall,
};
use crate::watchdog::RenewTarget;
use crate::{names, slots};

/// A fair lock, Redisson's `RFairLock`: an [`RLock`](crate::RLock) that grants in the order the
/// waiters arrived, also when Java Redisson clients wait in the same queue.
///
/// Besides the lock hash it keeps Redisson's queue `redisson_lock_queue:{name}` (owners) and
/// `redisson_lock_timeout:{name}` (owner → when the waiter's turn times out), and a key of its
/// own, `ferrisson_fair_alive:{name}` (owner → the server time by which a ferrisson waiter must
/// call again). Turns mean what Redisson's do: a waiter joins with a turn one
/// [thread wait time](crate::ClientBuilder::fair_lock_thread_wait_time) W (5 min by default)
/// after the turn of the waiter ahead (or after the holder's lease), and every grant and every
/// waiter that gives up brings the turns behind it W forward, whichever client ran it. A waiting
/// `lock()` calls again at least every third of the client's
/// [fair lock queue timeout](crate::ClientBuilder::fair_lock_queue_timeout) (5 s by default):
/// each call moves its deadline on and keeps its turn at least W after those of the waiters
/// ahead, counted from now, so a live waiter keeps its place for as long as it waits while one
/// whose process died loses it within the queue timeout. Java waiters are judged by their turn
/// alone, as Redisson judges them. A waiter whose `lock()` future is dropped, or whose
/// `try_lock_for` budget runs out, leaves the queue at once; `try_lock()` never joins it. A
/// release wakes the first waiter on its own channel, `redisson_lock__channel:{name}:<owner>`.
/// ferrisson reads time from the Redis server (`TIME`), never from a client's clock; Java
/// clients use their own clocks, so a Java host whose clock runs ahead of the server's judges
/// turns to have timed out early by that much.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let lock: ferrisson::RFairLock = client.get_fair_lock("print-queue");
/// let guard = lock.lock().await?; // served after everybody who asked before
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type RFairLock = crate::RLock;

#[derive(Debug)]
pub(crate) struct FairOps {
    name: Arc<str>,
    queue: String,
    /// Redisson's turn timeouts: owner → ms.
    turns: String,
    /// ferrisson waiters' deadlines to call again: owner → server time in ms.
    alive: String,
    /// The fencing counter of the lock's cluster slot.
    counter: String,
    /// `redisson_lock__channel:{name}`; a waiter's channel is `<prefix>:<owner>`.
    channel_prefix: String,
    queue_timeout: Duration,
    thread_wait: Duration,
}

impl FairOps {
    pub(crate) fn new(name: &str, settings: FairQueue) -> Self {
        FairOps {
            name: Arc::from(name),
            queue: names::derived("redisson_lock_queue", name),
            turns: names::derived("redisson_lock_timeout", name),
            alive: names::derived("ferrisson_fair_alive", name),
            counter: slots::token_counter(name),
            channel_prefix: names::lock_channel(name),
            queue_timeout: settings.timeout,
            thread_wait: settings.thread_wait,
        }
    }

    fn thread_wait_ms(&self) -> u64 {
        self.thread_wait.as_millis() as u64
    }
}

impl LockOps for FairOps {
    fn family(&self) -> &'static str {
        "fair"
    }

    fn kind(&self) -> &'static str {
        "fair"
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channel(&self, owner: &Owner) -> Arc<str> {
        format!("{}:{}", self.channel_prefix, owner.id()).into()
    }

    fn renewal(&self, owner: &Owner) -> RenewTarget {
        RenewTarget::HashField {
            key: self.name.clone(),
            field: owner.id().clone(),
        }
    }

    fn acquire(&self, owner: &Owner, lease_ms: u64, want: Want) -> ScriptCall {
        let waiting = want.waiting;
        ScriptCall::new(&FAIR_ACQUIRE)
            .key(&*self.name)
            .key(&self.queue)
            .key(&self.turns)
            .key(&self.counter)
            .key(&self.alive)
            .arg(&**owner.id())
            .arg(lease_ms)
            .arg(self.queue_timeout.as_millis() as u64)
            .arg(flag(waiting))
            .arg(&self.channel_prefix)
            .arg(want.hold_flag())
            .arg(self.thread_wait_ms())
            .arg(want.takeover.then_some(TAKEOVER_POLL_MS))
    }

    fn release(&self, owner: &Owner, lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall {
        ScriptCall::new(&FAIR_RELEASE)
            .key(&*self.name)
            .key(&self.queue)
            .key(&self.turns)
            .key_concat(&names::unlock_latch_pieces(&self.name, request.id))
            .key(&self.alive)
            .arg(&**owner.id())
            .arg(lease_ms)
            .arg(request.latch_ttl_ms)
            .arg(&self.channel_prefix)
            .arg(request.resend_flag())
    }

    fn repair(&self, owner: &Owner, holds: u32, lease_ms: u64) -> ScriptCall {
        ScriptCall::new(&LOCK_REPAIR)
            .key(&*self.name)
            .key(&self.channel_prefix)
            .key(&self.queue)
            .arg(&**owner.id())
            .arg(holds)
            .arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
    }

    fn force_unlock(&self) -> ScriptCall {
        ScriptCall::new(&LOCK_FORCE_UNLOCK)
            .key(&*self.name)
            .key(&self.channel_prefix)
            .key(&self.queue)
            .arg(UNLOCK_MESSAGE)
    }

    fn max_nap(&self) -> Option<Duration> {
        Some(self.queue_timeout / 3)
    }

    fn queues(&self) -> bool {
        true
    }

    fn leave(&self, owner: &Owner) -> Option<ScriptCall> {
        Some(
            ScriptCall::new(&FAIR_LEAVE)
                .key(&*self.name)
                .key(&self.queue)
                .key(&self.turns)
                .key(&self.alive)
                .arg(&**owner.id())
                .arg(&self.channel_prefix)
                .arg(self.thread_wait_ms()),
        )
    }
}
