//! `MultiLock`: several locks taken as one, all or nothing.

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

use futures::future::join_all;

use tokio::time::Instant;

use crate::combinator::{PartFuture, failures, give_back_all, release_all};
use crate::error::{Error, Result};
use crate::lock::scope::Scoped;
use crate::lock::{LockGuard, RLock, lease_ms};

/// Several locks, from one or several clients, taken as one: all of them or none.
///
/// The locks are always acquired in one canonical order (by name, then server, then kind), so two
/// MultiLocks over the same locks never deadlock, whatever order they were given in. On any
/// failure, or when the wait budget runs out, every part already acquired is released before the
/// call returns. Parts may be any lock handles: plain, fair, read or write sides.
///
/// With a fixed lease ([`lock_with_lease`](Self::lock_with_lease),
/// [`try_lock_for`](Self::try_lock_for) with `Some(lease)`), the parts taken first are held on
/// a renewed lease while the later ones are waited for, and get the fixed lease only once all
/// are held (one more round trip, in parallel over the parts), each checked to be still held
/// then. A guard is never returned while a part is lost: a part lost meanwhile (forced open)
/// makes the MultiLock release everything and start over, within the wait budget.
///
/// A part that fails is named in the error: [`Error::Part`] gives its lock's name and its
/// client's server. Every future of a MultiLock and of its guard is `Send`, so it can be handed
/// to `tokio::spawn` once the MultiLock (cheap to clone) is moved in.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::MultiLock;
///
/// let transfer = MultiLock::new([client.get_lock("account:1"), client.get_lock("account:2")]);
/// let guard = transfer.lock().await?;
/// // ... move money between both accounts ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    locks: Vec<RLock>,
}

impl MultiLock {
    /// A MultiLock over `locks`. One acquisition takes all parts as one owner: a lock given
    /// twice (the same handle, or another of the same client and name) is one more hold of its
    /// first part.
    pub fn new(locks: impl IntoIterator<Item = RLock>) -> Self {
        let mut locks: Vec<RLock> = locks.into_iter().collect();
        locks.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        MultiLock { locks }
    }

    fn check(&self) -> Result<()> {
        if self.locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a MultiLock needs at least one lock".into(),
            ));
        }
        self.locks.iter().try_for_each(RLock::check)
    }

    /// Waits until every part is acquired (watchdog leases).
    ///
    /// # Errors
    ///
    /// The first part that fails, as [`Error::Part`] (its lock's name, its server and its own
    /// error), after every part acquired so far was released; [`Error::InvalidArgument`] for an
    /// empty MultiLock or a malformed name, before anything is sent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: parts acquired so far are released in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// multi.lock().await?.unlock().await?;
    ///
    /// // Or in a task of its own.
    /// let task = tokio::spawn(async move { multi.lock().await });
    /// match task.await.expect("the task ran") {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(ferrisson::Error::Part { name, address, error }) => {
    ///         eprintln!("lock {name} on {address} failed: {error}");
    ///     }
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> impl Future<Output = Result<MultiGuard>> + Send + '_ {
        self.lock_at(Location::caller())
    }

    /// [`lock`](Self::lock), called `at` (where every part's hold is said to be taken).
    pub(crate) async fn lock_at(&self, at: &'static Location<'static>) -> Result<MultiGuard> {
        self.acquire(None, None, at)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the locks"))
    }

    /// Waits until every part is acquired, each with the fixed `lease`.
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
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// multi.lock_with_lease(std::time::Duration::from_secs(10)).await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<MultiGuard>> + Send + '_ {
        self.lock_with_lease_at(lease, Location::caller())
    }

    /// [`lock_with_lease`](Self::lock_with_lease), called `at`.
    pub(crate) async fn lock_with_lease_at(
        &self,
        lease: Duration,
        at: &'static Location<'static>,
    ) -> Result<MultiGuard> {
        self.acquire(None, Some(lease), at)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the locks"))
    }

    /// One attempt at every part: `Ok(None)` when any part is taken, with every part it took
    /// released on its server before it returns.
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
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = multi.try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> impl Future<Output = Result<Option<MultiGuard>>> + Send + '_ {
        self.acquire(Some(Duration::ZERO), None, Location::caller())
    }

    /// Waits at most `wait` for all parts together; `lease` fixes every part's lease.
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease). Running out of `wait` is `Ok(None)`, with
    /// nothing held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = multi.try_lock_for(Duration::from_secs(1), None).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<MultiGuard>>> + Send + '_ {
        self.acquire(Some(wait), lease, Location::caller())
    }

    /// Takes every part, waiting at most `wait` (`None`: for ever); called `at`.
    pub(crate) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        at: &'static Location<'static>,
    ) -> Result<Option<MultiGuard>> {
        self.check()?;
        // A client that drains (or is closed) refuses the acquisition whole, before any part;
        // a part nested in a hold whose work runs (one more hold of it) is let through a drain,
        // as a single nested acquisition is.
        self.locks
            .iter()
            .try_for_each(|lock| match lock.nested_here() {
                true => lock.core().open(),
                false => lock.core().accepting(),
            })?;
        let lease_ms = lease.map(lease_ms).transpose()?;
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        loop {
            // Every part but the last is taken on a watchdog lease, renewed while the later
            // parts are waited for: a fixed lease taken early could run out (and the part be
            // taken by somebody else) before the last part is ours.
            let Some(mut guards) = self.acquire_parts(deadline, lease, at).await? else {
                return Ok(None);
            };
            // Then the earlier parts get the fixed lease, each checked to be still ours.
            let last = guards.len() - 1;
            let held = match lease_ms {
                Some(ms) => {
                    let early = guards[..last].iter_mut().map(|guard| {
                        let part = guard.part();
                        let fix: PartFuture<'_, _> = Box::pin(async move {
                            guard.fix_lease(ms).await.map_err(|e| part.failed(e))
                        });
                        fix
                    });
                    let mut held = true;
                    let mut errors = Vec::new();
                    for fixed in join_all(early).await {
                        match fixed {
                            Ok(still_held) => held &= still_held,
                            Err(e) => errors.push(e),
                        }
                    }
                    if let Some(e) = failures(errors) {
                        give_back(guards).await;
                        return Err(e);
                    }
                    held
                }
                None => !guards.iter().any(LockGuard::is_lost),
            };
            if held {
                return Ok(Some(MultiGuard { guards }));
            }
            // A part was lost while the others were waited for (forced open, say): start over.
            give_back(guards).await;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Takes every part in order within `deadline`, all but the last on a watchdog lease, the
    /// last with `lease`; `None` (with nothing held) when the deadline passes.
    async fn acquire_parts(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
        at: &'static Location<'static>,
    ) -> Result<Option<Vec<LockGuard>>> {
        // Parts dropped on an early return release themselves in the background; releasing them
        // here first keeps "nothing held" true when the call returns.
        let mut guards = Vec::with_capacity(self.locks.len());
        // One acquisition for all parts: each part is taken inside the scopes of the parts
        // before it, so a lock given twice is one more hold of its first part, not a wait for it.
        let mut entries = Vec::with_capacity(self.locks.len());
        for (i, lock) in self.locks.iter().enumerate() {
            let lease = lease.filter(|_| i + 1 == self.locks.len());
            let take = async {
                match (deadline, lease) {
                    (None, None) => lock.lock_at(at).await.map(Some),
                    (None, Some(lease)) => lock.lock_with_lease_at(lease, at).await.map(Some),
                    (Some(deadline), lease) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        lock.try_lock_for_at(left, lease, at).await
                    }
                }
            };
            let take: PartFuture<'_, _> = Box::pin(Scoped::new(entries.clone(), take));
            match take.await {
                Ok(Some(guard)) => {
                    entries.push(guard.entry());
                    guards.push(guard);
                }
                Ok(None) => {
                    give_back(guards).await;
                    return Ok(None);
                }
                Err(e) => {
                    give_back(guards).await;
                    return Err(lock.part().failed(e));
                }
            }
        }
        Ok(Some(guards))
    }
}

/// Gives back the parts of an acquisition that will not be handed out; a part that cannot be
/// given back is left to its lease, as a dropped guard's would be.
async fn give_back(guards: Vec<LockGuard>) {
    if let Err(e) = give_back_all(guards).await {
        tracing::debug!(error = %e, "a MultiLock could not give back a part; its lease frees it");
    }
}

/// All parts of a [`MultiLock`], held. Released with [`unlock`](Self::unlock); dropped, each part
/// is released in the background.
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// Releases every part, all at once, and reports every failure.
    ///
    /// # Errors
    ///
    /// [`Error::Multiple`] with one [`Error::Part`] per part that could not be released, naming
    /// its lock and server (the others are released all the same).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: releases not yet done finish in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock().await?;
    /// if let Err(ferrisson::Error::Multiple { errors }) = guard.unlock().await {
    ///     for e in errors {
    ///         eprintln!("{e}"); // lock `account:2` on 10.0.0.2:6379: redis request failed: ...
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        release_all(self.guards).await
    }

    /// True once any part's lease is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when any part's lease is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("a part was lost: stop"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// guard.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let parts = self.guards.iter().map(|g| Box::pin(g.lost()));
        futures::future::select_all(parts).await;
    }

    /// The parts' guards, in acquisition order.
    pub fn parts(&self) -> &[LockGuard] {
        &self.guards
    }
}
