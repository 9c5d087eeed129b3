//! What every object of one client shares, and the narrow interface the lock engine and the
//! synchronizers use instead of the client: the settings, owner names, the script executor, the
//! pub/sub hub, the watchdog, and a place to run background work. [`Client`](crate::Client) is a
//! handle on it; `lock/` and `sync/` depend on this module, never on `client`, and this module
//! on neither (the lock engine's own bookkeeping lives in `lock::owner::ClientLocks`).

use tokio::sync::watch;

use crate::config::Config;
use crate::owner::Owners;
use crate::pubsub::Hub;
use crate::runtime::ClientThread;
use crate::script::Executor;
use crate::watchdog::Watchdog;

/// One client's shared machinery. Dropped with the last handle, guard and background task.
pub(crate) struct Core {
    pub(crate) config: Config,
    /// The server as errors name it: host and port (a cluster's first seed, the sentinels'
    /// master), never credentials.
    pub(crate) address: std::sync::Arc<str>,
    pub(crate) owners: Owners,
    pub(crate) executor: Executor,
    pub(crate) hub: Hub,
    pub(crate) watchdog: Watchdog,
    /// What spans and metrics say of this client's objects.
    pub(crate) observe: crate::observe::Context,
    /// Set by [`Client::close`](crate::Client::close): no new acquire or wait is taken on.
    pub(crate) closed: std::sync::atomic::AtomicBool,
    /// Set on a signal (see [`drain`](crate::drain)): no new acquisition is taken on, while the
    /// holds taken finish their work.
    pub(crate) draining: std::sync::OnceLock<crate::signal::Signal>,
    /// What the client records of itself in Redis; `None` when identities are off.
    pub(crate) identity: Option<std::sync::Arc<crate::identity::Own>>,
    /// Background work under way, which the end of a process waits for.
    pub(crate) pending: std::sync::Arc<crate::pending::Pending>,
    /// Dropped with the client: tells the watchdog task to stop.
    pub(crate) _shutdown: watch::Sender<()>,
    /// Runs the background work; dropped last, after everything that may still use it.
    pub(crate) thread: ClientThread,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("client_id", &self.owners.client_id())
            .finish_non_exhaustive()
    }
}

impl Core {
    /// `Err(Error::Closed)` once the client was closed, `Err(Error::Draining)` while it drains
    /// on a signal: for a new acquisition.
    pub(crate) fn accepting(&self) -> crate::error::Result<()> {
        self.open()?;
        match self.draining.get() {
            Some(&signal) => Err(crate::error::Error::Draining { signal }),
            None => Ok(()),
        }
    }

    /// `Err(Error::Closed)` once the client was closed: for what a drain lets go on (an
    /// acquisition nested in a hold's work, a latch's wait).
    pub(crate) fn open(&self) -> crate::error::Result<()> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::error::Error::Closed);
        }
        Ok(())
    }

    /// Runs background work of this client (a repair, a handover undo, leaving a fair queue) on
    /// the client's thread: the one place every lock's background work is started.
    pub(crate) fn spawn<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let work = self.counted("background work (a repair, a queue leave)", false, work);
        self.thread.spawn(work, || {
            tracing::warn!(
                "the client's thread is gone, so background work (a repair, a handover undo or \
                 leaving a fair queue) was dropped; the leases free what it would have"
            );
        });
    }

    /// Runs the release of a dropped guard of lock `lock` on the client's thread; if it cannot
    /// run there, the warning names the lock, whose lease then frees it.
    /// The release goes over the client thread's own connection, so it never waits on a
    /// caller's runtime (one blocked in synchronous work, or ending): the owner's next acquire
    /// waits for it to finish, which keeps the two in order.
    pub(crate) fn spawn_release<F>(&self, lock: String, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let work = self.counted(format!("the release of `{lock}`"), true, work);
        let work = crate::connection::on_own_connection(work);
        self.thread.spawn(work, move || {
            tracing::warn!(lock = %lock, "the client's thread is gone, so a dropped guard's release cannot run; the lease frees the lock");
        });
    }

    /// Lists a hold its guard stands for (see [`live`](crate::live)); returns its id. Once the
    /// client gives its holds back on a signal, a new one is given back at once instead.
    pub(crate) fn list_hold(&self, hold: crate::live::Hold) -> u64 {
        let (id, refused) = self.pending.holds.list(hold);
        if let Some((hold, lose)) = refused {
            self.give_back(hold, lose);
        }
        id
    }

    /// The listed hold `id` was given back by its guards.
    pub(crate) fn unlist_hold(&self, id: u64) {
        self.pending.holds.unlist(id);
    }

    /// Gives back `hold` from the client's thread, over its own connection (a caller's runtime
    /// blocked in synchronous work cannot hold it up), counted as background work; once done,
    /// the hold's guards find it lost if `lose` says so. Nothing when its guards gave it back
    /// meanwhile.
    pub(crate) fn give_back(&self, hold: crate::live::Hold, lose: crate::live::Lose) {
        let Some((name, giving_back)) = hold.giving_back() else {
            return;
        };
        let lease = hold.lease;
        let what = name.clone();
        self.spawn_release(name, async move {
            match giving_back.await {
                Ok(()) => {
                    if let (Some(lease), crate::live::Lose::Tell) = (lease.upgrade(), lose) {
                        lease.mark_lost();
                    }
                }
                Err(e) => {
                    tracing::warn!(name = %what, error = %e, "giving a hold back failed; its lease frees it");
                }
            }
        });
    }

    /// `work`, counted as pending (see [`Pending`](crate::pending::Pending)) until it ends;
    /// `own`: it goes over the client thread's own connection.
    fn counted<F>(
        &self,
        what: impl Into<String>,
        own: bool,
        work: F,
    ) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let ticket = self.pending.begin(what.into(), own);
        async move {
            let _ticket = ticket;
            work.await;
        }
    }
}
