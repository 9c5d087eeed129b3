//! Client settings and their builder.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::MAX_LEASE;
use crate::urls::{check_scheme, check_urls};

mod fairness;
mod reconnect;
mod self_wait;
mod takeover;

pub(crate) use self_wait::SelfWait;

/// Settings every part of a client reads. Built and checked by [`ClientBuilder`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// What the client connects to, for display and ordering: the URL, the first seed of a
    /// cluster, or `sentinel://<master>@<first sentinel>`.
    pub(crate) url: String,
    pub(crate) topology: Topology,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) recheck_interval: Duration,
    /// How long a call without a wait budget of its own waits for a connection that is being
    /// reopened (see `Connection::open`).
    pub(crate) reconnect_wait: Duration,
    /// Both fair-lock queue settings (the field keeps the name of the first, which it held
    /// alone before): a fair lock takes them whole.
    pub(crate) fair_queue: FairQueue,
    /// When an RLock waiter counts as starving, and what a lock handed to one looks like.
    pub(crate) starvation: Starvation,
    /// Replica-synced grants: at least this many replicas must acknowledge a grant within
    /// the duration, or it is undone.
    pub(crate) sync_replicas: Option<(u32, Duration)>,
    /// Concurrent lock operations of one kind share script calls (group commit).
    pub(crate) group_commit: bool,
    /// What an acquisition that waits for a hold of its own task or thread gets.
    pub(crate) self_wait: SelfWait,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<Tls>,
    /// Metrics carry a `lock` label with the object's name.
    #[cfg(feature = "metrics")]
    pub(crate) metrics_lock_names: bool,
    /// The client's identity (see `identity`): `None` when turned off, else the application
    /// name set (`Some(None)`: the executable's file name).
    pub(crate) identity: Option<Option<String>>,
    /// How long a signal's drain waits for the holds to finish (see `drain`).
    pub(crate) drain_grace: Duration,
    /// How soon a dead holder's locks may be taken over (see `presence`); `None`: never (off,
    /// without identity, or on a cluster).
    pub(crate) takeover_grace: Option<Duration>,
}

/// Which servers a client talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (a master without failover, or one that a proxy keeps at one address).
    Single(String),
    /// A Redis Cluster, found from these seed nodes.
    Cluster(Vec<String>),
    /// A master watched by Sentinel: its name, and the sentinels to ask for it.
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

/// How a fair lock's waiters keep their place in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FairQueue {
    /// How long a ferrisson waiter keeps its place without calling again.
    pub(crate) timeout: Duration,
    /// Redisson's `threadWaitTime`: what each waiter's turn adds to the one ahead of it.
    pub(crate) thread_wait: Duration,
}

/// The starvation mode of plain locks (`RLock`, `RFencedLock`, `RMutex`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Starvation {
    /// A waiter that has waited this long says so to Redis, and the next release hands it the
    /// lock (`None`: never).
    pub(crate) threshold: Option<Duration>,
    /// The lease of a lock handed to a starving waiter until the waiter takes it up: how long a
    /// waiter that died meanwhile keeps the lock from everyone else.
    pub(crate) handoff: Duration,
    /// How long the lock's set of starving waiters lives after its last new entry. A live
    /// waiter asks again within the re-check interval, so this outlasts it.
    pub(crate) keep: Duration,
}

/// Certificates for `rediss://` connections.
#[cfg(feature = "tls")]
#[derive(Clone, Default)]
pub(crate) struct Tls {
    pub(crate) root_certificates: Option<Vec<u8>>,
    pub(crate) client_identity: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("root_certificates", &self.root_certificates.is_some())
            .field(
                "client_identity",
                &self.client_identity.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Config {
    /// How long a release latch lives: longer than any resend of the same release can come.
    pub(crate) fn unlock_latch_ttl(&self) -> Duration {
        self.response_timeout
            .saturating_mul(4)
            .saturating_add(self.connection_timeout)
            .max(Duration::from_secs(5))
    }

    /// The hard cap on one request on an open connection. A connection being reopened is waited
    /// for apart from it: up to the caller's wait budget, else the reconnect wait (see
    /// `Connection::open`), each attempt to open bounded by the connection timeout.
    pub(crate) fn round_trip_cap(&self) -> Duration {
        self.response_timeout
            .saturating_add(self.connection_timeout)
    }
}

/// Builds a [`Client`](crate::Client) with settings other than the defaults.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::builder()
///     .url("redis://127.0.0.1:6379")
///     .watchdog_timeout(Duration::from_secs(10))
///     .response_timeout(Duration::from_secs(1))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ClientBuilder {
    url: Option<String>,
    cluster: Option<Vec<String>>,
    sentinel: Option<(String, Vec<String>)>,
    sync_replicas: Option<(u32, Duration)>,
    watchdog_timeout: Duration,
    connection_timeout: Duration,
    response_timeout: Duration,
    recheck_interval: Duration,
    reconnect_wait: Duration,
    fair_queue_timeout: Duration,
    fair_thread_wait: Duration,
    starvation_threshold: Option<Duration>,
    /// `None`: the default, 500 ms or the watchdog timeout if shorter.
    starvation_handoff: Option<Duration>,
    group_commit: bool,
    /// Set in `self_wait.rs`.
    self_wait_warning: Duration,
    fail_on_self_wait: bool,
    #[cfg(feature = "tls")]
    tls: Option<Tls>,
    #[cfg(feature = "metrics")]
    metrics_lock_names: bool,
    /// Set in `identity.rs`.
    pub(crate) identity: bool,
    pub(crate) app_name: Option<String>,
    /// Set in `drain.rs`.
    pub(crate) drain_grace: Duration,
    /// Set in `takeover.rs`; `None`: not set (the default depends on `sync_replicas`).
    takeover_grace: Option<Option<Duration>>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            url: None,
            cluster: None,
            sentinel: None,
            sync_replicas: None,
            watchdog_timeout: Duration::from_secs(30),
            connection_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(3),
            recheck_interval: Duration::from_secs(5),
            reconnect_wait: Duration::from_secs(5),
            fair_queue_timeout: Duration::from_secs(5),
            fair_thread_wait: Duration::from_secs(300),
            starvation_threshold: Some(Duration::from_millis(50)),
            starvation_handoff: None,
            group_commit: true,
            self_wait_warning: Duration::from_secs(3),
            fail_on_self_wait: false,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "metrics")]
            metrics_lock_names: false,
            identity: true,
            app_name: None,
            drain_grace: crate::drain::DEFAULT_GRACE,
            takeover_grace: None,
        }
    }
}

impl ClientBuilder {
    /// The server to connect to: `redis://[user:password@]host[:port][/db]`, `rediss://` for
    /// TLS (with the `tls` feature), or a Unix socket (`unix:///path`, `redis+unix:///path`).
    ///
    /// There is no default: [`build`](Self::build) fails without one. Another scheme
    /// (`http://`) or none (`host:port`) fails there with [`Error::Config`], which says what to
    /// write instead (`redis://host:port`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://:s3cret@cache.internal:6379/0") // a password, and database 0
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// A Redis Cluster, found from `seeds` (any of its nodes, `redis://` or `rediss://`, not
    /// mixed): commands go to the master of their key's slot, waiters listen with sharded pub/sub
    /// (`SSUBSCRIBE`, as Redisson 3.22+ does on Redis 7), and the client follows slot moves and
    /// failovers. Instead of [`url`](Self::url) and [`sentinel`](Self::sentinel).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cluster = Some(seeds.into_iter().map(Into::into).collect());
        self
    }

    /// A master watched by Sentinel: the client asks `sentinels` for the master named
    /// `master`, and moves its connections, waiters and renewals to a new master by itself
    /// after a failover. The master is reached with the first sentinel URL's credentials and
    /// database. Instead of [`url`](Self::url) and [`cluster`](Self::cluster).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .sentinel("mymaster", ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"])
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel<I, S>(mut self, master: impl Into<String>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let sentinels = sentinels.into_iter().map(Into::into).collect();
        self.sentinel = Some((master.into(), sentinels));
        self
    }

    /// Replica-synced grants (Redisson's `checkLockSyncedSlaves`): after every lock grant the
    /// client sends `WAIT min_acks timeout` right behind the grant, on a connection of its own
    /// (WAIT blocks the connection it is sent on), and when fewer than `min_acks` replicas
    /// acknowledged the grant within `timeout`, the grant is undone and the call fails with
    /// [`Error::ReplicasNotSynced`](crate::Error::ReplicasNotSynced). Off by default.
    ///
    /// What it promises: a grant that returned `Ok` had reached `min_acks` replicas, so a
    /// failover that promotes one of them keeps it. What it does not: Redis replication stays
    /// asynchronous, and a failover may still promote a replica that had not acknowledged it
    /// (with several replicas and `min_acks` below their number), or lose what a replica had
    /// only in memory; it narrows the window in which a failover forgets a grant, it does not
    /// close it. Renewals and releases are not synced. It applies to grants of an owner: the
    /// lock family (RLock, fair, read/write, fenced, mutex) and permit-expirable semaphores'
    /// permits; not to `RSemaphore` (unowned permits) or latches.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let client = ferrisson::Client::builder()
    ///     .sentinel("mymaster", ["redis://10.0.0.1:26379"])
    ///     .sync_replicas(1, Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sync_replicas(mut self, min_acks: u32, timeout: Duration) -> Self {
        self.sync_replicas = Some((min_acks, timeout));
        self
    }

    /// The lease of locks taken without one (`lock()`, `try_lock()`), which the watchdog renews
    /// every third of it for as long as the guard lives. Redisson calls it
    /// `lockWatchdogTimeout`.
    ///
    /// Default is 30 s; at least 30 ms.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long one attempt to open a connection may take.
    ///
    /// Default is 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long to wait for the reply to one command before failing with a timeout.
    ///
    /// Default is 3 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The longest a waiting `lock()` sleeps between two attempts when no unlock message
    /// arrives, so a lost message or a holder key without TTL never hangs a waiter. Waiters
    /// normally wake on the unlock message, or when the holder's lease runs out if sooner.
    ///
    /// Default is 5 s.
    pub fn recheck_interval(mut self, interval: Duration) -> Self {
        self.recheck_interval = interval;
        self
    }

    /// Trusts the CA certificates in `pem` (PEM, one or more) for `rediss://` connections,
    /// instead of the platform's root store: the usual set-up for a Redis with a private CA.
    ///
    /// Default is the platform's root certificates.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let ca = std::fs::read("/etc/redis/ca.crt").expect("the CA file");
    /// let client = ferrisson::Client::builder()
    ///     .url("rediss://redis.internal:6380")
    ///     .tls_root_certificates(ca)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.get_or_insert_with(Tls::default).root_certificates = Some(pem.into());
        self
    }

    /// Presents this client certificate chain and key (both PEM) to servers that require
    /// mutual TLS.
    ///
    /// Default is no client certificate.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.get_or_insert_with(Tls::default).client_identity =
            Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Whether lock operations that callers of this client send while two of their kind are
    /// on their way to the same server (the same cluster slot) wait, and then go out together
    /// in one script call (group commit). A lone caller never waits: only operations
    /// that would queue behind the calls in flight are grouped. Redis then pays its fixed cost
    /// of running a script once for the whole group: 20–30% less Redis CPU per lock cycle
    /// (`cargo bench --bench script_cost`), capacity where Redis's one thread is the limit. A
    /// single client's throughput is about the same either way (BENCHMARKS.md, notes on issue
    /// 27); off, every operation is its own script call.
    ///
    /// Each operation keeps its own reply, error and cancellation. Applies to the acquires,
    /// releases and handovers of [`RLock`](crate::RLock), [`RFencedLock`](crate::RFencedLock)
    /// and the mutex. Default is true.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .group_commit(false) // every operation its own script call
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn group_commit(mut self, on: bool) -> Self {
        self.group_commit = on;
        self
    }

    /// Whether the metrics of every lock, semaphore and latch carry a `lock` label with its
    /// name (feature `metrics`).
    ///
    /// **Cardinality:** each distinct name becomes a time series of every metric in the
    /// recorder (and in Prometheus) for as long as the process runs. Turn it on only when the
    /// names are few and fixed (`"billing"`, `"nightly-report"`), never for names built from ids
    /// (`"order:{id}"`), which grow without bound.
    ///
    /// Default is false: metrics are labelled by kind (and outcome) only.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .metrics_lock_names(true) // a handful of fixed lock names here
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_lock_names(mut self, on: bool) -> Self {
        self.metrics_lock_names = on;
        self
    }

    /// Checks the settings, connects and loads the scripts.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a missing or malformed URL (another scheme than `redis://` or
    /// `rediss://`, or none), a duration out of its range, or a fair lock thread wait time
    /// shorter than the fair lock queue timeout;
    /// [`Error::NoRuntime`] outside a Tokio runtime; [`Error::PausedClock`] on a runtime whose
    /// clock is paused; [`Error::Connect`] when no connection opens within the connection
    /// timeout, or the server wants a password the URL does not carry or refuses the one it
    /// does (see [`Client::connect`](crate::Client::connect));
    /// [`Error::PermissionDenied`] when the ACL user may not run the set-up, or write the
    /// client's identity (grant `~ferrisson_client:*`, or turn [`identity`](Self::identity)
    /// off); [`Error::Redis`] when loading the scripts fails, or the client's thread cannot be
    /// started.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made client (an identity it wrote
    /// vanishes with its TTL).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder().url("redis://127.0.0.1/").build().await?;
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<crate::Client> {
        let config = self.check()?;
        crate::Client::start(config).await
    }

    pub(crate) fn check(self) -> Result<Config> {
        let self_wait = self.self_wait()?;
        let (url, topology) = match (self.url, self.cluster, self.sentinel) {
            (Some(url), None, None) => {
                check_scheme("url", &url, true)?;
                (url.clone(), Topology::Single(url))
            }
            (None, Some(seeds), None) => {
                check_urls("cluster", &seeds)?;
                (seeds[0].clone(), Topology::Cluster(seeds))
            }
            (None, None, Some((master, sentinels))) => {
                check_urls("sentinel", &sentinels)?;
                if master.is_empty() {
                    return Err(Error::Config("sentinel: the master name is empty".into()));
                }
                let url = format!("sentinel://{master}@{}", sentinels[0]);
                (url, Topology::Sentinel { master, sentinels })
            }
            (None, None, None) => {
                return Err(Error::Config(
                    "no server given: call .url(\"redis://host:port\"), .cluster(..) or .sentinel(..)"
                        .into(),
                ));
            }
            _ => {
                return Err(Error::Config(
                    "give one of .url(..), .cluster(..) and .sentinel(..), not several".into(),
                ));
            }
        };
        let day = Duration::from_secs(24 * 3600);
        for (what, d, min, max) in [
            (
                "watchdog_timeout",
                self.watchdog_timeout,
                Duration::from_millis(30),
                MAX_LEASE,
            ),
            (
                "fair_lock_queue_timeout",
                self.fair_queue_timeout,
                Duration::from_millis(30),
                MAX_LEASE,
            ),
            (
                "fair_lock_thread_wait_time",
                self.fair_thread_wait,
                Duration::from_millis(30),
                MAX_LEASE,
            ),
            (
                "connection_timeout",
                self.connection_timeout,
                Duration::from_millis(1),
                day,
            ),
            (
                "response_timeout",
                self.response_timeout,
                Duration::from_millis(1),
                day,
            ),
            (
                "recheck_interval",
                self.recheck_interval,
                Duration::from_millis(1),
                day,
            ),
            ("drain_grace", self.drain_grace, Duration::ZERO, day),
            ("reconnect_wait", self.reconnect_wait, Duration::ZERO, day),
        ] {
            if d < min || d > max {
                return Err(Error::Config(format!(
                    "{what} must be between {min:?} and {max:?}, got {d:?}"
                )));
            }
        }
        let takeover_grace = takeover::checked(self.takeover_grace, self.sync_replicas.is_some())?;
        if let Some(t) = self.starvation_threshold
            && (t < Duration::from_millis(1) || t > day)
        {
            return Err(Error::Config(format!(
                "lock_starvation_threshold must be between 1ms and a day, got {t:?}"
            )));
        }
        let handoff = self
            .starvation_handoff
            .unwrap_or_else(|| Duration::from_millis(500).min(self.watchdog_timeout));
        if handoff < Duration::from_millis(10) || handoff > self.watchdog_timeout {
            return Err(Error::Config(format!(
                "lock_starvation_handoff_lease must be between 10ms and the watchdog timeout ({:?}), got {handoff:?}",
                self.watchdog_timeout
            )));
        }
        // A live waiter's turn must outlast the pause between two of its calls.
        if self.fair_thread_wait < self.fair_queue_timeout {
            return Err(Error::Config(format!(
                "fair_lock_thread_wait_time ({:?}) must be at least fair_lock_queue_timeout ({:?})",
                self.fair_thread_wait, self.fair_queue_timeout
            )));
        }
        if let Some((acks, timeout)) = self.sync_replicas
            && (acks == 0 || timeout.is_zero() || timeout > day)
        {
            return Err(Error::Config(format!(
                "sync_replicas needs at least 1 replica and a timeout between 1 ms and a day, got {acks} and {timeout:?}"
            )));
        }
        // Presence lives in the identity, and a cluster counts subscribers per node.
        let takeover_grace =
            takeover_grace.filter(|_| self.identity && !matches!(topology, Topology::Cluster(_)));
        Ok(Config {
            url,
            topology,
            sync_replicas: self.sync_replicas,
            watchdog_timeout: self.watchdog_timeout,
            connection_timeout: self.connection_timeout,
            response_timeout: self.response_timeout,
            recheck_interval: self.recheck_interval,
            reconnect_wait: self.reconnect_wait,
            fair_queue: FairQueue {
                timeout: self.fair_queue_timeout,
                thread_wait: self.fair_thread_wait,
            },
            starvation: Starvation {
                threshold: self.starvation_threshold,
                handoff,
                keep: self
                    .recheck_interval
                    .saturating_mul(3)
                    .saturating_add(handoff)
                    .min(MAX_LEASE),
            },
            group_commit: self.group_commit,
            self_wait,
            #[cfg(feature = "tls")]
            tls: self.tls,
            #[cfg(feature = "metrics")]
            metrics_lock_names: self.metrics_lock_names,
            takeover_grace,
            identity: self.identity.then_some(self.app_name),
            drain_grace: self.drain_grace,
        })
    }
}

#[cfg(test)]
mod tests;
