//! The client's own thread: a current-thread Tokio runtime that runs the client's background
//! work (the pub/sub hub, the watchdog, releases of dropped guards, repairs, handover undo,
//! leaving a fair queue) for as long as the client lives.
//!
//! Tokio drops every task of a runtime that shuts down, without a word. Background work spawned
//! on the runtime a client was built in would die with that runtime while the client (kept in a
//! `static`, say) goes on being used from another one: leases would no longer be renewed, dropped
//! guards no longer released, waiters no longer woken. A runtime the client owns ends only with
//! the client, so its background work outlives every runtime the client is used from.
//!
//! The thread blocks on a stop signal, which is dropped with the client, and then drops its
//! runtime itself: a runtime must not be dropped inside an async context, and the last clone of a
//! client may well go away in one (even in a task of this very runtime).

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The thread's name, as debuggers and `top -H` show it (Linux keeps its first 15 bytes).
pub(crate) const THREAD_NAME: &str = "ferrisson-client";

/// A client's own runtime thread. Dropping this stops the runtime and ends the thread; tasks
/// still on the runtime are dropped with it.
#[derive(Debug)]
pub(crate) struct ClientThread {
    handle: Handle,
    /// Dropped with the client: the thread's `block_on` returns.
    _stop: oneshot::Sender<()>,
    #[cfg(test)]
    thread: std::thread::JoinHandle<()>,
}

impl ClientThread {
    /// Starts the thread and its runtime.
    ///
    /// The runtime is built on the new thread, never here: a runtime that failed to move into a
    /// thread that could not be started would be dropped in the caller's async context, which
    /// panics.
    pub(crate) async fn start() -> std::io::Result<ClientThread> {
        let (ready, started) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                if ready.send(Ok(runtime.handle().clone())).is_err() {
                    return; // the client's start was cancelled
                }
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Outside `block_on` now: dropping the runtime here cannot panic.
                drop(runtime);
            })?;
        let handle = started.await.unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the client's thread ended before its runtime started",
            ))
        })?;
        #[cfg(not(test))]
        drop(thread);
        Ok(ClientThread {
            handle,
            _stop: stop,
            #[cfg(test)]
            thread,
        })
    }

    /// The runtime's handle, for the client's long-lived tasks.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `work` on the thread. If the work is dropped before it finished (the runtime is gone,
    /// which only happens while the process tears down), `lost` says so.
    pub(crate) fn spawn<F, L>(&self, work: F, lost: L)
    where
        F: Future<Output = ()> + Send + 'static,
        L: FnOnce() + Send + 'static,
    {
        let alarm = Alarm(Some(lost));
        // A runtime that has shut down drops the task at once, inside `spawn`: the alarm goes off
        // on the spot rather than never.
        self.handle.spawn(async move {
            let mut alarm = alarm;
            work.await;
            alarm.disarm();
        });
    }
}

/// Calls its function when dropped, unless disarmed first.
struct Alarm<L: FnOnce()>(Option<L>);

impl<L: FnOnce()> Alarm<L> {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl<L: FnOnce()> Drop for Alarm<L> {
    fn drop(&mut self) {
        if let Some(lost) = self.0.take() {
            lost();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    fn caller() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn work_runs_on_the_thread_after_the_starting_runtime_ended() {
        let first = caller();
        let thread = first.block_on(ClientThread::start()).unwrap();
        drop(first);
        let (tx, rx) = std::sync::mpsc::channel();
        thread.spawn(
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let name = std::thread::current().name().map(str::to_owned);
                let _ = tx.send(name);
            },
            || panic!("the work was lost"),
        );
        let name = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
    }

    #[test]
    fn dropping_it_ends_the_thread() {
        let thread = caller().block_on(ClientThread::start()).unwrap();
        let ClientThread {
            thread: join,
            _stop,
            ..
        } = thread;
        drop(_stop);
        join.join().expect("the thread ends cleanly");
    }

    #[test]
    fn work_that_cannot_run_is_reported() {
        let thread = caller().block_on(ClientThread::start()).unwrap();
        let ClientThread {
            handle,
            _stop,
            thread: join,
        } = thread;
        drop(_stop);
        join.join().unwrap();
        let (stop, _stopped) = oneshot::channel();
        let gone = ClientThread {
            handle,
            _stop: stop,
            thread: std::thread::spawn(|| {}),
        };
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        gone.spawn(async {}, move || flag.store(true, Ordering::SeqCst));
        assert!(lost.load(Ordering::SeqCst), "the lost work went unreported");
    }

    #[test]
    fn finished_work_is_not_reported() {
        let thread = caller().block_on(ClientThread::start()).unwrap();
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        thread.spawn(
            async move {
                let _ = tx.send(());
            },
            move || flag.store(true, Ordering::SeqCst),
        );
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let ClientThread {
            _stop,
            thread: join,
            ..
        } = thread;
        drop(_stop);
        join.join().unwrap();
        assert!(!lost.load(Ordering::SeqCst));
    }
}
