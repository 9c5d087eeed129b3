//! `RSemaphore`: Redisson's semaphore, a count of free permits shared by every process that uses
//! its name.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::names;
use crate::observe::Acquire;
use crate::pubsub::Wake;
use crate::script::{
    SEMAPHORE_ACQUIRE, SEMAPHORE_RELEASE, SEMAPHORE_SET, SEMAPHORE_UNDO, ScriptCall,
};

/// A semaphore, Redisson's `RSemaphore`: a number of permits that callers anywhere take and
/// give back.
///
/// In Redis it is a string `name` holding the count of free permits; every release publishes the
/// new count on `redisson_sc:{name}`, so Java Redisson clients share it. Waiters wake on those
/// messages through the client's one pub/sub connection (a message of `k` free permits wakes up
/// to `k` waiters of this client), with the client's re-check interval as the fallback for a
/// lost message.
///
/// **Permits are not owned**, as in Redisson: nothing records who took them, anybody may
/// release, and the permits of a process that dies holding them never come back by themselves.
/// Where that matters (a worker crashing mid-task), use
/// [`RPermitExpirableSemaphore`](crate::RPermitExpirableSemaphore), whose permits are owned,
/// renewed while held, and come back when their holder dies.
///
/// Acquiring is safe against cancellation and lost replies: each attempt leaves a short-lived
/// record (`{name}:ferrisson_sc_request:<request-id>`), and an attempt whose answer never came
/// back is undone from it, so no permit is taken by a caller that did not get it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let api = client.get_semaphore("partner-api");
/// api.try_set_permits(4).await?; // at most 4 calls at once, fleet-wide
/// api.acquire(1).await?;
/// // ... call the partner API ...
/// api.release(1).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RSemaphore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    core: Arc<Core>,
    name: String,
    channel: String,
    /// `{name}:ferrisson_sc_request:`, the prefix of the acquire records.
    requests: String,
    /// Why the name was refused, reported by every operation.
    invalid: Option<String>,
}

/// Checks a count of permits to take or give.
fn checked(n: u64) -> Result<i64> {
    match i64::try_from(n) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Error::InvalidArgument(format!(
            "a number of permits must be between 1 and {}, got {n}",
            i64::MAX
        ))),
    }
}

impl RSemaphore {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> Self {
        RSemaphore {
            shared: Arc::new(Shared {
                core,
                name: name.to_owned(),
                channel: names::derived("redisson_sc", name),
                requests: format!("{}:ferrisson_sc_request:", names::suffix_base(name)),
                invalid: names::validate(name).err(),
            }),
        }
    }

    /// The semaphore's name (its key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub(super) fn inner(&self) -> &Core {
        &self.shared.core
    }

    fn check(&self) -> Result<()> {
        match &self.shared.invalid {
            Some(why) => Err(Error::InvalidArgument(why.clone())),
            None => Ok(()),
        }
    }

    async fn run(&self, call: ScriptCall) -> Result<i64> {
        let name = &self.shared.name;
        self.inner().executor.run(&call, name).await
    }

    /// Sets the permits to `permits` when none are set (Redisson's `trySetPermits`); returns
    /// whether they were set.
    ///
    /// `permits` may be 0: the semaphore then starts closed, as `java.util.concurrent.Semaphore`
    /// with 0 permits does. Its count is set (to 0), so a later `try_set_permits` returns
    /// `false`; every acquire waits (`try_acquire` answers `false`) until
    /// [`release`](Self::release) or [`add_permits`](Self::add_permits) opens it, from any
    /// client.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for more than `i64::MAX` permits or a malformed name;
    /// [`Error::WrongType`] when the key holds something else than a count; [`Error::Redis`].
    ///
    /// # Cancel safety
    ///
    /// The permits may or may not have been set when the future is dropped after it was sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// if !semaphore.try_set_permits(10).await? {
    ///     println!("already set: {} free", semaphore.available_permits().await?);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// A gate that starts closed and opens once a warm-up is done:
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let gate = client.get_semaphore("cache-warm");
    /// gate.try_set_permits(0).await?; // closed: acquirers wait
    /// assert!(!gate.try_acquire(1).await?);
    /// // ... the warm-up, anywhere ...
    /// gate.release(8).await?; // open: up to 8 at once from now on
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.check()?;
        let n = i64::try_from(permits).map_err(|_| {
            Error::InvalidArgument(format!(
                "a semaphore's permits must be between 0 and {}, got {permits}",
                i64::MAX
            ))
        })?;
        let call = ScriptCall::new(&SEMAPHORE_SET)
            .key(&self.shared.name)
            .key(&self.shared.channel)
            .arg("set")
            .arg(n);
        Ok(self.run(call).await? == 1)
    }

    /// Adds `delta` permits (negative: removes them, possibly below zero, as Redisson allows) and
    /// returns the permits free now. Waiters are told.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits) (any `delta` is accepted).
    ///
    /// # Cancel safety
    ///
    /// Not idempotent: a dropped future whose command was sent may or may not have added them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.add_permits(2).await?; // the partner raised our quota
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        self.check()?;
        self.add(delta).await
    }

    async fn add(&self, delta: i64) -> Result<i64> {
        let call = ScriptCall::new(&SEMAPHORE_RELEASE)
            .key(&self.shared.name)
            .key(&self.shared.channel)
            .arg(delta);
        self.run(call).await
    }

    /// What Redis holds for this semaphore now: the permits free and the connections waiting,
    /// read in one round trip that changes nothing. See
    /// [`SemaphoreSnapshot`](crate::inspect::SemaphoreSnapshot).
    ///
    /// # Errors
    ///
    /// As [`available_permits`](Self::available_permits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// let now = semaphore.snapshot().await?;
    /// println!("{:?} free, {} connection(s) waiting", now.available, now.subscribers);
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> Result<crate::inspect::SemaphoreSnapshot> {
        self.check()?;
        crate::inspect::semaphore(self.inner(), &self.shared.name).await
    }

    /// The permits free now (0 when none were ever set; negative after permits were removed
    /// below what was taken).
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// println!("{} free", semaphore.available_permits().await?);
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        self.check()?;
        let name = &self.shared.name;
        let mut cmd = redis::cmd("GET");
        cmd.arg(name);
        let free: Option<String> = self.inner().executor.read(&cmd, name).await?;
        match free {
            None => Ok(0),
            Some(text) => text
                .parse()
                .map_err(|_| Error::WrongType { key: name.clone() }),
        }
    }

    /// Takes every free permit and returns how many that was.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// The permits may or may not have been taken when the future is dropped after it was sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// let paused = semaphore.drain_permits().await?; // stop new work
    /// semaphore.release(paused as u64).await?;       // and let it go on
    /// # Ok(()) }
    /// ```
    pub async fn drain_permits(&self) -> Result<i64> {
        self.check()?;
        let call = ScriptCall::new(&SEMAPHORE_SET)
            .key(&self.shared.name)
            .key(&self.shared.channel)
            .arg("drain");
        self.run(call).await
    }

    /// Gives back `n` permits (anybody may) and wakes waiters. On a semaphore set to 0 permits,
    /// this is what opens it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `n` of 0; otherwise as
    /// [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// Not idempotent: a dropped future whose command was sent may or may not have given them
    /// back (Redisson's `release` has the same property).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(2).await?;
    /// semaphore.release(2).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, n: u64) -> Result<()> {
        self.check()?;
        self.add(checked(n)?).await.map(drop)
    }

    /// Waits until `n` permits are free and takes them, all at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `n` of 0; otherwise as
    /// [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit taken (an attempt that
    /// may have run is undone in the background).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1).await?;
    /// semaphore.release(1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, n: u64) -> Result<()> {
        if self.acquire_within(n, None).await? {
            Ok(())
        } else {
            Err(Error::unexpected(
                "an unbounded wait ended without the permits",
            ))
        }
    }

    /// Takes `n` permits if they are free now; returns whether it did.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// if semaphore.try_acquire(1).await? {
    ///     semaphore.release(1).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, n: u64) -> Result<bool> {
        self.acquire_within(n, Some(Duration::ZERO)).await
    }

    /// Waits at most `wait` until `n` permits are free and takes them; returns whether it did.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if semaphore.try_acquire_for(1, Duration::from_secs(2)).await? {
    ///     semaphore.release(1).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(&self, n: u64, wait: Duration) -> Result<bool> {
        self.acquire_within(n, Some(wait)).await
    }

    async fn acquire_within(&self, n: u64, wait: Option<Duration>) -> Result<bool> {
        self.check()?;
        let n = checked(n)?;
        let channel = &self.shared.channel;
        self.inner().accepting()?;
        let observed = Acquire::start(&self.inner().observe, "semaphore", self.name(), wait);
        let attempt = || observed.attempt(self.attempt(n));
        let waited = super::wait_until(self.inner(), channel, Wake::Count, wait, attempt);
        let result = waited.instrument(observed.span()).await;
        observed.finish(result)
    }

    /// One attempt at taking `n` permits. If it is dropped after the script may have run, or
    /// its answer is lost, the attempt is undone in the background.
    async fn attempt(&self, n: i64) -> Result<bool> {
        let request = format!(
            "{}{}",
            self.shared.requests,
            self.inner().owners.next_request_id()
        );
        let mut in_flight = Undo {
            semaphore: self.clone(),
            request: Some(request),
        };
        let record_ms = self.inner().config.unlock_latch_ttl().as_millis() as u64;
        let call = ScriptCall::new(&SEMAPHORE_ACQUIRE)
            .key(&self.shared.name)
            .key(in_flight.request.as_deref())
            .arg(n)
            .arg(record_ms);
        let name = &self.shared.name;
        let reply: Result<(i64, i64)> = self.inner().executor.run(&call, name).await;
        match reply {
            Ok((status, _)) => {
                in_flight.request = None;
                Ok(status == 1)
            }
            // The undo runs when `in_flight` is dropped.
            Err(e) if e.outcome_unknown() => Err(e),
            Err(e) => {
                in_flight.request = None;
                Err(e)
            }
        }
    }
}

/// How long an acquire whose answer was lost is tried to be undone.
const UNDO_FOR: Duration = Duration::from_secs(60);

/// An acquire attempt that may have run. Dropped while it still names its request, it gives
/// back in the background whatever the request took, and makes a late delivery of the request
/// take nothing.
struct Undo {
    semaphore: RSemaphore,
    request: Option<String>,
}

impl Drop for Undo {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let semaphore = self.semaphore.clone();
        self.semaphore.inner().spawn(async move {
            let shared = &semaphore.shared;
            let record_ms = semaphore.inner().config.unlock_latch_ttl().as_millis() as u64;
            let call = ScriptCall::new(&SEMAPHORE_UNDO)
                .key(&shared.name)
                .key(&request)
                .key(&shared.channel)
                .arg(record_ms);
            // Tried until Redis answers (for a minute): a permit taken and never given back is
            // lost for good.
            let undone = semaphore.inner().executor.run_until_answered(&call, &shared.name, UNDO_FOR);
            if let Err(e) = undone.await {
                tracing::warn!(semaphore = %shared.name, error = %e, "could not undo an acquire whose answer was lost: its permits may be lost");
            }
        });
    }
}
