//! The client: one per application, cheap to clone.

use std::sync::Arc;

use tokio::sync::watch;
use uuid::Uuid;

use crate::config::{ClientBuilder, Config};
use crate::connection::Connection;
use crate::core::Core;
use crate::deadline::capped;
use crate::error::{Error, Result};
use crate::lock::{ClientLocks, FairOps, RFairLock, RFencedLock, RLock, RReadWriteLock, RwPolicy};
use crate::owner::Owners;
use crate::pubsub::Hub;
use crate::runtime::ClientThread;
use crate::script::Executor;
use crate::topology::Target;
use crate::watchdog::Watchdog;
use redis::IntoConnectionInfo;

/// A connection to Redis and the machinery every lock shares: the script executor, one pub/sub
/// connection for all waiters, and one watchdog task for all renewed leases.
///
/// Cloning is cheap and shares all of it. The background work (pub/sub, watchdog, releases of
/// dropped guards, repairs) runs on a thread the client owns, named `ferrisson-client`, so it
/// goes on whatever becomes of the runtime the client was built in: a client kept in a `static`
/// and used from one `#[tokio::test]` runtime after another keeps renewing, releasing and waking.
/// The thread ends once the last clone, and the last guard of its locks, are gone.
///
/// Callers' commands go through one connection, opened on the runtime the client was built in;
/// if that runtime ends, the next command opens a new one on its own runtime. The watchdog's
/// renewals and the releases of dropped guards use a second connection, homed on the client's
/// thread, so a caller's runtime blocked in synchronous work does not stop them. At the end of a
/// process, see [`close`](Self::close).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.get_lock("orders:42");
/// let guard = lock.lock().await?;
/// // ... work on order 42; guard.fencing_token() goes with every write ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Core>,
    /// The lock engine's bookkeeping of this client: its owners and local waiters.
    locks: Arc<ClientLocks>,
    /// Dropped with the last handle: waits for the background work (see [`Client::close`]).
    _last: Arc<crate::pending::LastHandle>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.id())
            .field("server", &self.inner.address)
            .field("watchdog_timeout", &self.inner.config.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the server at `url` with default settings.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL (`http://..` or `host:port` say to write
    /// `redis://host:port`); [`Error::NoRuntime`] outside a Tokio runtime;
    /// [`Error::PausedClock`] on a runtime whose Tokio clock is paused (a test with
    /// `start_paused`): the client's timeouts need real time;
    /// [`Error::Connect`] when no connection to the server opens within the connection timeout
    /// (5 s): refused, a name that does not resolve, a password missing or refused (the message
    /// says to put it in the URL), a database the server does not have, a server that does not
    /// answer; [`Error::PermissionDenied`] when the ACL
    /// user may not run the set-up; [`Error::Redis`] when loading the scripts fails, or the
    /// client's thread cannot be started (the OS refused a thread).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::connect("redis://127.0.0.1/").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder().url(url).build().await
    }

    /// A builder for a client with other settings than the defaults.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1/")
    ///     .watchdog_timeout(std::time::Duration::from_secs(10))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// This client's identity: the first half of every owner name it writes into Redis.
    pub fn id(&self) -> Uuid {
        self.inner.owners.client_id()
    }

    /// How many lock owners this client keeps state for now. An owner is one acquisition (and
    /// the holds nested in it), as long as it holds its lock, waits for it, or has a release or
    /// repair of it under way (a [`LockGuard::scope`](crate::LockGuard::scope) future keeps
    /// its hold's owner too). It drops back to zero once every guard is gone and its
    /// background release has finished, however many acquisitions were made: a leak check and
    /// a monitoring gauge. `RMutex` acquires are not counted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_lock("jobs").lock().await?;
    /// assert_eq!(client.live_owners(), 1);
    /// guard.unlock().await?;
    /// assert_eq!(client.live_owners(), 0);
    /// # Ok(()) }
    /// ```
    pub fn live_owners(&self) -> usize {
        self.locks.live.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A handle on the reentrant lock `name`.
    ///
    /// Each acquisition is an owner of its own (see [`RLock`]): acquisitions through one handle,
    /// from one task or many, exclude each other, and only an acquisition nested in a hold's
    /// scope (`with_lock`'s work, a guard's `scope`, `reenter`) is reentrant. A malformed
    /// name (empty, over 16 KiB, broken `{}` hash tag) is reported by every operation of the
    /// handle as [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("reports");
    /// if let Some(guard) = lock.try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn get_lock(&self, name: &str) -> RLock {
        RLock::new(self.inner.clone(), self.locks.clone(), name)
    }

    /// What Redis holds under `name`, whatever kind of object it is: the kind is found from the
    /// keys (a hash with a `mode` field is a read-write lock, another hash a lock; a count is a
    /// semaphore or a latch, told apart by who listens; see [`Snapshot`](crate::inspect::Snapshot)),
    /// in one round trip that changes nothing. When you know the kind, the object's own
    /// `snapshot()` says more (a lock's kind, a count's meaning).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a malformed name;
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds something no ferrisson
    /// object stores (a list, a set, ...) or a key of the object holds another type;
    /// [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use ferrisson::inspect::Snapshot;
    ///
    /// if let Snapshot::Lock(lock) = client.inspect("orders:42").await? {
    ///     println!("{} holder(s), lease {:?}", lock.holders.len(), lock.lease);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<crate::inspect::Snapshot> {
        crate::inspect::any(&self.inner, name).await
    }

    /// A handle on the fair lock `name`: granted in the order the waiters asked, each
    /// acquisition a waiter of its own. See [`RFairLock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_fair_lock("tickets").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn get_fair_lock(&self, name: &str) -> RFairLock {
        let ops = FairOps::new(name, self.inner.config.fair_queue);
        RLock::of(self.inner.clone(), self.locks.clone(), Box::new(ops))
    }

    /// A handle on the read-write lock `name`: each read or write acquisition is an owner of
    /// its own, and a read nested in a writer's scope is the writer's. See [`RReadWriteLock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let rw = client.get_read_write_lock("catalog");
    /// let guard = rw.read_lock().lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn get_read_write_lock(&self, name: &str) -> RReadWriteLock {
        RReadWriteLock::new(
            self.inner.clone(),
            self.locks.clone(),
            name,
            RwPolicy::Redisson,
        )
    }

    /// A handle on the read-write lock `name` with `policy`: with
    /// [`RwPolicy::PreferWriters`], a writer that waits holds new readers of such handles back
    /// until it has had its turn. [`get_read_write_lock`](Self::get_read_write_lock) is this
    /// with [`RwPolicy::Redisson`]. See [`RwPolicy`] for how, and what it costs.
    ///
    /// # Cancel safety
    ///
    /// Not async. The handle's acquires are cancel safe as [`RLock::lock`]; a dropped writer's
    /// wait also takes its mark away (see [`RwPolicy`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use ferrisson::RwPolicy;
    ///
    /// let prices = client.get_read_write_lock_with("prices", RwPolicy::PreferWriters);
    /// let update = prices.write_lock().lock().await?; // readers arriving now wait for it
    /// update.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn get_read_write_lock_with(&self, name: &str, policy: RwPolicy) -> RReadWriteLock {
        RReadWriteLock::new(self.inner.clone(), self.locks.clone(), name, policy)
    }

    /// A handle on the fenced lock `name`, whose acquire methods return the fencing token
    /// first. See [`RFencedLock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let (token, guard) = client.get_fenced_lock("ledger").lock_and_get_token().await?;
    /// # let _ = token;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn get_fenced_lock(&self, name: &str) -> RFencedLock {
        RFencedLock::new(self.inner.clone(), self.locks.clone(), name)
    }

    /// A handle on the count-down latch `name`. See [`RCountDownLatch`](crate::RCountDownLatch).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let done = client.get_count_down_latch("batch:7:done");
    /// done.try_set_count(2).await?;
    /// # Ok(()) }
    /// ```
    pub fn get_count_down_latch(&self, name: &str) -> crate::RCountDownLatch {
        crate::RCountDownLatch::new(self.inner.clone(), name)
    }

    /// A handle on the semaphore `name`. See [`RSemaphore`](crate::RSemaphore).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let builds = client.get_semaphore("build-slots");
    /// builds.try_set_permits(8).await?;
    /// # Ok(()) }
    /// ```
    pub fn get_semaphore(&self, name: &str) -> crate::RSemaphore {
        crate::RSemaphore::new(self.inner.clone(), name)
    }

    /// A handle on the permit-expirable semaphore `name`, whose permits come back by themselves
    /// when their holder dies. See [`RPermitExpirableSemaphore`](crate::RPermitExpirableSemaphore).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let slots = client.get_permit_expirable_semaphore("gpu");
    /// slots.try_set_permits(2).await?;
    /// slots.acquire().await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn get_permit_expirable_semaphore(&self, name: &str) -> crate::RPermitExpirableSemaphore {
        crate::RPermitExpirableSemaphore::new(self.inner.clone(), name)
    }

    /// A handle on the non-reentrant mutex `name`. See [`RMutex`](crate::RMutex).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_mutex("schema-migration").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn get_mutex(&self, name: &str) -> crate::RMutex {
        crate::RMutex::new(self.inner.clone(), self.locks.clone(), name)
    }

    pub(crate) async fn start(config: Config) -> Result<Client> {
        tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        if crate::clock::paused() {
            return Err(Error::PausedClock);
        }
        let target = Target::of(&config).map_err(|e| {
            let url = crate::urls::redacted(&config.url);
            Error::Config(format!("cannot use `{url}`: {e}"))
        })?;
        // Spans and connect errors name the server: the one URL, a cluster's first seed, or the
        // first sentinel (host and port only: a URL may carry a password).
        let shown = match &config.topology {
            crate::config::Topology::Single(url) => url.as_str(),
            crate::config::Topology::Cluster(seeds) => seeds[0].as_str(),
            crate::config::Topology::Sentinel { sentinels, .. } => sentinels[0].as_str(),
        };
        let info = shown.into_connection_info().map_err(|e| {
            let url = crate::urls::redacted(shown);
            Error::Config(format!("cannot use `{url}`: {e}"))
        })?;
        let address = match &config.topology {
            crate::config::Topology::Single(_) => info.addr().to_string(),
            crate::config::Topology::Cluster(seeds) if seeds.len() > 1 => {
                format!("{} (a cluster seed; {} more)", info.addr(), seeds.len() - 1)
            }
            crate::config::Topology::Cluster(_) => format!("{} (a cluster seed)", info.addr()),
            crate::config::Topology::Sentinel { master, .. } => {
                format!("master `{master}` named by sentinel {}", info.addr())
            }
        };
        let unreachable = |what: &'static str| {
            let address = address.clone();
            move |e: redis::RedisError| {
                if crate::clock::is_paused(&e) {
                    return Error::PausedClock;
                }
                match crate::error::permission_refusal(&e) {
                    Some(reason) => Error::PermissionDenied {
                        what: what.into(),
                        reason,
                    },
                    None => Error::Connect {
                        address,
                        reason: crate::error::connect_reason(&e),
                    },
                }
            }
        };
        let id = Uuid::new_v4();
        let peer = crate::outage::Peer {
            client: id,
            server: address.as_str().into(),
        };
        // Opened here, on the caller's runtime: commands from that runtime then reach the
        // connection without a thread hop (see `connection`).
        let connection = Arc::new(
            Connection::new(
                target.clone(),
                config.connection_timeout,
                config.response_timeout,
                peer.clone(),
            )
            .reconnect_wait(config.reconnect_wait),
        );
        capped(config.connection_timeout, connection.open())
            .await
            .map_err(unreachable("the connection's set-up (SELECT)"))?;
        let mut executor = Executor::new(connection.clone(), config.round_trip_cap());
        if let Some((acks, timeout)) = config.sync_replicas {
            let synced = Arc::new(
                Connection::synced(
                    target.clone(),
                    config.connection_timeout,
                    config.response_timeout + timeout,
                    peer.clone(),
                )
                .reconnect_wait(config.reconnect_wait),
            );
            // Opened now, like the command connection: a failure shows at build().
            capped(config.connection_timeout, synced.open())
                .await
                .map_err(unreachable("the synced connection's set-up"))?;
            executor = executor.with_synced(synced, acks, timeout);
        }
        let sharded = executor.probe_sharded().await;
        let executor = executor.with_sharded(sharded);
        // The first command a server that wants a password refuses (opening a connection to
        // one server sends none): a connect error, which says what to do.
        executor.load_all().await.map_err(|e| match e {
            Error::Redis(e) if crate::error::auth_refused(&e) => Error::Connect {
                address: address.clone(),
                reason: crate::error::connect_reason(&e),
            },
            other => other,
        })?;
        if !executor.has_set_get().await {
            return Err(Error::Connect {
                address: address.clone(),
                reason: "the server is older than Redis 6.2: it does not know SET … GET, which \
                         ferrisson's scripts use (Redis 6.2 or newer, or Valkey, is needed)"
                    .into(),
            });
        }

        // Written before anything else of the client runs: a user refused it learns so here.
        let identity = match &config.identity {
            Some(app) => {
                let own = crate::identity::Own::new(id, app.clone());
                own.write(&executor).await?;
                Some(Arc::new(own))
            }
            None => None,
        };

        let thread = ClientThread::start().await.map_err(|e| {
            Error::Redis(
                std::io::Error::new(e.kind(), format!("cannot start the client's thread: {e}"))
                    .into(),
            )
        })?;
        let executor = if config.group_commit {
            executor.with_group_commit(Some(thread.handle().clone()))
        } else {
            executor
        };
        // The background work's own connection, homed on the client's thread.
        connection.set_own_home(thread.handle().clone());
        capped(config.connection_timeout, connection.open_own_now())
            .await
            .map_err(unreachable("the background connection's set-up"))?;
        let (shutdown, shutdown_rx) = watch::channel(());
        let pending = Arc::new(crate::pending::Pending::default());
        let observe = crate::observe::Context::new(&info, &config);
        let hub = Hub::start(
            target.clone(),
            sharded,
            (config.connection_timeout, config.response_timeout),
            peer.clone(),
            thread.handle(),
        );
        // Told when the sentinels name a new master, as the hub is.
        let moved = Arc::new(tokio::sync::Notify::new());
        if let Some(sentinels) = target.sentinels() {
            let reconnect_hub = hub.reconnector();
            let follow = crate::topology::follow_master(
                sentinels.clone(),
                {
                    let executor = executor.clone();
                    move || executor.reopen()
                },
                {
                    let moved = moved.clone();
                    move || {
                        reconnect_hub();
                        moved.notify_one();
                    }
                },
                shutdown_rx.clone(),
            );
            thread.handle().spawn(follow);
        }
        let presence = match (config.takeover_grace, &identity) {
            (Some(grace), Some(own)) => {
                let setup = crate::presence::Setup {
                    target: target.clone(),
                    id,
                    identity: crate::identity::key(id),
                    grace,
                    peer,
                    connection_timeout: config.connection_timeout,
                    response_timeout: config.response_timeout,
                };
                crate::presence::start_announced(setup, own, &executor, thread.handle()).await
            }
            _ => None,
        };
        let watchdog = Watchdog::start(
            executor.clone(),
            config.watchdog_timeout,
            shutdown_rx.clone(),
            thread.handle(),
            identity.clone(),
            presence
                .as_ref()
                .map(|(_, started)| started.doubt().clone()),
        );
        if let Some((setup, started)) = presence {
            let keep = crate::presence::keep(
                setup,
                started,
                watchdog.holding(),
                watchdog.loser(),
                moved,
                shutdown_rx,
            );
            thread
                .handle()
                .spawn(crate::connection::on_own_connection(keep));
        }
        Ok(Client {
            inner: Arc::new(Core {
                owners: Owners::new(id),
                address: address.into(),
                config,
                executor,
                hub,
                watchdog,
                observe,
                identity,
                pending: pending.clone(),
                closed: std::sync::atomic::AtomicBool::new(false),
                draining: std::sync::OnceLock::new(),
                _shutdown: shutdown,
                thread,
            }),
            locks: Arc::default(),
            _last: Arc::new(crate::pending::LastHandle::new(pending)),
        })
    }

    /// Closes the client: every handle of it refuses new acquires and waits from now on
    /// ([`Error::Closed`]); releases, renewals of what is still held and reads go on. Then waits
    /// until the background work of this client is done (releases of dropped guards and
    /// unlocks under way, repairs, leaving fair queues), at most twice the response timeout, and drops this handle. Call it, after the last guard is gone, at the end of a process: work still under
    /// way when a process exits never reaches Redis, and its locks stay taken until their
    /// leases run out. Returns what was still under way when it gave up (empty: all done);
    /// each is also logged as a warning. Last, it removes the client's identity (see
    /// [`clients`](Self::clients)) in the time left; if Redis does not answer, the identity's
    /// TTL removes it within 5 s (or once what is still held could no longer live). All of it
    /// takes at most twice the response timeout (6 s by default), whatever Redis does.
    ///
    /// Dropping the last handle of a client waits for the releases of dropped guards (which go
    /// over the client thread's own connection) for at most one second, blocking the thread:
    /// a `main` that returns, or ends with `?`, flushes so. A process that
    /// ends without dropping its client (`std::process::exit`, a `static` client) must call
    /// `close` on a clone first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the work goes on whether or not this waits for it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
    /// let guard = client.get_lock("nightly-report").lock().await?;
    /// // ... the work ...
    /// drop(guard); // released in the background
    /// let left = client.close().await;
    /// assert!(left.is_empty(), "not released: {left:?}");
    /// # Ok(()) }
    /// ```
    pub async fn close(self) -> Vec<String> {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        // One deadline for all of it, the identity's removal included.
        let deadline = tokio::time::Instant::now() + self.inner.config.response_timeout * 2;
        let within = deadline.saturating_duration_since(tokio::time::Instant::now());
        let left = self.inner.pending.settled(within).await;
        crate::pending::warn_left(&left);
        if let Some(identity) = &self.inner.identity {
            let removal = identity.remove(&self.inner.executor);
            match tokio::time::timeout_at(deadline, removal).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "the client's identity was not removed; its TTL ends it");
                }
                Err(_) => {
                    tracing::debug!(
                        "no time left to remove the client's identity; its TTL ends it"
                    );
                }
            }
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Client>();
    }
}
