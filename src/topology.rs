//! Where a client's connections go: one server, a Redis Cluster, or the master a set of
//! sentinels names (asked again on every connection, so a failover is followed).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};

use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisError, RedisResult};

use crate::config::{Config, Topology};
use crate::connection::Conn;
use crate::deadline::capped;

/// The servers behind a client, and how to open a connection to them.
#[derive(Clone)]
pub(crate) enum Target {
    Single(Box<redis::Client>),
    Cluster(Arc<Cluster>),
    Sentinel(Arc<Sentinels>),
}

/// A Redis Cluster: the client for commands, and what it takes to build the pub/sub one.
pub(crate) struct Cluster {
    client: ClusterClient,
    seeds: Vec<String>,
    config: Config,
}

impl Cluster {
    fn builder(seeds: &[String], config: &Config) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
            .connection_timeout(config.connection_timeout)
            .response_timeout(config.response_timeout);
        with_tls(builder, config)
    }

    /// A RESP3 cluster client whose pushes (messages, subscription changes) go to `pushes`.
    pub(crate) fn pubsub_client(
        &self,
        pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> RedisResult<ClusterClient> {
        Self::builder(&self.seeds, &self.config)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Single(_) => f.write_str("Single"),
            Target::Cluster(_) => f.write_str("Cluster"),
            Target::Sentinel(s) => write!(f, "Sentinel({})", s.master),
        }
    }
}

impl Target {
    /// The target of a checked configuration.
    pub(crate) fn of(config: &Config) -> RedisResult<Target> {
        Ok(match &config.topology {
            Topology::Single(url) => Target::Single(Box::new(redis_client(config, url)?)),
            Topology::Cluster(seeds) => Target::Cluster(Arc::new(Cluster {
                client: Cluster::builder(seeds, config).build()?,
                seeds: seeds.clone(),
                config: config.clone(),
            })),
            Topology::Sentinel { master, sentinels } => {
                // Checked here, so that a malformed URL is refused at build().
                for url in sentinels {
                    url.as_str().into_connection_info()?;
                }
                Target::Sentinel(Arc::new(Sentinels {
                    master: master.clone(),
                    sentinels: sentinels.clone(),
                    timeout: config.connection_timeout,
                    config: config.clone(),
                    connected: Mutex::new(None),
                }))
            }
        })
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// Opens a command connection.
    pub(crate) async fn connect(&self, config: &AsyncConnectionConfig) -> RedisResult<Conn> {
        match self {
            Target::Single(client) => client
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(Conn::Single),
            Target::Cluster(cluster) => cluster
                .client
                .get_async_connection()
                .await
                .map(Conn::Cluster),
            Target::Sentinel(sentinels) => {
                let (client, address) = sentinels.master().await?;
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?;
                sentinels.check_master(&mut conn).await?;
                *sentinels
                    .connected
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(address);
                Ok(Conn::Single(conn))
            }
        }
    }

    /// The client for a pub/sub connection to the one server (alone, or the sentinels'
    /// master now); `None` for a cluster, whose hub subscribes through a cluster connection.
    pub(crate) async fn pubsub_client(&self) -> RedisResult<Option<redis::Client>> {
        match self {
            Target::Single(client) => Ok(Some((**client).clone())),
            Target::Cluster(_) => Ok(None),
            Target::Sentinel(sentinels) => sentinels.master().await.map(|(c, _)| Some(c)),
        }
    }

    pub(crate) fn cluster(&self) -> Option<&Cluster> {
        match self {
            Target::Cluster(cluster) => Some(cluster),
            _ => None,
        }
    }

    pub(crate) fn sentinels(&self) -> Option<&Arc<Sentinels>> {
        match self {
            Target::Sentinel(sentinels) => Some(sentinels),
            _ => None,
        }
    }

    /// Whether `e` says the connection no longer reaches the master (a sentinel failover
    /// demoted it): the connection is then opened again, wherever the master is now. A script's
    /// write refused counts as well, in the words of every server (Redis 6.2 wraps it).
    pub(crate) fn moved_away(&self, e: &RedisError) -> bool {
        matches!(self, Target::Sentinel(_))
            && crate::error::command_error(e.clone()).code() == Some("READONLY")
    }
}

#[cfg(not(feature = "tls"))]
fn with_tls(builder: ClusterClientBuilder, _: &Config) -> ClusterClientBuilder {
    builder
}

#[cfg(feature = "tls")]
fn with_tls(builder: ClusterClientBuilder, config: &Config) -> ClusterClientBuilder {
    match tls_certificates(config) {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    }
}

/// A master found through sentinels.
pub(crate) struct Sentinels {
    master: String,
    sentinels: Vec<String>,
    timeout: Duration,
    config: Config,
    /// The address of the master the command connection was last opened to.
    connected: Mutex<Option<(String, u16)>>,
}

/// How often the sentinels are asked whether the master moved (Redisson asks every second).
const MASTER_CHECK: Duration = Duration::from_secs(1);

/// Asks the sentinels every [`MASTER_CHECK`] where the master is; when it moved, the command
/// connection and the pub/sub hub are opened again there (the watchdog's renewals follow the
/// command connection). A READONLY reply reopens the command connection sooner, and a lost
/// connection reopens either at once. Ends with `shutdown`.
pub(crate) async fn follow_master(
    sentinels: Arc<Sentinels>,
    reopen_commands: impl Fn(),
    reconnect_hub: impl Fn(),
    mut shutdown: tokio::sync::watch::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(MASTER_CHECK) => {}
        }
        let Ok(now) = sentinels.master_address().await else {
            continue; // no sentinel answered: ask again at the next check
        };
        let before = sentinels
            .connected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if before.as_ref().is_some_and(|b| *b != now) {
            tracing::warn!(
                master = %sentinels.master,
                from = ?before,
                to = ?now,
                "the sentinels name a new master; moving the connections there"
            );
            *sentinels
                .connected
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(now);
            reopen_commands();
            reconnect_hub();
        }
    }
}

impl Sentinels {
    /// Asks the sentinels, in turn, where the master is: the first that knows answers.
    pub(crate) async fn master_address(&self) -> RedisResult<(String, u16)> {
        let mut why = Vec::new();
        for url in &self.sentinels {
            let ask = async {
                let client =
                    redis::Client::open(without_setinfo(url.as_str().into_connection_info()?))?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match capped(self.timeout, ask).await {
                Ok(Some(address)) => return Ok(address),
                Ok(None) => why.push(format!("{url} knows no master named `{}`", self.master)),
                Err(e) => why.push(format!("{url}: {e}")),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "no sentinel named the master `{}`: {}",
                self.master,
                why.join("; ")
            ),
        )
        .into())
    }

    /// A client of the master now, with the first sentinel URL's credentials and database,
    /// and the master's address.
    async fn master(&self) -> RedisResult<(redis::Client, (String, u16))> {
        let (host, port) = self.master_address().await?;
        let address = (host.clone(), port);
        let mut info = self.sentinels[0].as_str().into_connection_info()?;
        let addr = match info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        info = info.set_addr(addr);
        Ok((redis_client_info(&self.config, info)?, address))
    }

    /// Makes sure a new connection reached a master: between the sentinels' answer and the
    /// connection, a failover may have demoted it.
    async fn check_master(&self, conn: &mut redis::aio::MultiplexedConnection) -> RedisResult<()> {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(conn).await?;
        match role.first() {
            Some(redis::Value::BulkString(role)) if role == b"master" => Ok(()),
            _ => Err(std::io::Error::other(format!(
                "the server the sentinels named as master `{}` is not a master (a failover is under way)",
                self.master
            ))
            .into()),
        }
    }
}

/// A client of the one server at `url`, with the configured TLS certificates.
pub(crate) fn redis_client(config: &Config, url: &str) -> redis::RedisResult<redis::Client> {
    redis_client_info(config, url.into_connection_info()?)
}

/// `info` without the `CLIENT SETINFO` the redis crate sends on every new connection, when it
/// logs in. Redis 7.2 and Valkey know the command, so a user of the README's ACL rule, which
/// must also work on Redis 7.0 (which refuses `+client|setinfo` in a rule), would be refused it
/// on every connection, and each refusal lands in `ACL LOG`, where an auditor looks for attacks.
/// It only names the library in `CLIENT LIST`; the client reads nothing back.
///
/// Only when `info` has a password: the connection then sends `AUTH`, whose answer proves the
/// server answers before the connection counts as open. Without one, `CLIENT SETINFO` is the only
/// request sent while connecting, and without it a frozen server, or a proxy that accepts and
/// drops, would look connected until the first command. (A Cluster's connections send it
/// always: redis-rs' cluster client has no such setting.)
pub(crate) fn without_setinfo(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    if info.redis_settings().password().is_none() {
        return info;
    }
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

/// As [`redis_client`], for connection details already parsed.
#[cfg(not(feature = "tls"))]
pub(crate) fn redis_client_info(
    _config: &Config,
    info: redis::ConnectionInfo,
) -> redis::RedisResult<redis::Client> {
    redis::Client::open(without_setinfo(info))
}

/// As [`redis_client`], for connection details already parsed.
#[cfg(feature = "tls")]
pub(crate) fn redis_client_info(
    config: &Config,
    info: redis::ConnectionInfo,
) -> redis::RedisResult<redis::Client> {
    let info = without_setinfo(info);
    match tls_certificates(config) {
        Some(certificates) => redis::Client::build_with_tls(info, certificates),
        None => redis::Client::open(info),
    }
}

/// The configured TLS certificates, if any were given.
#[cfg(feature = "tls")]
pub(crate) fn tls_certificates(config: &Config) -> Option<redis::TlsCertificates> {
    let tls = config.tls.as_ref()?;
    Some(redis::TlsCertificates {
        client_tls: tls
            .client_identity
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.root_certificates.clone(),
    })
}
