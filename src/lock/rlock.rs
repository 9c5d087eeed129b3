//! `RLock`: the lock handle. Every lock kind (plain, fair, the read and write sides of a
//! read-write lock) is an `RLock` over its own scripts, as in Redisson.

use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::lock::guard::LockGuard;
use crate::lock::handle::ClientLocks;
use crate::lock::handle::{Handle, PartOf};
use crate::lock::holder::LeaseMode;
use crate::lock::lease_ms;
use crate::lock::ops::LockOps;
use crate::lock::plain::PlainOps;
use crate::names;

/// A reentrant distributed lock, Redisson's `RLock`, with a fencing token on every grant.
///
/// From [`Client::get_lock`](crate::Client::get_lock) it is a plain lock: in Redis a hash named like the lock, holding one
/// field `<client-uuid>:<n>` (the owner) whose value is the hold count, with a TTL equal to the
/// lease. A release that frees it publishes `0` on `redisson_lock__channel:{name}`, which wakes
/// the waiters. A Java service using Redisson's `RLock` on the same name contends with it
/// correctly. [`Client::get_fair_lock`](crate::Client::get_fair_lock) and the two sides of a
/// [`RReadWriteLock`](crate::RReadWriteLock) are `RLock`s too, with the same methods.
///
/// A hold belongs to its acquisition: every `lock`, `try_lock*` and `lock_with_lease` is an
/// owner of its own, so two acquisitions exclude each other whatever task, thread, handle or
/// future they come from (futures of one task in `join!`, `select!` or `buffer_unordered`, and
/// guards handed to workers, included), as with `tokio::sync::Mutex`. Reentrancy is nesting,
/// made explicit: an acquisition of the same lock (through any handle of the client and name)
/// made inside [`with_lock`](Self::with_lock)'s work or a guard's
/// [`scope`](crate::LockGuard::scope), or taken with [`LockGuard::reenter`](crate::LockGuard::reenter), is one more
/// hold of that acquisition (same fencing token, no wait; each guard gives back one hold). A
/// second `lock()` outside any scope waits, even in the task that holds the lock.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::sync::Arc;
///
/// let shared = Arc::new(client.get_lock("orders"));
/// let mut workers = Vec::new();
/// for _ in 0..4 {
///     let lock = shared.clone();
///     // Four acquisitions: one at a time inside.
///     workers.push(tokio::spawn(async move {
///         let inner = lock.clone();
///         lock.with_lock(|token| async move {
///             // nested in the hold's work: one more hold, same token, no wait
///             let again = inner.lock().await?;
///             assert_eq!(again.fencing_token(), token);
///             again.unlock().await
///         })
///         .await?
///     }));
/// }
/// for worker in workers {
///     worker.await.expect("worker")?;
/// }
/// # Ok(()) }
/// ```
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let lock = client.get_lock("nightly-report");
/// match lock.try_lock_for(Duration::from_secs(5), None).await? {
///     Some(guard) => {
///         println!("got it, token {}", guard.fencing_token());
///         guard.unlock().await?;
///     }
///     None => println!("still busy after 5 s"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RLock {
    handle: Arc<Handle>,
    /// Why the name was refused, reported by every operation.
    invalid: Option<Arc<str>>,
}

impl RLock {
    pub(crate) fn new(core: Arc<Core>, locks: Arc<ClientLocks>, name: &str) -> Self {
        let ops = Box::new(PlainOps::new(name, core.config.starvation));
        Self::of(core, locks, ops)
    }

    /// An RMutex's handle: a plain lock observed as a `mutex`, each acquire its own owner.
    pub(crate) fn mutex(core: Arc<Core>, locks: Arc<ClientLocks>, name: &str) -> Self {
        let ops = Box::new(PlainOps::mutex(name, core.config.starvation));
        Self::from_handle(Handle::single(core, locks, ops))
    }

    /// A handle on the lock `ops` works on, whose acquires nest in their holds' scopes.
    pub(crate) fn of(core: Arc<Core>, locks: Arc<ClientLocks>, ops: Box<dyn LockOps>) -> Self {
        Self::from_handle(Handle::new(core, locks, ops))
    }

    fn from_handle(handle: Handle) -> Self {
        RLock {
            invalid: names::validate(handle.name()).err().map(Arc::from),
            handle: Arc::new(handle),
        }
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.handle.core
    }

    /// Whether an acquisition of this lock made here would nest in a hold whose scope the
    /// caller runs in.
    pub(crate) fn nested_here(&self) -> bool {
        self.handle.nesting().is_some()
    }

    /// This lock as a combinator's part, to name it in an error.
    pub(crate) fn part(&self) -> PartOf {
        PartOf::of(&self.handle)
    }

    /// The order in which combinators acquire: by name, then server, then kind, so every
    /// MultiLock over the same locks takes them in the same order.
    pub(crate) fn order_key(&self) -> (&str, &str, &'static str) {
        (
            self.name(),
            &self.handle.core.config.url,
            self.handle.ops.kind(),
        )
    }

    /// The client's watchdog timeout: the lease `lock()` takes.
    pub(crate) fn watchdog_lease(&self) -> Duration {
        self.handle.core.config.watchdog_timeout
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The Redis key of the counter this lock's fencing tokens come from:
    /// `ferrisson_token:{<tag>}`, one per cluster slot and shared by every lock name in that
    /// slot, so locking many distinct names leaves at most 16,384 counters behind. A fenced
    /// lock's grants also count in Redisson's per-name `redisson_lock_token:{name}` (see
    /// [`RFencedLock`](crate::RFencedLock)). For monitoring and ACL rules; never expire or
    /// delete it, or tokens may go backwards.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let key = client.get_lock("orders:42").token_counter_key();
    /// assert!(key.starts_with("ferrisson_token:{"));
    /// # }
    /// ```
    pub fn token_counter_key(&self) -> String {
        crate::slots::token_counter(self.name())
    }

    pub(crate) fn check(&self) -> Result<()> {
        match &self.invalid {
            Some(why) => Err(Error::InvalidArgument(why.to_string())),
            None => Ok(()),
        }
    }

    /// Waits until the lock is acquired. The lease is the client's watchdog timeout (30 s by
    /// default), renewed every third of it while the guard lives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed name, [`Error::WrongType`] when the key holds
    /// something else, [`Error::Redis`] when Redis fails or does not answer within the response
    /// timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no hold behind. A grant that was on
    /// its way when the future was dropped, or a lock another owner of this client was handing
    /// over to it, is given back by a background repair.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_lock("cart:7").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> impl Future<Output = Result<LockGuard>> + Send + '_ {
        self.lock_at(Location::caller())
    }

    /// [`lock`](Self::lock), called `at` (the place its hold is said to be taken).
    pub(crate) async fn lock_at(&self, at: &'static Location<'static>) -> Result<LockGuard> {
        self.check()?;
        self.handle
            .acquire_at(LeaseMode::Watchdog, None, at)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the lock"))
    }

    /// Waits until the lock is acquired, with a fixed `lease` that is never renewed: the lock
    /// frees itself when the lease runs out, and the guard then reports itself lost.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::InvalidArgument`] for a lease under 1 ms.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.get_lock("job").lock_with_lease(Duration::from_secs(10)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<LockGuard>> + Send + '_ {
        self.lock_with_lease_at(lease, Location::caller())
    }

    /// [`lock_with_lease`](Self::lock_with_lease), called `at`.
    pub(crate) async fn lock_with_lease_at(
        &self,
        lease: Duration,
        at: &'static Location<'static>,
    ) -> Result<LockGuard> {
        self.check()?;
        let ms = lease_ms(lease)?;
        self.handle
            .acquire_at(LeaseMode::Fixed(ms), None, at)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the lock"))
    }

    /// One attempt, no waiting: `Ok(None)` when somebody else holds the lock. The lease is
    /// renewed by the watchdog, as with [`lock`](Self::lock).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// if let Some(guard) = client.get_lock("cache-warmup").try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        self.try_lock_at(Location::caller())
    }

    /// [`try_lock`](Self::try_lock), called `at`.
    pub(crate) async fn try_lock_at(
        &self,
        at: &'static Location<'static>,
    ) -> Result<Option<LockGuard>> {
        self.check()?;
        self.handle
            .acquire_at(LeaseMode::Watchdog, Some(Duration::ZERO), at)
            .await
    }

    /// Waits at most `wait` for the lock (`Duration::ZERO`: one attempt). With `lease`, the
    /// lease is fixed and never renewed; without, the watchdog renews it.
    ///
    /// `wait` is a deadline: the call returns within it (and a few milliseconds) whatever Redis
    /// does, a paused or unreachable server included. An attempt still unanswered then is
    /// given up, and a grant it may have made is taken back in the background. With
    /// `Duration::ZERO` the one attempt is bounded by the response timeout instead (after
    /// waiting, when the connection is being reopened, up to
    /// [`ClientBuilder::reconnect_wait`](crate::ClientBuilder::reconnect_wait) for it).
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease). Running out of `wait` is `Ok(None)`, also
    /// when Redis stopped answering after it had answered an earlier attempt; when it answered
    /// none by the deadline, [`Error::Redis`] (a timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.get_lock("payments");
    /// if let Some(guard) = lock.try_lock_for(Duration::from_millis(200), Some(Duration::from_secs(5))).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        self.try_lock_for_at(wait, lease, Location::caller())
    }

    /// [`try_lock_for`](Self::try_lock_for), called `at`.
    pub(crate) async fn try_lock_for_at(
        &self,
        wait: Duration,
        lease: Option<Duration>,
        at: &'static Location<'static>,
    ) -> Result<Option<LockGuard>> {
        self.check()?;
        let mode = match lease {
            Some(lease) => LeaseMode::Fixed(lease_ms(lease)?),
            None => LeaseMode::Watchdog,
        };
        self.handle.acquire_at(mode, Some(wait), at).await
    }

    async fn inspect(&self) -> Result<crate::lock::replies::Inspection> {
        self.check()?;
        self.handle.inspect().await
    }

    /// Whether anybody holds the lock.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`], [`Error::Redis`], [`Error::InvalidArgument`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// println!("locked: {}", lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect().await?.locked)
    }

    /// Whether the hold whose scope the caller runs in (inside [`with_lock`](Self::with_lock)'s
    /// work or a guard's [`scope`](crate::LockGuard::scope), of this lock through any handle)
    /// still holds the lock, as Redis says; `false` outside any scope of it, whoever holds it
    /// (for the read side of a read-write lock: read holds; for the write side: the write
    /// lock). Redisson's `isHeldByCurrentThread`; with the guard at hand,
    /// [`LockGuard::is_lost`](crate::LockGuard::is_lost) answers without a round trip.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// assert!(!lock.is_held().await?); // outside any scope
    /// let inside = lock.with_lock(|_| async { lock.is_held().await }).await??;
    /// assert!(inside);
    /// # Ok(()) }
    /// ```
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.inspect().await?.holds > 0)
    }

    /// How many holds the hold whose scope the caller runs in has on the lock (it and those
    /// nested in it), as Redis counts them; 0 outside any scope of this lock. Redisson's
    /// `getHoldCount`; [`LockGuard::hold_count`](crate::LockGuard::hold_count) answers for a
    /// guard's own acquisition.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// lock.with_lock(|_| async {
    ///     let inner = lock.lock().await?; // nested: reentrant
    ///     assert_eq!(lock.hold_count().await?, 2);
    ///     inner.unlock().await
    /// })
    /// .await??;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        Ok(self.inspect().await?.holds)
    }

    /// The lock's remaining lease: `None` when it is free or has no TTL (a foreign holder that
    /// set none).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// if let Some(ttl) = lock.remaining_ttl().await? {
    ///     println!("free in at most {ttl:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        let pttl = self.inspect().await?.pttl;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// What Redis holds for this lock now: holders (owner, client, hold count), lease left,
    /// waiters (subscribers, a fair lock's queue with each turn and deadline, starving waiters),
    /// pending revocation requests and token counters, read in one round trip that changes
    /// nothing. See [`LockSnapshot`](crate::inspect::LockSnapshot) and the guide's
    /// [inspection page](crate::guide::inspect).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when a key of the lock holds another type, or the name holds a
    /// read-write lock; [`Error::InvalidArgument`] for a malformed name, or on a read-write
    /// lock's side (take [`RReadWriteLock::snapshot`](crate::RReadWriteLock::snapshot));
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// let snapshot = lock.snapshot().await?;
    /// for holder in &snapshot.holders {
    ///     println!("{} holds it ({} holds), {:?} left", holder.owner, holder.holds, snapshot.lease);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> Result<crate::inspect::LockSnapshot> {
        use crate::inspect::LockKind;
        self.check()?;
        let ops = &self.handle.ops;
        let kind = match (ops.kind(), ops.label()) {
            ("fair", _) => LockKind::Fair,
            (_, "fenced") => LockKind::Fenced,
            ("read" | "write", _) => {
                return Err(Error::InvalidArgument(format!(
                    "`{}` is a side of a read-write lock: take the read-write lock's snapshot",
                    self.name()
                )));
            }
            _ => LockKind::Plain,
        };
        crate::inspect::lock(&self.handle.core, self.name(), kind).await
    }

    /// Frees the lock whoever holds it, and wakes its waiters. Returns whether it was held.
    /// Holders find their guards lost at their next renewal. The fencing counter is left alone,
    /// so tokens never go backwards.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the lock may or may not have been freed when the
    /// future is dropped after it was sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// let was_held = lock.force_unlock().await?;
    /// # let _ = was_held;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        self.handle.force_unlock().await
    }

    /// Asks the current holders of the lock to let go (Apache Curator's revocation): for a
    /// read-write lock's read side, every reader; for its write side, the writer; otherwise
    /// every owner holding it. Returns how many holds were asked; 0 when nobody holds it (then
    /// nothing is recorded, and a later holder is not asked).
    ///
    /// Cooperative: a holder hears it through
    /// [`LockGuard::revocation_requested`](crate::LockGuard::revocation_requested) or
    /// [`is_revocation_requested`](crate::LockGuard::is_revocation_requested), and decides. The
    /// request lives about one lease (`ferrisson_revoke:{name}`), long enough for a holder that
    /// is not listening to learn it at its next watchdog renewal. Java Redisson clients neither
    /// see nor answer it. Use [`force_unlock`](Self::force_unlock) to take the lock away, and
    /// fencing tokens to keep a holder that ignores the request from doing harm.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds no lock;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a malformed name;
    /// [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    ///
    /// The request may or may not have been made when the future is dropped after it was sent;
    /// asking again is harmless.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// if lock.request_revocation().await? == 0 {
    ///     println!("nobody holds it");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn request_revocation(&self) -> Result<usize> {
        self.check()?;
        let holds = match self.handle.ops.kind() {
            "read" => crate::revoke::Holds::Read,
            "write" => crate::revoke::Holds::Write,
            _ => crate::revoke::Holds::Lock,
        };
        let name = self.handle.name();
        crate::revoke::request(&self.handle.core, name, name, holds).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_guards_are_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<RLock>();
        check::<LockGuard>();
    }
}
