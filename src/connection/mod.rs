//! The command connection: one multiplexed connection per client, whose driver task runs on the
//! runtime that opened it, its home.
//!
//! A caller on the home runtime hands its command to the driver without waking another thread,
//! which keeps an uncontended lock and unlock as fast as a bare redis-rs connection. Callers
//! elsewhere (the client's own thread, other runtimes) reach the same driver across threads; one
//! connection for all keeps every command of a holder in the order it was sent, which the repair
//! of an acquire cancelled mid-flight relies on.
//!
//! The client's own background work (renewals, the heartbeat, releases of dropped guards) runs
//! on the client's thread and uses a second connection homed there, so that it never waits on a
//! caller's runtime: a current-thread runtime blocked in synchronous work keeps its leases.
//! Work that must follow a command of the home connection in order (the repair of an acquire
//! whose outcome is unknown, the undo of a handover) stays on the home connection.
//!
//! Tokio drops the driver with its runtime, silently. A sentinel task on the home notices: once
//! the home has ended, the next command opens a new connection on its own runtime, which becomes
//! the home, so no command is sent into a connection known to be dead. A connection that breaks
//! while its home lives is reopened on the home, so the driver does not drift to a runtime that
//! may end sooner (or to the client's thread, which would cost the home a thread hop per command).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value,
};

use crate::deadline::capped;

mod open;
use crate::outage::{Outage, Peer};
use crate::topology::Target;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

tokio::task_local! {
    /// Set around the client's own background work: its commands take the connection homed on
    /// the client's thread.
    static OWN: ();
}

/// Runs `work` (on the client's thread) with its commands on the client thread's own
/// connection.
pub(crate) async fn on_own_connection<F: Future>(work: F) -> F::Output {
    OWN.scope((), work).await
}

/// Whether the caller is the client's own background work (see [`on_own_connection`]): its
/// commands take its own connection, and its script calls go out alone, never in a list sent
/// from a caller's runtime.
pub(crate) fn wants_own() -> bool {
    OWN.try_with(|_| ()).is_ok()
}

/// One open connection: to one server (alone, or the master a sentinel named), or to a cluster
/// (one connection per node, commands routed by their key's slot).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The client's command connection. Shared by every clone of the client's executor.
pub(crate) struct Connection {
    target: Target,
    config: AsyncConnectionConfig,
    /// The longest redis-rs waits for a reply on an open connection to one server.
    response_timeout: Duration,
    /// How long a call without a budget of its own waits for a connection being reopened.
    reconnect_wait: Duration,
    /// The longest one turn at opening may take: the connection timeout, and a moment for
    /// the turn before it.
    open_cap: Duration,
    state: Mutex<State>,
    /// One opening at a time: callers that find the connection broken together share one.
    opening: tokio::sync::Mutex<()>,
    /// The same for the background work's own connection (its own, so that an opening stuck
    /// on a blocked caller's runtime never holds it up).
    opening_own: tokio::sync::Mutex<()>,
    /// Goes up when the connection was given up (a sentinel named another master) or opened
    /// again after a break: whatever the client held there may be gone, and the watchdog
    /// re-checks every hold.
    changes: watch::Sender<u64>,
    /// The client's thread, where the connection of its own background work is homed.
    own_home: std::sync::OnceLock<Handle>,
    /// Outages of the connection callers use, and of the background work's own: what they log
    /// and when the next attempt to reconnect may go.
    outage: Outage,
    own_outage: Outage,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Connection")
            .field("open", &state.open.is_some())
            .field("home_alive", &state.home.as_ref().map(Home::alive))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    home: Option<Home>,
    /// The connection in use, unless it is known to be broken. Its driver runs on `home`.
    open: Option<Open>,
    /// The connection of the client's own background work; its driver runs on the client's
    /// thread.
    own: Option<Open>,
    opened: u64,
    /// Whether `own` was opened before (it is at the client's build: a re-open is a change).
    own_opened: bool,
}

struct Open {
    conn: Conn,
    /// Which opening made it, so a failure reported late does not discard a newer one.
    id: u64,
}

/// The runtime connections are opened on, and whether it still runs.
struct Home {
    runtime: Handle,
    /// Cleared when the runtime drops the sentinel task, which it does when it shuts down.
    alive: Arc<AtomicBool>,
    /// Dropped when the home is given up: ends the sentinel task.
    _release: oneshot::Sender<()>,
}

impl Home {
    /// Makes the current runtime the home.
    fn here() -> Home {
        let alive = Arc::new(AtomicBool::new(true));
        let (release, released) = oneshot::channel::<()>();
        let sentinel = Sentinel(alive.clone());
        tokio::spawn(async move {
            let _sentinel = sentinel;
            let _ = released.await;
        });
        Home {
            runtime: Handle::current(),
            alive,
            _release: release,
        }
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// Lives in a task of the home runtime; dropped, it marks the home ended.
struct Sentinel(Arc<AtomicBool>);

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Connection {
    /// A connection to `target`, whose opening may take `connection_timeout` and each reply
    /// `response_timeout`; nothing is opened yet. Its outages are logged as `peer`'s.
    pub(crate) fn new(
        target: Target,
        connection_timeout: Duration,
        response_timeout: Duration,
        peer: Peer,
    ) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connection_timeout))
            .set_response_timeout(Some(response_timeout));
        Connection {
            target,
            config,
            response_timeout,
            reconnect_wait: Duration::ZERO,
            open_cap: connection_timeout + response_timeout,
            state: Mutex::new(State::default()),
            opening: tokio::sync::Mutex::new(()),
            opening_own: tokio::sync::Mutex::new(()),
            changes: watch::Sender::new(0),
            own_home: std::sync::OnceLock::new(),
            outage: Outage::new("command", peer.clone()),
            own_outage: Outage::new("background", peer),
        }
    }

    /// The same, for the connection that sends replica-synced grants (its outages say so).
    pub(crate) fn synced(
        target: Target,
        connection_timeout: Duration,
        response_timeout: Duration,
        peer: Peer,
    ) -> Self {
        let mut connection = Self::new(target, connection_timeout, response_timeout, peer.clone());
        connection.outage = Outage::new("synced command", peer);
        connection
    }

    /// Makes calls that find the connection being reopened wait for it up to `wait` (those
    /// without a budget of their own; see [`open`](Self::open)).
    pub(crate) fn reconnect_wait(mut self, wait: Duration) -> Self {
        self.reconnect_wait = wait;
        self
    }

    /// Homes the connection of the client's own background work on `thread` (the client's
    /// thread). Until then that work uses the home connection.
    pub(crate) fn set_own_home(&self, thread: Handle) {
        let _ = self.own_home.set(thread);
    }

    /// Changes each time the connection was given up or opened again after the first time: the
    /// server may have lost what the client holds there (a restart, a failover), or may be
    /// another server.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every change to the state is a single assignment: a panic cannot leave it half-made.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends one command; an error reply is an `Err`. Gives up after `cap`, or after the
    /// response timeout when that is shorter and the connection is open to one server.
    pub(crate) async fn send(&self, cmd: &Cmd, cap: Duration) -> RedisResult<Value> {
        // Under a paused clock the reply's timeout would fire at once: say so before sending.
        if crate::clock::paused() {
            return Err(crate::clock::error());
        }
        match self.current() {
            // redis-rs bounds a request on an open connection to one server by the response
            // timeout: a second timer would cost every command a timer-wheel entry for nothing.
            Some((Conn::Single(mut conn), id)) if self.response_timeout <= cap => {
                let result = cmd.query_async(&mut conn).await;
                self.check(&result, id);
                result.map_err(crate::clock::timed_out)
            }
            // Boxed: the timer, a cluster's routing and the opening of a connection would
            // otherwise make every command's future (and those of its callers) that much larger;
            // as `dyn`, deeper too (see `with`).
            _ => {
                let send = self.with(Some(cap), |mut conn| async move {
                    cmd.query_async(&mut conn).await
                });
                let send: BoxFuture<'_, RedisResult<Value>> = Box::pin(send);
                send.await
            }
        }
    }

    /// Sends a pipeline and reads its replies as a `T`.
    pub(crate) async fn send_pipeline<T: FromRedisValue>(&self, pipe: &Pipeline) -> RedisResult<T> {
        if crate::clock::paused() {
            return Err(crate::clock::error());
        }
        self.with(
            None,
            |mut conn| async move { pipe.query_async(&mut conn).await },
        )
        .await
    }

    /// Sends one command to the master that serves `slot` (one server: to it): for the
    /// commands a cluster cannot route by a key, `SCAN` and `TIME`, to reach a given master.
    pub(crate) async fn send_to_slot(
        &self,
        cmd: &Cmd,
        slot: u16,
        cap: Duration,
    ) -> RedisResult<Value> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        // As `send`: under a paused clock the cap would fire at once.
        if crate::clock::paused() {
            return Err(crate::clock::error());
        }
        let send = self.with(Some(cap), |conn| async move {
            match conn {
                Conn::Single(mut conn) => cmd.query_async(&mut conn).await,
                Conn::Cluster(mut conn) => {
                    let route = Route::new(slot, SlotAddr::Master);
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    conn.route_command(cmd.clone(), routing).await
                }
            }
        });
        let send: BoxFuture<'_, RedisResult<Value>> = Box::pin(send);
        send.await
    }

    /// Runs `send` on the connection in use, opening one first when there is none; `cap`
    /// bounds the request, not the opening (which waits for a reconnect as
    /// [`open`](Self::open) says).
    async fn with<T, F, Fut>(&self, cap: Option<Duration>, send: F) -> RedisResult<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (conn, id) = match self.current() {
            Some(open) => open,
            // Boxed as `dyn`: opening a connection is redis-rs' deepest future (DNS, TCP, TLS,
            // the handshake), and a concrete type would make every command's future carry it,
            // deep enough that proving a caller's future `Send` overflows the compiler's
            // recursion limit (E0275) in the user's crate. Opening is rare: one allocation then.
            None if self.own() => {
                let open: BoxFuture<'_, RedisResult<(Conn, u64)>> = Box::pin(self.open_own());
                open.await?
            }
            None => self.open().await?,
        };
        let result = match cap {
            Some(cap) => capped(cap, send(conn)).await,
            None => send(conn).await,
        };
        self.check(&result, id);
        result
    }

    /// Forgets connection `id` when `result` shows it cannot be used again.
    fn check<T>(&self, result: &RedisResult<T>, id: u64) {
        if let Err(e) = result
            && (e.is_unrecoverable_error() || self.target.moved_away(e))
            && let Some(outage) = self.broken(id)
            // A demoted master is a move, not an outage.
            && !self.target.moved_away(e)
        {
            outage.lost(e);
        }
    }

    /// Forgets the connection in use, so the next command opens a new one (to wherever the
    /// target is now: a sentinel's new master, say).
    pub(crate) fn reopen(&self) {
        {
            let mut state = self.state();
            state.open = None;
            state.own = None;
        }
        self.changes.send_modify(|n| *n += 1);
    }

    /// A call found the server away or silent. One server's connection is given up (a timeout
    /// keeps a connection redis-rs would retry on: a host gone without a reset), so the next
    /// call opens a new one; a cluster's nodes redis-rs reconnects by itself, following each
    /// slot to its new master. Either way whatever the client holds there may be gone: a change
    /// (see [`changes`](Self::changes)).
    pub(crate) fn suspect(&self) {
        if self.target.is_cluster() {
            self.changes.send_modify(|n| *n += 1);
        } else {
            // Only the heartbeat suspects, over the background work's own connection: that one
            // is known lost. The callers' connection is given up quietly; it is reported if
            // opening it again fails.
            if self.state().own.is_some() {
                self.own_outage
                    .lost(&"a call got no answer in time, or failed");
            }
            self.reopen();
        }
    }

    /// The target connections go to.
    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// Whether the caller is the client's own background work, with a thread to home its
    /// connection on.
    fn own(&self) -> bool {
        self.own_home.get().is_some() && wants_own()
    }

    /// The connection in use, if there is one and its home runs.
    fn current(&self) -> Option<(Conn, u64)> {
        let own = self.own();
        let state = self.state();
        if own {
            return state.own.as_ref().map(|open| (open.conn.clone(), open.id));
        }
        if !state.home.as_ref().is_some_and(Home::alive) {
            return None;
        }
        state.open.as_ref().map(|open| (open.conn.clone(), open.id))
    }

    /// Forgets connection `id`; answers the outage record of the connection it was, if it was
    /// still in use.
    fn broken(&self, id: u64) -> Option<&Outage> {
        let mut state = self.state();
        if state.open.as_ref().is_some_and(|open| open.id == id) {
            state.open = None;
            return Some(&self.outage);
        }
        if state.own.as_ref().is_some_and(|open| open.id == id) {
            state.own = None;
            return Some(&self.own_outage);
        }
        None
    }
}
