//! Opening the command connection: the first time, after a break, and on the client's own
//! thread for its background work; and riding through a reconnect (a call that finds the
//! connection being reopened waits for it, see [`Connection::open`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{AsyncConnectionConfig, RedisError, RedisResult};
use tokio::runtime::Handle;

use super::{Conn, Connection, Home, Open, on_own_connection};
use crate::deadline::{call_deadline, capped};
use crate::outage::Outage;
use crate::topology::Target;

impl Connection {
    /// Opens the connection of the client's own background work now, on the client's thread
    /// (see [`set_own_home`](Self::set_own_home)), so that a failure shows at once.
    pub(crate) async fn open_own_now(self: &Arc<Self>) -> RedisResult<()> {
        let Some(thread) = self.own_home.get() else {
            return Ok(());
        };
        let this = self.clone();
        let open = on_own_connection(async move { this.open_own().await.map(drop) });
        match thread.spawn(open).await {
            Ok(opened) => opened,
            Err(e) => Err(std::io::Error::other(format!(
                "the task opening the background connection failed: {e}"
            ))
            .into()),
        }
    }

    /// Opens the connection of the client's own background work, on the client's thread (the
    /// caller's runtime: that work runs there). Bounded by the connection timeout.
    pub(super) async fn open_own(&self) -> RedisResult<(Conn, u64)> {
        let _turn = self.opening_own.lock().await;
        if let Some(open) = self.current() {
            return Ok(open);
        }
        // Before it first opened, a failure is the client's build failing: no outage.
        let reopening = self.state().own_opened;
        let conn = if reopening {
            attempt(
                &self.own_outage,
                connect(self.target.clone(), self.config.clone()),
            )
            .await?
        } else {
            connect(self.target.clone(), self.config.clone()).await?
        };
        let mut state = self.state();
        state.opened += 1;
        let id = state.opened;
        state.own = Some(Open {
            conn: conn.clone(),
            id,
        });
        let again = std::mem::replace(&mut state.own_opened, true);
        drop(state);
        if again {
            self.changes.send_modify(|n| *n += 1);
        }
        Ok((conn, id))
    }

    /// Opens a connection: on the home while it runs, else on the caller's runtime, which
    /// becomes the home. Each attempt is bounded by the connection timeout, unless the home is
    /// a runtime that nobody drives (the caller's own timeout ends the wait then).
    ///
    /// Reopening a connection that was open before, the call rides through the outage: it
    /// waits for the next attempt the backoff allows (at once when none is due), and after a
    /// failed attempt for the one after it, until a connection opens or the call's deadline
    /// would pass: its wait budget's ([`call_deadline`]), else the reconnect wait from now.
    /// Then it fails with the last error. The outage's logging and backoff are the same
    /// whether or not callers wait.
    pub(crate) async fn open(&self) -> RedisResult<(Conn, u64)> {
        let until =
            call_deadline().unwrap_or_else(|| tokio::time::Instant::now() + self.reconnect_wait);
        loop {
            // An opening on a home runtime that nobody drives would never end: bounded.
            let turn = capped(self.open_cap, async { Ok(self.open_once().await) });
            let (error, retry_in) = match turn.await {
                Ok(Ok(open)) => return Ok(open),
                Ok(Err(failed)) => failed,
                Err(timed_out) => (timed_out, None),
            };
            let Some(after) = retry_in else {
                return Err(error);
            };
            let at = tokio::time::Instant::now() + after;
            if at > until || crate::clock::paused() {
                return Err(error);
            }
            tokio::time::sleep_until(at).await;
        }
    }

    /// One turn at opening the connection: the connection, or the error with, when reopening,
    /// how soon the next attempt may go.
    async fn open_once(&self) -> Result<(Conn, u64), (RedisError, Option<Duration>)> {
        let _turn = self.opening.lock().await;
        if let Some(open) = self.current() {
            return Ok(open); // opened by the caller that had the turn before
        }
        let (mut home, reopening) = {
            let state = self.state();
            let home = state
                .home
                .as_ref()
                .filter(|home| home.alive())
                .map(|home| home.runtime.clone());
            // Before it first opened, a failure is the client's build failing: no outage.
            (home, state.home.is_some())
        };
        if reopening && let Some(left) = self.outage.wait() {
            return Err((self.outage.not_yet(left), Some(left)));
        }
        let (conn, new_home) = loop {
            let (runtime, moving) = match home.take() {
                Some(runtime) => (runtime, false),
                None => (
                    Handle::try_current().map_err(|e| (no_runtime(e), None))?,
                    true,
                ),
            };
            // A task of its own even on the caller's runtime: the driver is spawned by the task
            // that connects, on that task's runtime, and a panic there (a runtime without I/O)
            // is an error here rather than the caller's panic.
            match runtime
                .spawn(connect(self.target.clone(), self.config.clone()))
                .await
            {
                // `Home::here` watches the current runtime: the one the driver was spawned on.
                Ok(Ok(conn)) => {
                    if reopening {
                        self.outage.opened();
                    }
                    break (conn, moving.then(Home::here));
                }
                Ok(Err(e)) => {
                    let e = crate::clock::timed_out(e);
                    if reopening && !crate::clock::is_paused(&e) {
                        let pause = self.outage.failed(&e);
                        return Err((e, Some(pause)));
                    }
                    return Err((e, None));
                }
                // The home shut down meanwhile: open the connection here instead.
                Err(e) if e.is_cancelled() && !moving => continue,
                Err(e) => {
                    let e = std::io::Error::other(format!(
                        "the task opening the connection failed: {e}"
                    ));
                    return Err((e.into(), None));
                }
            }
        };
        let mut state = self.state();
        state.opened += 1;
        let id = state.opened;
        if let Some(home) = new_home {
            state.home = Some(home);
        }
        state.open = Some(Open {
            conn: conn.clone(),
            id,
        });
        drop(state);
        if id > 1 {
            self.changes.send_modify(|n| *n += 1);
        }
        Ok((conn, id))
    }
}

fn no_runtime(_: tokio::runtime::TryCurrentError) -> RedisError {
    std::io::Error::other("ferrisson's commands must run inside a Tokio runtime").into()
}

async fn connect(target: Target, config: AsyncConnectionConfig) -> Result<Conn, RedisError> {
    target.connect(&config).await
}

/// Reopens a connection that was open before, as `outage` allows: fails at once while the next
/// attempt must wait, and records how the attempt went.
async fn attempt(
    outage: &Outage,
    open: impl Future<Output = RedisResult<Conn>>,
) -> RedisResult<Conn> {
    if let Some(left) = outage.wait() {
        return Err(outage.not_yet(left));
    }
    match open.await {
        Ok(conn) => {
            outage.opened();
            Ok(conn)
        }
        Err(e) => {
            outage.failed(&e);
            Err(e)
        }
    }
}
