//! How long a call waits for a connection being reopened (see `Connection::open`).

use std::time::Duration;

use super::ClientBuilder;

impl ClientBuilder {
    /// How long a call waits for its connection to come back when it finds the connection
    /// lost and being reopened (a Redis restart, a failover, a cut connection): it waits for
    /// the next attempt to reconnect (attempts back off from 100 ms to about a second) and
    /// retries until a connection opens, or until the next attempt would start after this
    /// time (an attempt under way may end up to the connection timeout later); then it fails
    /// with the last error. A call that arrives while no attempt is due tries at once. Calls with a wait
    /// budget of their own (`try_lock_for`, `try_acquire_for`, `await_for`) wait within that
    /// budget instead; this is for those without one (`lock()`, releases, queries). Redisson's
    /// `retryAttempts × retryInterval` (3 × 1.5 s) plays this part there.
    ///
    /// Zero fails such a call at once, as every call did before this setting. Default is 5 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .reconnect_wait(Duration::from_secs(10))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn reconnect_wait(mut self, wait: Duration) -> Self {
        self.reconnect_wait = wait;
        self
    }
}
