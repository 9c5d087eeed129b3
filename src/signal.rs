//! Ending a process on SIGINT or SIGTERM with its clients' holds given back, after a drain
//! (see [`drain`](crate::drain)).
//!
//! A process that ends on a signal's default action runs no destructor: its guards are never
//! dropped, and every lock it held stays taken until its lease runs out (30 s by default).
//! [`Client::close_on_signal`] and [`Client::on_signal`] install a handler that gives the holds
//! back first.
//!
//! One listener thread serves the whole process, not one task per client: once a handler is
//! installed for a signal, the signal's default action is gone for good (Tokio never removes
//! its handlers). A listener that lived on a client's thread would die with that client, and
//! the process would then ignore Ctrl-C. So the first call starts a thread, `ferrisson-signal`,
//! that lives as long as the process, and every call adds its client to those it serves.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};

use tokio::sync::watch;

use crate::client::Client;
use crate::core::Core;
use crate::error::{Error, Result};
use crate::live::Lose;

/// A signal asking the process to end.
///
/// # Examples
///
/// ```
/// use ferrisson::Signal;
///
/// assert_eq!(Signal::Interrupt.exit_code(), 130);
/// assert_eq!(Signal::Terminate.to_string(), "SIGTERM");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Signal {
    /// SIGINT: Ctrl-C in a terminal (on Windows, the console's Ctrl-C).
    Interrupt,
    /// SIGTERM: `kill <pid>`, `systemctl stop`, `docker stop`, Kubernetes ending a pod (Unix
    /// only).
    Terminate,
}

impl Signal {
    /// The exit status shells give a process ended by this signal, 128 plus its number: 130
    /// for SIGINT, 143 for SIGTERM. [`Client::close_on_signal`] ends the process with it.
    pub fn exit_code(self) -> i32 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        })
    }
}

impl Client {
    /// On SIGINT (Ctrl-C) or SIGTERM, drains this client, gives back what it still holds,
    /// then ends the process with exit status 130 or 143 ([`Signal::exit_code`]): a rolling
    /// deploy lets the work under way finish, and the next run, or another process, does not
    /// wait out the lease of a lock the process held when it was stopped. Call it once, early,
    /// on each client whose holds should go back (on a clone: the listener keeps no client
    /// alive).
    ///
    /// **The drain.** From the signal on, a new acquisition of the client (a lock of any
    /// kind, a [`MultiLock`](crate::MultiLock), semaphore permits) fails at once with
    /// [`Error::Draining`]: the process takes no new work (a [`RedLock`](crate::RedLock)
    /// fails with [`Error::QuorumNotReached`], each part's error an `Error::Draining`). What it already holds keeps its
    /// lease, renewed by the watchdog, so the work under way, in
    /// [`with_lock`](crate::RLock::with_lock) or with a guard, goes on undisturbed; an
    /// acquisition nested in that work (one more hold of the same lock), an acquisition that
    /// was already waiting, and a latch's wait go on too. Once the client holds nothing (every
    /// guard released or dropped, and the releases done), the process ends. If the
    /// [drain grace](crate::ClientBuilder::drain_grace) (25 s by default) runs out first,
    /// every hold left is given back whatever the code holding it does with it (a lock's
    /// holds all together, as many as were nested; a guard's permits), and the process ends.
    /// A zero grace gives the holds back at once.
    ///
    /// **A second signal** ends the drain at once: the holds are given back, and the process
    /// ends with that signal's status. Giving back takes at most twice the response timeout
    /// (6 s by default): a Redis that does not answer leaves the rest to the leases, and the
    /// process ends anyway. A third signal ends it without waiting for that.
    ///
    /// The process ends as soon as the client holds nothing: a server that has more to
    /// finish after its locks (the response to a request) runs its own graceful shutdown and
    /// takes [`on_signal`](Self::on_signal) instead.
    ///
    /// Nothing is installed until the first call of this or [`on_signal`](Self::on_signal);
    /// from then on the process never ends on these signals' default action. No destructor
    /// runs on the way out, as with `std::process::exit`. A program that runs its own
    /// shutdown takes [`on_signal`](Self::on_signal) instead: while a future of it lives, the
    /// process is left running. On Windows the signal is the console's Ctrl-C only.
    ///
    /// What a hard end costs instead (`kill -9`, a crash, `panic = "abort"`): see [the
    /// lifecycle guide](crate::guide::lifecycle#ending-a-process-signals-crashes-and-panics).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when the listener cannot be started (the OS refused a thread or the
    /// handlers); nothing is installed then, and a later call tries again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// #[tokio::main(flavor = "current_thread")]
    /// async fn main() -> ferrisson::Result<()> {
    ///     let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
    ///     // SIGTERM from here on lets the work finish (25 s at most), then ends the process;
    ///     // Ctrl-C twice gives the lock back at once.
    ///     client.close_on_signal()?;
    ///     let import = client.get_lock("nightly-import");
    ///     import.with_lock(|_token| async { /* ... the import ... */ }).await
    /// }
    /// ```
    pub fn close_on_signal(&self) -> Result<()> {
        serve(&self.inner).map(drop)
    }

    /// On SIGINT (Ctrl-C) or SIGTERM, drains this client and gives back what it still holds
    /// as [`close_on_signal`](Self::close_on_signal) does, then resolves the returned
    /// [`OnSignal`] instead of ending the process: for a program that runs its own shutdown (a
    /// server's graceful shutdown, a CLI that prints what it did and cleans up).
    ///
    /// During the drain the client refuses new acquisitions ([`Error::Draining`]) and the
    /// holds taken finish their work, at most for the
    /// [drain grace](crate::ClientBuilder::drain_grace); a program that should learn of the
    /// signal at once (to stop taking requests) sets a zero grace, or listens for the signal
    /// itself too. When `OnSignal` resolves, the holds are back (or left to their leases,
    /// when Redis did not answer within twice the response timeout), the client is closed,
    /// and every guard it still has is [lost](crate::LockGuard::is_lost): work under a lock
    /// learns it must stop, and its guard's drop or `unlock` sends nothing more. The process
    /// ends after the drain only if no `OnSignal` lives at that moment, and on a second
    /// signal as `close_on_signal`'s does.
    ///
    /// # Errors
    ///
    /// As [`close_on_signal`](Self::close_on_signal).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let stop = client.on_signal()?;
    /// let guard = client.get_lock("reindex").lock().await?;
    /// tokio::select! {
    ///     signal = stop => {
    ///         eprintln!("{signal}: lock given back, stopping");
    ///         std::process::exit(signal.exit_code());
    ///     }
    ///     () = async { /* the work */ } => guard.unlock().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn on_signal(&self) -> Result<OnSignal> {
        let listener = serve(&self.inner)?;
        Ok(OnSignal {
            heard: listener.heard.subscribe(),
            waiting: None,
        })
    }
}

/// Resolves with the signal (SIGINT, SIGTERM) once the process got one, drained, and gave back
/// the holds of the client it came from. From [`Client::on_signal`].
///
/// While one lives, a signal leaves the process running for the program's own shutdown; a
/// second signal ends it.
///
/// # Cancel safety
///
/// Cancel safe: dropping it stops nothing but the wait.
#[must_use = "while it lives, a signal leaves the process running: await it"]
pub struct OnSignal {
    heard: watch::Receiver<Option<Signal>>,
    /// The wait, made at the first poll.
    waiting: Option<Pin<Box<dyn Future<Output = Signal> + Send>>>,
}

impl OnSignal {
    /// The signal, once it came, the drain ended and the holds were given back; `None` before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let stop = client.on_signal()?;
    /// for batch in 0..1000 {
    ///     if stop.received().is_some() {
    ///         break;
    ///     }
    ///     // ... batch `batch` ...
    /// #   let _ = batch;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn received(&self) -> Option<Signal> {
        *self.heard.borrow()
    }
}

impl std::fmt::Debug for OnSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnSignal")
            .field("received", &self.received())
            .finish_non_exhaustive()
    }
}

impl Future for OnSignal {
    type Output = Signal;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Signal> {
        let this = self.get_mut();
        let waiting = this.waiting.get_or_insert_with(|| {
            let mut heard = this.heard.clone();
            Box::pin(async move {
                if let Ok(seen) = heard.wait_for(Option::is_some).await
                    && let Some(signal) = *seen
                {
                    return signal;
                }
                // The listener never drops its sender: this is not reached.
                std::future::pending().await
            })
        });
        waiting.as_mut().poll(cx)
    }
}

/// The process's listener: the clients it gives back the holds of, and who waits for it.
struct Listener {
    clients: Mutex<Vec<Weak<Core>>>,
    /// The signal, once its shutdown gave the holds back.
    heard: watch::Sender<Option<Signal>>,
    /// Set on a second signal: the process ends with its status, not the first's.
    cut: std::sync::atomic::AtomicBool,
}

static LISTENER: Mutex<Option<Arc<Listener>>> = Mutex::new(None);

/// Adds `core` to the clients of the process's listener, starting it on first use.
fn serve(core: &Arc<Core>) -> Result<Arc<Listener>> {
    let listener = {
        let mut slot = LISTENER.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some(listener) => listener.clone(),
            None => slot.insert(Listener::start()?).clone(),
        }
    };
    let core = Arc::downgrade(core);
    let mut clients = listener.clients();
    clients.retain(|c| c.strong_count() > 0);
    if !clients.iter().any(|c| Weak::ptr_eq(c, &core)) {
        clients.push(core);
    }
    drop(clients);
    Ok(listener)
}

impl Listener {
    fn clients(&self) -> MutexGuard<'_, Vec<Weak<Core>>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the listener's thread; returns once the handlers are installed.
    fn start() -> Result<Arc<Listener>> {
        let listener = Arc::new(Listener {
            clients: Mutex::default(),
            heard: watch::channel(None).0,
            cut: std::sync::atomic::AtomicBool::new(false),
        });
        let served = listener.clone();
        let (ready, installed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("ferrisson-signal".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return drop(ready.send(Err(e))),
                };
                runtime.block_on(async move {
                    match Signals::install() {
                        Ok(signals) => {
                            let _ = ready.send(Ok(()));
                            served.listen(signals).await;
                        }
                        Err(e) => drop(ready.send(Err(e))),
                    }
                });
            })
            .map_err(not_listening)?;
        installed
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the listener's thread ended")))
            .map_err(not_listening)?;
        Ok(listener)
    }

    /// The clients served that are still alive.
    fn served(&self) -> Vec<Arc<Core>> {
        self.clients().iter().filter_map(Weak::upgrade).collect()
    }

    /// Drains on the first signal; on the second, gives every hold back at once and ends the
    /// process; on a third, ends it without waiting for that.
    async fn listen(self: Arc<Self>, mut signals: Signals) {
        let first = signals.next().await;
        tokio::spawn(self.clone().shut_down(first));
        let second = signals.next().await;
        self.cut.store(true, std::sync::atomic::Ordering::Release);
        tracing::warn!(signal = %second, "a second signal: giving back every hold at once and ending the process");
        let clients = self.served();
        let given_back = futures::future::join_all(
            (clients.iter()).map(|core| give_back_all(core, Lose::Quietly)),
        );
        tokio::select! {
            _ = given_back => {}
            third = signals.next() => {
                tracing::warn!(signal = %third, "a third signal: ending the process without waiting");
            }
        }
        std::process::exit(second.exit_code());
    }

    /// Drains every client served (see [`drain`](crate::drain)), gives back what is still
    /// held then, and ends the process, unless somebody waits for the signal to run their own
    /// shutdown.
    async fn shut_down(self: Arc<Self>, signal: Signal) {
        let clients = self.served();
        for core in &clients {
            core.start_draining(signal);
        }
        tracing::info!(%signal, "draining: new acquisitions are refused; the holds taken finish their work within the drain grace");
        futures::future::join_all(clients.iter().map(|core| async move {
            let grace = core.config.drain_grace;
            if !core.drained().await && !grace.is_zero() {
                tracing::warn!(%signal, ?grace, "the drain grace ran out with holds still taken: giving them back");
            }
        }))
        .await;
        // Decided now: a process about to end does not tell its guards their holds are lost,
        // which would only set the interrupted code racing the exit (with its own status).
        let lose = match self.heard.receiver_count() {
            0 => Lose::Quietly,
            _ => Lose::Tell,
        };
        futures::future::join_all(clients.iter().map(|core| give_back_all(core, lose))).await;
        drop(clients);
        if self.cut.load(std::sync::atomic::Ordering::Acquire) {
            // The second signal's give-back ends the process.
            return;
        }
        if lose == Lose::Tell && self.heard.receiver_count() > 0 {
            self.heard.send_replace(Some(signal));
        } else {
            std::process::exit(signal.exit_code());
        }
    }
}

/// Closes the client, gives back every hold it has now (and any granted from now on), and
/// waits at most twice the response timeout for that and the releases of dropped guards
/// (and of the guards' unlocks under way).
async fn give_back_all(core: &Core, lose: Lose) {
    core.closed
        .store(true, std::sync::atomic::Ordering::Release);
    for hold in core.pending.holds.close(lose) {
        core.give_back(hold, lose);
    }
    let left = core.pending.settled(core.config.response_timeout * 2).await;
    for what in left {
        tracing::warn!(work = %what, "the process ends on a signal with this still under way; what it would have released frees itself when its lease runs out");
    }
}

fn not_listening(e: std::io::Error) -> Error {
    let reason = format!("cannot listen for SIGINT and SIGTERM: {e}");
    Error::Redis(std::io::Error::new(e.kind(), reason).into())
}

/// The signals listened for, as this platform has them.
#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::Interrupt,
            Some(()) = self.terminate.recv() => Signal::Terminate,
            // Tokio's streams of signals never end.
            else => std::future::pending().await,
        }
    }
}

#[cfg(windows)]
struct Signals {
    interrupt: tokio::signal::windows::CtrlC,
}

#[cfg(windows)]
impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: tokio::signal::windows::ctrl_c()?,
        })
    }

    async fn next(&mut self) -> Signal {
        if self.interrupt.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
        Signal::Interrupt
    }
}

#[cfg(not(any(unix, windows)))]
struct Signals;

#[cfg(not(any(unix, windows)))]
impl Signals {
    fn install() -> std::io::Result<Signals> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this platform has no signals Tokio can listen for",
        ))
    }

    async fn next(&mut self) -> Signal {
        std::future::pending().await
    }
}
