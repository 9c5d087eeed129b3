//! `RedLock`: the Redlock algorithm over independent Redis masters.

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use crate::combinator::{PartFuture, give_back_all, release_all};
use crate::error::{Error, Result};
use crate::lock::{LockGuard, RLock, lease_ms};

/// The Redlock algorithm over N independent Redis masters: a lock survives the loss of a
/// minority of them.
///
/// Each attempt asks every instance at once, each with a per-instance timeout much smaller than
/// the lease. It succeeds when a majority (N/2+1) granted and the remaining validity,
/// lease − elapsed − drift (drift = 1% of the lease + 2 ms, elapsed on a monotonic clock), is
/// still positive. Otherwise every instance that granted is released before the next attempt
/// (or the return), also a grant the client counts lost because its reply came past the lease:
/// its server counts the lease from when it granted, and may hold it for most of a lease yet. A
/// grant whose reply did not come within the instance timeout is repaired away in the
/// background. The next attempt comes after a random delay, within the wait budget.
///
/// Give it one lock per independent master (each from its own [`Client`](crate::Client)). With
/// the watchdog lease, each instance's client renews its part; the guard stays valid while a
/// majority of parts is confirmed ([`RedLockGuard::validity_deadline`]).
///
/// # What it can and cannot promise
///
/// - Mutual exclusion holds while clocks run at about the same rate and a majority of instances
///   keeps its data. An instance restarted **without persistence** forgets its grants: keep it
///   out of the quorum for at least one lease after a restart (delayed rejoin), or run with
///   `appendfsync always`.
/// - Fencing tokens are per instance and are **not** monotonic across the RedLock as a whole:
///   [`RedLockGuard::fencing_tokens`] gives each instance's; a resource that wants fencing
///   should check a token from one store it trusts.
/// - A holder paused past its validity (GC, SIGSTOP, swap) may act after another holder got the
///   lock; watch [`RedLockGuard::lost`].
///
/// An instance that fails is logged (`tracing`, debug) with its lock's name and server; a
/// release that fails names them in the error ([`Error::Part`]). Every future of a RedLock and
/// of its guard is `Send`, so it can be handed to `tokio::spawn` once the RedLock (cheap to
/// clone) is moved in.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(a: ferrisson::Client, b: ferrisson::Client, c: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::RedLock;
///
/// let lock = RedLock::new([a.get_lock("job"), b.get_lock("job"), c.get_lock("job")]);
/// let guard = lock.lock().await?;
/// println!("valid until {:?}", guard.validity_deadline());
/// guard.unlock().await.ok(); // an instance that is down reports an error here
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedLock {
    locks: Vec<RLock>,
    instance_timeout: Option<Duration>,
    retry_delay: Duration,
}

impl RedLock {
    /// A RedLock over `locks`, one per independent master.
    pub fn new(locks: impl IntoIterator<Item = RLock>) -> Self {
        RedLock {
            locks: locks.into_iter().collect(),
            instance_timeout: None,
            retry_delay: Duration::from_millis(100),
        }
    }

    /// How long one instance may take to answer an acquire before it counts as not answering.
    ///
    /// Default is a twentieth of the lease, between 10 ms and 1 s.
    #[must_use]
    pub fn instance_timeout(mut self, timeout: Duration) -> Self {
        self.instance_timeout = Some(timeout);
        self
    }

    /// The longest random pause between two attempts.
    ///
    /// Default is 100 ms.
    #[must_use]
    pub fn retry_delay(mut self, max: Duration) -> Self {
        self.retry_delay = max;
        self
    }

    /// The majority: N/2+1.
    pub fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// Waits until a majority grants (watchdog leases).
    ///
    /// # Errors
    ///
    /// [`Error::QuorumNotReached`] as soon as an attempt finds fewer than a majority of the
    /// instances answering; [`Error::InvalidArgument`] for no locks or a malformed name.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: grants on their way are released in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// redlock.lock().await?.unlock().await.ok();
    ///
    /// // Or in a task of its own.
    /// let task = tokio::spawn(async move { redlock.lock().await });
    /// task.await.expect("the task ran")?.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> impl Future<Output = Result<RedLockGuard>> + Send + '_ {
        self.lock_at(Location::caller())
    }

    /// [`lock`](Self::lock), called `at` (where every part's hold is said to be taken).
    pub(crate) async fn lock_at(&self, at: &'static Location<'static>) -> Result<RedLockGuard> {
        self.acquire(None, None, at)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the lock"))
    }

    /// Waits until a majority grants, with a fixed `lease` on every instance.
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
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// redlock.lock_with_lease(std::time::Duration::from_secs(10)).await?.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<RedLockGuard>> + Send + '_ {
        self.lock_with_lease_at(lease, Location::caller())
    }

    /// [`lock_with_lease`](Self::lock_with_lease), called `at`.
    pub(crate) async fn lock_with_lease_at(
        &self,
        lease: Duration,
        at: &'static Location<'static>,
    ) -> Result<RedLockGuard> {
        self.acquire(None, Some(lease), at)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the lock"))
    }

    /// One attempt: `Ok(None)` when a majority could not be had (contention, or validity spent),
    /// with every grant it got released on its server before it returns.
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
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = redlock.try_lock().await? {
    ///     guard.unlock().await.ok();
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> impl Future<Output = Result<Option<RedLockGuard>>> + Send + '_ {
        self.acquire(Some(Duration::ZERO), None, Location::caller())
    }

    /// Attempts until a majority grants or `wait` is spent (`Ok(None)`); `lease` fixes the lease.
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = redlock.try_lock_for(Duration::from_secs(2), Some(Duration::from_secs(10))).await? {
    ///     guard.unlock().await.ok();
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<RedLockGuard>>> + Send + '_ {
        self.acquire(Some(wait), lease, Location::caller())
    }

    /// Attempts until a majority grants or `wait` is spent (`None`: for ever); called `at`.
    pub(crate) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        at: &'static Location<'static>,
    ) -> Result<Option<RedLockGuard>> {
        if self.locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a RedLock needs at least one lock".into(),
            ));
        }
        self.locks.iter().try_for_each(RLock::check)?;
        if let Some(lease) = lease {
            lease_ms(lease)?;
        }
        // The validity is counted on the shortest lease any instance gets.
        let lease_len = lease.unwrap_or_else(|| {
            self.locks
                .iter()
                .map(RLock::watchdog_lease)
                .min()
                .unwrap_or_default()
        });
        let instance_timeout = self.instance_timeout.unwrap_or_else(|| {
            (lease_len / 20).clamp(Duration::from_millis(10), Duration::from_secs(1))
        });
        let drift = lease_len / 100 + Duration::from_millis(2);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        // Each part is one try, so no part's wait is watched for a hold of the caller's own
        // task: the rounds are, here.
        let mut self_wait = SelfWaitWatch::new(self.locks.first());
        // Each part's try is a wait of its own: told when the RedLock began, one that has waited
        // long enough asks whether a holder is gone (see `presence`).
        let began = Instant::now();
        loop {
            let started = Instant::now();
            let attempts = self.locks.iter().map(|lock| {
                let attempt: PartFuture<'_, _> = Box::pin(async move {
                    let attempt = crate::presence::waiting_since(
                        began,
                        lock.try_lock_for_at(Duration::ZERO, lease, at),
                    );
                    match tokio::time::timeout(instance_timeout, attempt).await {
                        Ok(Ok(granted)) => Ok(granted),
                        Ok(Err(e)) => {
                            let e = lock.part().failed(e);
                            tracing::debug!(error = %e, "a RedLock instance failed");
                            Err(e)
                        }
                        // Dropping the attempt repairs a grant that may still arrive.
                        Err(_) => Err(lock.part().failed(Error::Redis(
                            std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                format!(
                                    "no answer within the instance timeout ({instance_timeout:?})"
                                ),
                            )
                            .into(),
                        ))),
                    }
                });
                attempt
            });
            let answers = join_all(attempts).await;
            let elapsed = started.elapsed();
            let answered = answers.iter().filter(|a| a.is_ok()).count();
            let mut granted: Vec<LockGuard> = Vec::new();
            let mut failures = Vec::new();
            for answer in answers {
                match answer {
                    Ok(Some(guard)) => granted.push(guard),
                    Ok(None) => {}
                    Err(e) => failures.push(e),
                }
            }
            let validity = lease_len
                .checked_sub(elapsed + drift)
                .filter(|v| !v.is_zero());
            if granted.len() >= self.quorum() && validity.is_some() {
                return Ok(Some(RedLockGuard {
                    parts: granted,
                    quorum: self.quorum(),
                    drift,
                    valid_until: started + lease_len,
                    fixed: lease.is_some(),
                }));
            }
            // Given back before anything returns, grants whose reply came past the lease too:
            // their servers may hold them for most of a lease yet.
            if let Err(e) = give_back_all(granted).await {
                tracing::debug!(error = %e, "a RedLock could not give back a grant; its lease frees it");
            }
            if answered < self.quorum() {
                return Err(Error::QuorumNotReached {
                    answered,
                    needed: self.quorum(),
                    total: self.locks.len(),
                    failures,
                });
            }
            self_wait.check(&self.locks, at);
            let pause = jitter(self.retry_delay);
            match deadline {
                Some(d) if Instant::now() + pause >= d => return Ok(None),
                _ => tokio::time::sleep(pause).await,
            }
        }
    }
}

/// When a RedLock's rounds are checked for a wait for a hold of the caller's own task or
/// thread (see `lock::self_wait`): after the client's threshold, then every 10 times it.
struct SelfWaitWatch {
    since: std::time::Instant,
    next: Option<std::time::Instant>,
    after: Duration,
}

impl SelfWaitWatch {
    fn new(first: Option<&RLock>) -> Self {
        let after = first.map_or(Duration::MAX, |lock| lock.core().config.self_wait.warning);
        let since = std::time::Instant::now();
        SelfWaitWatch {
            since,
            next: since.checked_add(after),
            after,
        }
    }

    /// Warns, when due, of each instance whose lock the caller's own task or thread holds.
    fn check(&mut self, locks: &[RLock], at: &'static Location<'static>) {
        let now = std::time::Instant::now();
        if self.next.is_none_or(|next| now < next) {
            return;
        }
        self.next = now.checked_add(self.after.saturating_mul(10));
        let asker = crate::owner::Asker::current();
        for lock in locks {
            if let Some(held_at) = lock.core().watchdog.held_by(lock.name(), asker, true) {
                crate::lock::self_wait::warn(
                    lock.name(),
                    false,
                    asker,
                    held_at,
                    at,
                    now - self.since,
                );
            }
        }
    }
}

/// A random pause in `[0, max)`, drawn from the OS-seeded UUID generator.
fn jitter(max: Duration) -> Duration {
    let random = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0;
    max.mul_f64(random)
}

/// A RedLock held on a majority of its instances.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct RedLockGuard {
    pub(super) parts: Vec<LockGuard>,
    quorum: usize,
    drift: Duration,
    /// Start of the winning attempt + lease: every grant was sent after that start, so each
    /// instance holds at least until then (before drift).
    valid_until: Instant,
    fixed: bool,
}

impl RedLockGuard {
    /// Until when the lock is held on a majority: for a fixed lease, lease − elapsed − drift
    /// after the winning attempt started; with the watchdog, it moves on as renewals confirm a
    /// majority.
    pub fn validity_deadline(&self) -> std::time::Instant {
        self.deadline().into_std()
    }

    fn deadline(&self) -> Instant {
        if self.fixed {
            return self.valid_until - self.drift;
        }
        // The quorum-th latest deadline among live parts: until then a majority holds.
        let mut deadlines: Vec<Instant> = self
            .parts
            .iter()
            .filter(|p| !p.is_lost())
            .map(LockGuard::deadline)
            .collect();
        deadlines.sort_unstable_by(|a, b| b.cmp(a));
        match deadlines.get(self.quorum - 1) {
            Some(d) => (*d).max(self.valid_until) - self.drift,
            None => Instant::now() - Duration::from_millis(1),
        }
    }

    /// True once fewer than a majority of parts hold, or the validity deadline has passed.
    pub fn is_lost(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Resolves once [`is_lost`](Self::is_lost) is true.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("no majority any more: stop"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// guard.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        loop {
            if self.is_lost() {
                return;
            }
            let parts = self.parts.iter().map(|g| Box::pin(g.lost()));
            tokio::select! {
                _ = futures::future::select_all(parts) => {}
                () = tokio::time::sleep_until(self.deadline()) => {}
            }
        }
    }

    /// Each granted instance's fencing token. They are not comparable across instances.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.parts.iter().map(LockGuard::fencing_token).collect()
    }

    /// How many instances granted.
    pub fn granted(&self) -> usize {
        self.parts.len()
    }

    /// Releases every instance at once and reports every failure.
    ///
    /// Waits for every instance's answer: an instance that is down or unreachable costs up to
    /// its client's round trip (response and connection timeouts), not the instance timeout.
    ///
    /// # Errors
    ///
    /// [`Error::ReleasedOnMajority`] when a majority of the instances released but some did
    /// not (one that is down, say): the lock is free for others, and the caller may go on as
    /// after `Ok`; each failed part frees itself when its lease runs out.
    /// [`Error::Multiple`] when fewer than a majority released: the lock may stay taken until
    /// the failed parts' leases run out. Both carry one [`Error::Part`] per instance that could
    /// not be released, naming its lock and server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: releases not yet done finish in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// use ferrisson::Error;
    ///
    /// let guard = redlock.lock().await?;
    /// match guard.unlock().await {
    ///     Ok(()) => {}
    ///     // Free for others; an instance that is down lets its part go with its lease.
    ///     Err(Error::ReleasedOnMajority { failures, .. }) => eprintln!("{} down", failures.len()),
    ///     Err(e) => eprintln!("may stay taken until its leases run out: {e}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let (granted, quorum) = (self.parts.len(), self.quorum);
        // An instance whose connection is being reopened is waited for one round trip, not
        // its client's reconnect wait: a majority's release must not wait on a dead instance.
        let round_trip = self.parts.iter().map(LockGuard::round_trip).max();
        let by = tokio::time::Instant::now() + round_trip.unwrap_or_default();
        match crate::deadline::by(by, release_all(self.parts)).await {
            Err(Error::Multiple { errors }) if granted - errors.len() >= quorum => {
                Err(Error::ReleasedOnMajority {
                    released: granted - errors.len(),
                    granted,
                    failures: errors,
                })
            }
            other => other,
        }
    }
}
