//! The builder's settings of fair locks' queues and of plain locks' starvation mode: who waits
//! how long before the lock goes to them rather than to whoever asks first.

use std::time::Duration;

use super::ClientBuilder;

impl ClientBuilder {
    /// How long a waiter of a fair lock keeps its place in the queue without calling again. A
    /// live waiter calls again every third of it, so only a waiter whose process died (or hung)
    /// loses its place, and it delays the queue by at most this long. It is also the life of a
    /// waiting writer's mark under [`RwPolicy::PreferWriters`](crate::RwPolicy::PreferWriters):
    /// the longest a writer that died while waiting holds new readers back.
    ///
    /// Default is 5 s; at least 30 ms, and at most the
    /// [thread wait time](Self::fair_lock_thread_wait_time).
    pub fn fair_lock_queue_timeout(mut self, timeout: Duration) -> Self {
        self.fair_queue_timeout = timeout;
        self
    }

    /// Redisson's `threadWaitTime` for fair locks: the time each waiter's turn adds to the turn
    /// of the one ahead of it in the queue, and by which every grant, and every waiter that
    /// gives up, brings the turns behind it forward. Fair-lock queues are shared with Java
    /// Redisson clients, which count in this time, so set it to the value of the Java clients
    /// that use the same locks (Redisson's default is also 5 minutes).
    ///
    /// A live ferrisson waiter never loses its place to it, however long it waits (see
    /// [`fair_lock_queue_timeout`](Self::fair_lock_queue_timeout) for the ones that die); a
    /// Java waiter does, as with Redisson alone, when it waits longer than its turn.
    ///
    /// Default is 300 s; at least 30 ms and at least the fair lock queue timeout.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    ///
    /// // The Java clients sharing these locks give their fair locks a 60 s thread wait time.
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .fair_lock_thread_wait_time(Duration::from_secs(60))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock_thread_wait_time(mut self, wait: Duration) -> Self {
        self.fair_thread_wait = wait;
        self
    }

    /// How long a waiter of an `RLock` (also `RFencedLock` and `RMutex`) waits before it
    /// counts as starving; `None` turns starvation mode off.
    ///
    /// Plain locks are not fair: a released lock goes to whoever asks first, which favours the
    /// releasing client's own tasks. A waiter that has waited this long says so to Redis, and
    /// the next release, by any ferrisson client, hands the lock to the one that said so first
    /// (a hold of the lock's [handed lease](Self::lock_starvation_handoff_lease) that the
    /// waiter then takes up with a fresh token and its own lease). So no ferrisson waiter waits
    /// much longer than this plus the holds of the starving waiters ahead of it, while below
    /// it the fast unfair path, handover inside a client included, runs as before. Java
    /// Redisson waiters see an ordinary lock. Use [`RFairLock`](crate::RFairLock) for strict
    /// arrival order.
    ///
    /// Default is 50 ms; at least 1 ms.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    ///
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .lock_starvation_threshold(Some(Duration::from_millis(20)))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_starvation_threshold(mut self, threshold: Option<Duration>) -> Self {
        self.starvation_threshold = threshold;
        self
    }

    /// The lease of a lock handed to a starving waiter until that waiter takes it up (see
    /// [`lock_starvation_threshold`](Self::lock_starvation_threshold)): a live waiter takes it
    /// up within a round trip of hearing of it, so this only bounds how long a waiter that
    /// died (or gave up just then) keeps the lock from everyone else.
    ///
    /// Default is 500 ms, or the watchdog timeout if that is shorter; between 10 ms and the
    /// watchdog timeout.
    pub fn lock_starvation_handoff_lease(mut self, lease: Duration) -> Self {
        self.starvation_handoff = Some(lease);
        self
    }
}
