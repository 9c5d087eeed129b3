//! The blocking client and its builder.

use std::time::Duration;

use uuid::Uuid;

use super::{
    Blocker, RCountDownLatch, RFairLock, RFencedLock, RLock, RMutex, RPermitExpirableSemaphore,
    RReadWriteLock, RSemaphore, may_block,
};
use crate::error::{Error, Result};
use crate::lock::RwPolicy;

/// A connection to Redis for synchronous code: [`ferrisson::Client`](crate::Client) with
/// blocking methods. See [the module](crate::blocking) for how it works and what differs.
///
/// Cloning is cheap and shares everything. Its objects' holds belong to the calling thread.
/// Every method that talks to Redis fails with [`Error::InsideRuntime`] when called from async
/// code; inside `spawn_blocking` or `block_in_place` it works (see [where it may be
/// called](crate::blocking#where-it-may-be-called-threads-that-may-block)).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let lock = client.get_lock("orders:42");
/// let guard = lock.lock()?;
/// // ... work on order 42; guard.fencing_token() goes with every write ...
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    client: crate::Client,
    blocker: Blocker,
}

impl Client {
    /// Connects to the server at `url` with default settings. Blocking twin of
    /// [`ferrisson::Client::connect`](crate::Client::connect).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code; otherwise as
    /// [`ClientBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1/")?;
    /// # Ok(()) }
    /// ```
    pub fn connect(url: &str) -> Result<Client> {
        Client::builder().url(url).build()
    }

    /// A builder for a client with other settings than the defaults: every setting of
    /// [`ferrisson::ClientBuilder`](crate::ClientBuilder), Cluster and Sentinel included.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::builder()
    ///     .url("redis://127.0.0.1/")
    ///     .watchdog_timeout(std::time::Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            builder: crate::Client::builder(),
        }
    }

    /// The async client this one wraps: the same connections, watchdog and owners, for the
    /// parts of a program that run in an async runtime. Its acquisitions and this client's
    /// exclude each other as any two acquisitions do.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.as_async().get_lock("reports").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::Client {
        &self.client
    }

    /// This client's identity: the first half of every owner name it writes into Redis.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// println!("client {}", client.id());
    /// # }
    /// ```
    pub fn id(&self) -> Uuid {
        self.client.id()
    }

    /// How many lock owners this client keeps state for now (see
    /// [`ferrisson::Client::live_owners`](crate::Client::live_owners)): a leak check and a
    /// monitoring gauge.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_lock("jobs").lock()?;
    /// assert_eq!(client.live_owners(), 1);
    /// guard.unlock()?;
    /// assert_eq!(client.live_owners(), 0);
    /// # Ok(()) }
    /// ```
    pub fn live_owners(&self) -> usize {
        self.client.live_owners()
    }

    /// Every live ferrisson client's identity, blocking the calling thread. See
    /// [`ferrisson::Client::clients`](crate::Client::clients).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// for who in client.clients()? {
    ///     println!("{} on {} (pid {})", who.app, who.host, who.pid);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn clients(&self) -> Result<Vec<crate::ClientIdentity>> {
        self.blocker.call(self.client.clients())
    }

    /// The identity of client `id`, if it is alive and records one, blocking the calling
    /// thread. See [`ferrisson::Client::identity_of`](crate::Client::identity_of).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let me = client.identity_of(client.id())?;
    /// assert!(me.is_some(), "identities are on by default");
    /// # Ok(()) }
    /// ```
    pub fn identity_of(&self, id: Uuid) -> Result<Option<crate::ClientIdentity>> {
        self.blocker.call(self.client.identity_of(id))
    }

    /// What Redis holds under `name`, whatever kind of object it is, blocking the calling
    /// thread. See [`ferrisson::Client::inspect`](crate::Client::inspect).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use ferrisson::inspect::Snapshot;
    ///
    /// if let Snapshot::Lock(lock) = client.inspect("orders:42")? {
    ///     println!("{} holder(s), lease {:?}", lock.holders.len(), lock.lease);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, name: &str) -> Result<crate::inspect::Snapshot> {
        self.blocker.call(self.client.inspect(name))
    }

    /// Every object whose name matches `pattern`, each inspected, in name order, blocking the
    /// calling thread. See
    /// [`ferrisson::Client::inspect_matching`](crate::Client::inspect_matching) for how the
    /// names are found, and what else a pattern of `"*"` may list.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// for snapshot in client.inspect_matching("orders:*")? {
    ///     println!("{}", snapshot.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect_matching(&self, pattern: &str) -> Result<Vec<crate::inspect::Snapshot>> {
        self.blocker.call(self.client.inspect_matching(pattern))
    }

    /// A handle on the reentrant lock `name`: each acquisition is an owner of its own, and only
    /// one nested in a hold's scope is reentrant. See [`RLock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// if let Some(guard) = client.get_lock("reports").try_lock()? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn get_lock(&self, name: &str) -> RLock {
        RLock::wrap(self.client.get_lock(name))
    }

    /// A handle on the fair lock `name`: granted in the order the threads asked. See
    /// [`ferrisson::Client::get_fair_lock`](crate::Client::get_fair_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_fair_lock("tickets").lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn get_fair_lock(&self, name: &str) -> RFairLock {
        RLock::wrap(self.client.get_fair_lock(name))
    }

    /// A handle on the read-write lock `name`: each read or write acquisition is an owner of
    /// its own, and a read nested in a writer's scope is the writer's. See [`RReadWriteLock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let rw = client.get_read_write_lock("catalog");
    /// let guard = rw.read_lock().lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn get_read_write_lock(&self, name: &str) -> RReadWriteLock {
        RReadWriteLock::wrap(self.client.get_read_write_lock(name))
    }

    /// A handle on the read-write lock `name` with `policy` (see [`RwPolicy`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use ferrisson::RwPolicy;
    ///
    /// let prices = client.get_read_write_lock_with("prices", RwPolicy::PreferWriters);
    /// let update = prices.write_lock().lock()?; // readers arriving now wait for it
    /// update.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn get_read_write_lock_with(&self, name: &str, policy: RwPolicy) -> RReadWriteLock {
        RReadWriteLock::wrap(self.client.get_read_write_lock_with(name, policy))
    }

    /// A handle on the fenced lock `name`, whose acquire methods return the fencing token
    /// first. See [`RFencedLock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let (token, guard) = client.get_fenced_lock("ledger").lock_and_get_token()?;
    /// # let _ = token;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn get_fenced_lock(&self, name: &str) -> RFencedLock {
        RFencedLock::wrap(self.client.get_fenced_lock(name))
    }

    /// A handle on the count-down latch `name`. See [`RCountDownLatch`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let done = client.get_count_down_latch("batch:7:done");
    /// done.try_set_count(2)?;
    /// # Ok(()) }
    /// ```
    pub fn get_count_down_latch(&self, name: &str) -> RCountDownLatch {
        RCountDownLatch::wrap(self.client.get_count_down_latch(name), self.blocker.clone())
    }

    /// A handle on the semaphore `name`. See [`RSemaphore`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let builds = client.get_semaphore("build-slots");
    /// builds.try_set_permits(8)?;
    /// # Ok(()) }
    /// ```
    pub fn get_semaphore(&self, name: &str) -> RSemaphore {
        RSemaphore::wrap(self.client.get_semaphore(name), self.blocker.clone())
    }

    /// A handle on the permit-expirable semaphore `name`, whose permits come back by themselves
    /// when their holder dies. See [`RPermitExpirableSemaphore`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let slots = client.get_permit_expirable_semaphore("gpu");
    /// slots.try_set_permits(2)?;
    /// slots.acquire()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn get_permit_expirable_semaphore(&self, name: &str) -> RPermitExpirableSemaphore {
        let semaphore = self.client.get_permit_expirable_semaphore(name);
        RPermitExpirableSemaphore::wrap(semaphore, self.blocker.clone())
    }

    /// A handle on the non-reentrant mutex `name`. See [`RMutex`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_mutex("schema-migration").lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn get_mutex(&self, name: &str) -> RMutex {
        RMutex::wrap(self.client.get_mutex(name), self.blocker.clone())
    }

    /// Closes the client: every handle of it refuses new acquires and waits from now on
    /// ([`Error::Closed`]); then waits, at most twice the response timeout, until the releases
    /// of dropped guards and the other background work are done, and drops this handle.
    /// Returns what was still under way when it gave up (empty: all done). Call it at the end
    /// of a process that ends with `std::process::exit`; see
    /// [`ferrisson::Client::close`](crate::Client::close).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code (nothing is closed then).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// let guard = client.get_lock("nightly-report").lock()?;
    /// drop(guard); // released in the background
    /// let left = client.close()?;
    /// assert!(left.is_empty(), "not released: {left:?}");
    /// # Ok(()) }
    /// ```
    pub fn close(self) -> Result<Vec<String>> {
        may_block()?;
        let Client { client, blocker } = self;
        blocker.run(client.close())
    }
}

/// Builds a blocking [`Client`]: the settings of [`ferrisson::ClientBuilder`](crate::ClientBuilder),
/// each documented there, and a blocking [`build`](Self::build).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::blocking::Client::builder()
///     .url("redis://127.0.0.1:6379")
///     .watchdog_timeout(Duration::from_secs(10))
///     .response_timeout(Duration::from_secs(1))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ClientBuilder {
    builder: crate::ClientBuilder,
}

impl ClientBuilder {
    pub(super) fn with(
        self,
        set: impl FnOnce(crate::ClientBuilder) -> crate::ClientBuilder,
    ) -> Self {
        ClientBuilder {
            builder: set(self.builder),
        }
    }

    /// The server to connect to: `redis://[user:password@]host[:port][/db]`. See
    /// [`ferrisson::ClientBuilder::url`](crate::ClientBuilder::url).
    pub fn url(self, url: impl Into<String>) -> Self {
        self.with(|b| b.url(url))
    }

    /// A Redis Cluster, found from `seeds`. See
    /// [`ferrisson::ClientBuilder::cluster`](crate::ClientBuilder::cluster).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::builder()
    ///     .cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn cluster<I, S>(self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.with(|b| b.cluster(seeds))
    }

    /// A master watched by Sentinel. See
    /// [`ferrisson::ClientBuilder::sentinel`](crate::ClientBuilder::sentinel).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::builder()
    ///     .sentinel("mymaster", ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"])
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel<I, S>(self, master: impl Into<String>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.with(|b| b.sentinel(master, sentinels))
    }

    /// Replica-synced grants. See
    /// [`ferrisson::ClientBuilder::sync_replicas`](crate::ClientBuilder::sync_replicas).
    pub fn sync_replicas(self, min_acks: u32, timeout: Duration) -> Self {
        self.with(|b| b.sync_replicas(min_acks, timeout))
    }

    /// The lease of locks taken without one, renewed every third of it while the guard lives.
    ///
    /// Default is 30 s; at least 30 ms. See
    /// [`ferrisson::ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout).
    pub fn watchdog_timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.watchdog_timeout(timeout))
    }

    /// How long one attempt to open a connection may take.
    ///
    /// Default is 5 s.
    pub fn connection_timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.connection_timeout(timeout))
    }

    /// How long to wait for the reply to one command before failing with a timeout.
    ///
    /// Default is 3 s.
    pub fn response_timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.response_timeout(timeout))
    }

    /// The longest a waiting call sleeps between two attempts when no wake-up message arrives.
    ///
    /// Default is 5 s. See
    /// [`ferrisson::ClientBuilder::recheck_interval`](crate::ClientBuilder::recheck_interval).
    pub fn recheck_interval(self, interval: Duration) -> Self {
        self.with(|b| b.recheck_interval(interval))
    }

    /// Trusts the CA certificates in `pem` for `rediss://` connections.
    ///
    /// Default is the platform's root certificates. See
    /// [`ferrisson::ClientBuilder::tls_root_certificates`](crate::ClientBuilder::tls_root_certificates).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificates(self, pem: impl Into<Vec<u8>>) -> Self {
        self.with(|b| b.tls_root_certificates(pem))
    }

    /// Presents this client certificate chain and key (both PEM) to servers that require
    /// mutual TLS.
    ///
    /// Default is no client certificate.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_identity(
        self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.with(|b| b.tls_client_identity(cert_pem, key_pem))
    }

    /// How long a waiter of a fair lock keeps its place in the queue without calling again.
    ///
    /// Default is 5 s. See
    /// [`ferrisson::ClientBuilder::fair_lock_queue_timeout`](crate::ClientBuilder::fair_lock_queue_timeout).
    pub fn fair_lock_queue_timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.fair_lock_queue_timeout(timeout))
    }

    /// Redisson's `threadWaitTime` for fair locks.
    ///
    /// Default is 300 s. See
    /// [`ferrisson::ClientBuilder::fair_lock_thread_wait_time`](crate::ClientBuilder::fair_lock_thread_wait_time).
    pub fn fair_lock_thread_wait_time(self, wait: Duration) -> Self {
        self.with(|b| b.fair_lock_thread_wait_time(wait))
    }

    /// Whether metrics carry a `lock` label with the object's name (mind the cardinality).
    ///
    /// Default is false. See
    /// [`ferrisson::ClientBuilder::metrics_lock_names`](crate::ClientBuilder::metrics_lock_names).
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_lock_names(self, on: bool) -> Self {
        self.with(|b| b.metrics_lock_names(on))
    }

    /// After how long a wait for a hold of the calling thread's own logs a WARN. Default is
    /// 3 s. See [`ferrisson::ClientBuilder::self_wait_warning`](crate::ClientBuilder::self_wait_warning).
    pub fn self_wait_warning(self, after: Duration) -> Self {
        self.with(|b| b.self_wait_warning(after))
    }

    /// Whether an acquisition that would wait for a hold of its own thread fails at once with
    /// [`Error::SelfWait`]. Default is false. See
    /// [`ferrisson::ClientBuilder::fail_on_self_wait`](crate::ClientBuilder::fail_on_self_wait).
    pub fn fail_on_self_wait(self, on: bool) -> Self {
        self.with(|b| b.fail_on_self_wait(on))
    }

    /// The application name the client's identity gives. See
    /// [`ferrisson::ClientBuilder::app_name`](crate::ClientBuilder::app_name).
    pub fn app_name(self, name: impl Into<String>) -> Self {
        self.with(|b| b.app_name(name))
    }

    /// Whether the client records its identity in Redis. Default: on. See
    /// [`ferrisson::ClientBuilder::identity`](crate::ClientBuilder::identity).
    pub fn identity(self, on: bool) -> Self {
        self.with(|b| b.identity(on))
    }

    /// Checks the settings, connects and loads the scripts, blocking the calling thread.
    ///
    /// The async client is built in a short-lived runtime on a short-lived thread, both gone
    /// before this returns; the command connection is opened again on the client's own thread,
    /// so nothing the client keeps depends on a runtime that has ended.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code (see [where it may be
    /// called](crate::blocking#where-it-may-be-called-threads-that-may-block)); otherwise as
    /// [`ferrisson::ClientBuilder::build`](crate::ClientBuilder::build): [`Error::Config`],
    /// [`Error::Connect`], [`Error::PermissionDenied`], [`Error::Redis`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::builder().url("redis://127.0.0.1/").build()?;
    /// # Ok(()) }
    /// ```
    pub fn build(self) -> Result<Client> {
        may_block()?;
        let builder = self.builder;
        // A thread of its own: the calling thread may have entered a runtime (a
        // `spawn_blocking` closure), where starting another one is refused.
        let built = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("ferrisson-build".to_owned())
                .spawn_scoped(scope, move || {
                    let starter = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let built = starter.block_on(builder.build());
                    // Dropped before any use: the connection opened in it is known dead from
                    // now on, so the next command opens one on the client's thread.
                    drop(starter);
                    Ok(built)
                })
                .and_then(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
        })
        .map_err(|e| {
            Error::Redis(
                std::io::Error::new(e.kind(), format!("cannot start a runtime to build in: {e}"))
                    .into(),
            )
        })?;
        let client = built?;
        let blocker = Blocker::of(&client.inner);
        // That next command, now, so a failure shows here (and combinators over several
        // clients find each client's connection at home): the scripts' load, which every ACL
        // rule for ferrisson allows, and which changes nothing.
        blocker.call(client.inner.executor.load_all())?;
        Ok(Client { client, blocker })
    }
}
