//! `RCountDownLatch`: Redisson's count-down latch, shared by every process that uses its name.

use std::time::Duration;

use tracing::Instrument;

use std::sync::Arc;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::observe::Acquire;
use crate::pubsub::Wake;
use crate::script::{LATCH_COUNT_DOWN, LATCH_DELETE, LATCH_TRY_SET, ScriptCall};
use crate::{names, slots};

/// The message that tells waiters the latch opened (reached zero or was deleted).
const OPENED: &str = "0";
/// The message that tells waiters of a new count.
const NEW_COUNT: &str = "1";

/// A count-down latch, Redisson's `RCountDownLatch`: waiters wait until the count, set once by
/// [`try_set_count`](Self::try_set_count), has been counted down to zero by
/// [`count_down`](Self::count_down) calls from any process.
///
/// In Redis it is a string `name` holding the count, deleted when it reaches zero; changes are
/// published on `redisson_countdownlatch__channel__{name}` (`0` when it opens, `1` on a new
/// count), so Java Redisson clients share it. Waiters wake on those messages through the
/// client's one pub/sub connection, with the client's re-check interval as a fallback for a
/// lost message. A latch that is not set counts as open (zero), as in Redisson.
///
/// Names are checked as for locks, and a name with a `{...}` hash tag is refused: the channel
/// wraps the whole name in braces, so with a tag of its own the channel would hash to another
/// cluster slot than the count (a Redisson bug for such names).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let ready = client.get_count_down_latch("workers-ready");
/// ready.try_set_count(3).await?;
/// // ... each of three workers, anywhere, calls:
/// ready.count_down().await?;
/// # ready.count_down().await?; ready.count_down().await?;
/// // ... and the coordinator waits for all of them:
/// ready.await_zero().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RCountDownLatch {
    core: Arc<Core>,
    name: String,
    channel: String,
    /// Why the name was refused, reported by every operation.
    invalid: Option<String>,
}

impl RCountDownLatch {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> Self {
        let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
        let invalid = names::validate(name).err().or_else(|| {
            (slots::key_slot(name) != slots::key_slot(&channel)).then(|| {
                format!(
                    "the latch name `{name}` carries a hash tag: its channel would live in \
                     another cluster slot than its count"
                )
            })
        });
        RCountDownLatch {
            core,
            name: name.to_owned(),
            channel,
            invalid,
        }
    }

    /// The latch's name (its key).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> Result<()> {
        match &self.invalid {
            Some(why) => Err(Error::InvalidArgument(why.clone())),
            None => Ok(()),
        }
    }

    async fn run(&self, call: ScriptCall) -> Result<i64> {
        self.core
            .executor
            .run(&call.key(&self.name).key(&self.channel), &self.name)
            .await
    }

    /// Sets the count to `count` if the latch is not set (Redisson's `trySetCount`); returns
    /// whether it was set.
    ///
    /// `count` may be 0, as for `java.util.concurrent.CountDownLatch`: a latch of count 0 is
    /// open, so waiters return at once. Like a latch that reached zero, it leaves no key in
    /// Redis, so a later `try_set_count` sets a count again. On a latch still counting it
    /// returns `false` and changes nothing, as for any count.
    ///
    /// A latch is set while its key holds a count above zero. Redisson's `trySetCount(0)` writes
    /// a count of 0, which Java clients then take for a set latch; here a key holding 0 is an
    /// open latch that any `try_set_count` replaces.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a count above `i64::MAX`, or a malformed name;
    /// [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// The count may or may not have been set when the future is dropped after it was sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// if !latch.try_set_count(5).await? {
    ///     println!("already counting: {}", latch.get_count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// A count of 0, for a batch that turned out empty:
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// let shards: Vec<u32> = Vec::new();
    /// latch.try_set_count(shards.len() as u64).await?;
    /// latch.await_zero().await?; // open: returns at once
    /// # Ok(()) }
    /// ```
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        self.check()?;
        if count > i64::MAX as u64 {
            return Err(Error::InvalidArgument(format!(
                "a latch count must be between 0 and {}, got {count}",
                i64::MAX
            )));
        }
        let call = ScriptCall::new(&LATCH_TRY_SET).arg(count).arg(NEW_COUNT);
        Ok(self.run(call).await? == 1)
    }

    /// Counts the latch down by one and returns the count left; at zero the latch opens and
    /// every waiter, in every process, is woken. Counting down an open latch does nothing.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the key holds something else than a count (nothing changed);
    /// [`Error::Redis`]; [`Error::InvalidArgument`] for a malformed name.
    ///
    /// # Cancel safety
    ///
    /// Not idempotent: a dropped future whose command was sent may or may not have counted
    /// down (Redisson's `countDown` has the same property).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// let left = latch.count_down().await?;
    /// println!("{left} to go");
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self) -> Result<u64> {
        self.check()?;
        let call = ScriptCall::new(&LATCH_COUNT_DOWN).arg(OPENED);
        Ok(u64::try_from(self.run(call).await?).unwrap_or(0))
    }

    /// What Redis holds for this latch now: the count and the connections waiting, read in one
    /// round trip that changes nothing. See [`LatchSnapshot`](crate::inspect::LatchSnapshot).
    ///
    /// # Errors
    ///
    /// As [`get_count`](Self::get_count).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// let now = latch.snapshot().await?;
    /// println!("{} to go, {} connection(s) waiting", now.count, now.subscribers);
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> Result<crate::inspect::LatchSnapshot> {
        self.check()?;
        crate::inspect::latch(&self.core, &self.name).await
    }

    /// The count left: 0 when the latch is open (or was never set).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the key holds something else; [`Error::Redis`];
    /// [`Error::InvalidArgument`] for a malformed name.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// println!("{} to go", latch.get_count().await?);
    /// # Ok(()) }
    /// ```
    pub async fn get_count(&self) -> Result<u64> {
        self.check()?;
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.name);
        let count: Option<String> = self.core.executor.read(&cmd, &self.name).await?;
        match count {
            None => Ok(0),
            Some(text) => match text.parse::<i64>() {
                Ok(n) => Ok(u64::try_from(n).unwrap_or(0)),
                Err(_) => Err(Error::WrongType {
                    key: self.name.clone(),
                }),
            },
        }
    }

    /// Deletes the latch, which opens it: every waiter is woken. Returns whether it was set.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`]; [`Error::InvalidArgument`] for a malformed name.
    ///
    /// # Cancel safety
    ///
    /// The latch may or may not have been deleted when the future is dropped after it was sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// latch.delete().await?; // give up on the count: everybody goes on
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        self.check()?;
        let call = ScriptCall::new(&LATCH_DELETE).arg(OPENED);
        Ok(self.run(call).await? == 1)
    }

    /// Waits until the latch is open (Redisson's `await`).
    ///
    /// # Errors
    ///
    /// As [`get_count`](Self::get_count).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and listens.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// latch.await_zero().await?;
    /// # Ok(()) }
    /// ```
    pub async fn await_zero(&self) -> Result<()> {
        self.wait(None).await.map(drop)
    }

    /// Waits at most `timeout` until the latch is open; returns whether it opened.
    ///
    /// # Errors
    ///
    /// As [`get_count`](Self::get_count).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and listens.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::RCountDownLatch) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if !latch.await_for(Duration::from_secs(10)).await? {
    ///     println!("still {} to go after 10 s", latch.get_count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn await_for(&self, timeout: Duration) -> Result<bool> {
        self.wait(Some(timeout)).await
    }

    async fn wait(&self, wait: Option<Duration>) -> Result<bool> {
        let inner = &self.core;
        // A drain lets a wait go on: it takes nothing to give back.
        inner.open()?;
        let observed = Acquire::start(&inner.observe, "latch", self.name(), wait);
        let opened = || observed.attempt(async { Ok(self.get_count().await? == 0) });
        let waited = super::wait_until(inner, &self.channel, Wake::All, wait, opened);
        let result = waited.instrument(observed.span()).await;
        observed.finish(result)
    }
}
