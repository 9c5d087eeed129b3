//! A wait for your own hold: an acquisition made outside every scope of a lock that its own
//! task (outside any task, its own thread) holds. Every acquisition is an owner of its own, so
//! it waits for that hold, for ever while the watchdog renews it: the deadlock of code written
//! the Java way (`lock()` again in a helper, a reader asking for the write side). The registry
//! of the client's holds records which task took each and where (see
//! [`Site`](crate::watchdog::Site)), so such a wait is never silent:
//!
//! - a wait that lasts longer than the client's `self_wait_warning` logs a WARN naming the lock,
//!   where the hold was taken and where the waiting call was made, and how to nest instead;
//!   again every ten times as long while it waits and the hold stands; it is listed in the
//!   client's identity for operators meanwhile;
//! - with `fail_on_self_wait`, such an acquisition fails at once with [`Error::SelfWait`].
//!
//! The watch costs an acquisition that never waits nothing but an atomic load per poll: its
//! timer starts with the first refusal, and lives on the heap beside the wait's own state.

use std::convert::Infallible;
use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use crate::error::{Error, Result};
use crate::lock::handle::Handle;
use crate::lock::holder::Holder;
use crate::lock::owner::Side;
use crate::owner::Asker;
use crate::watchdog::{SelfWaitEntry, SelfWaitTicket};

/// How much longer than the threshold a warned wait waits before it is warned of again.
const REPEAT: u32 = 10;

impl Handle {
    /// With `fail_on_self_wait`, the error of an acquisition called `at` (outside every scope
    /// of the lock) for a lock the calling task or thread holds; else, and without such a hold,
    /// nothing.
    pub(crate) fn refuse_self_wait(&self, at: &'static Location<'static>) -> Result<()> {
        if !self.core.config.self_wait.fail {
            return Ok(());
        }
        // A read shares with the task's own read holds: refused only beside its own write hold.
        // (Waiting, it is still warned of: with writer preference, a writer waiting for the
        // task's read hold holds the new read back.)
        let reading = self.ops.family() == "rw" && self.ops.side() == Side::Main;
        match self
            .core
            .watchdog
            .held_by(self.name(), Asker::current(), !reading)
        {
            Some(held_at) => Err(Error::SelfWait {
                name: self.name().to_owned(),
                held_at: held_at.to_string(),
                called_at: at.to_string(),
            }),
            None => Ok(()),
        }
    }
}

impl Holder {
    /// Watches a wait (made `called_at`) for a hold of the waiter's own task or thread: pending,
    /// without a timer, until `busy` says an attempt was refused; then warns while the wait
    /// lasts (see the module docs). Never ends: [`race`] it against the wait.
    ///
    /// Until `busy` is set it registers no waker: [`race`] polls it right after the wait each
    /// time, so it sees the flag in the same poll in which the refusal set it.
    pub(super) async fn watch_self_wait(
        &self,
        busy: &AtomicBool,
        called_at: &'static Location<'static>,
    ) -> Infallible {
        std::future::poll_fn(|_| match busy.load(Ordering::Relaxed) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
        .await;
        // Boxed: the timer would make every acquire's future larger.
        Box::pin(self.warn_while_self_waiting(called_at)).await
    }

    async fn warn_while_self_waiting(&self, called_at: &'static Location<'static>) -> Infallible {
        let since = std::time::Instant::now();
        let core = self.inner();
        let after = core.config.self_wait.warning;
        let asker = self.owner.asker();
        // Listed for operators while the wait is warned of and the hold stands.
        let mut listed: Option<SelfWaitTicket> = None;
        tokio::time::sleep(after).await;
        loop {
            match core.watchdog.held_by(self.name(), asker, true) {
                Some(held_at) => {
                    self.warn(asker, held_at, called_at, since.elapsed());
                    listed.get_or_insert_with(|| {
                        core.watchdog.self_wait(SelfWaitEntry {
                            lock: self.ops().name().clone(),
                            owner: self.owner.id().clone(),
                            held_at,
                            called_at,
                            since,
                            thread: matches!(asker, Asker::Thread(_)),
                        })
                    });
                }
                None => listed = None,
            }
            tokio::time::sleep(after.saturating_mul(REPEAT)).await;
        }
    }

    fn warn(
        &self,
        asker: Asker,
        held_at: &'static Location<'static>,
        called_at: &'static Location<'static>,
        waited: std::time::Duration,
    ) {
        let rw = self.ops().family() == "rw";
        warn(self.name(), rw, asker, held_at, called_at, waited);
    }
}

/// The self-wait WARN of a wait (made `called_at`, for `waited` so far) for a hold of lock
/// `name` (`rw`: a read-write lock's) taken `held_at` by the waiter's own task or thread.
pub(crate) fn warn(
    name: &str,
    rw: bool,
    asker: Asker,
    held_at: &'static Location<'static>,
    called_at: &'static Location<'static>,
    waited: std::time::Duration,
) {
    {
        let whose = match asker {
            Asker::Task(_) => "task",
            Asker::Thread(_) => "thread",
        };
        let upgrade = match rw {
            true => "; a reader that wants to write releases its read hold first",
            false => "",
        };
        tracing::warn!(
            lock = %name,
            held_at = %held_at,
            called_at = %called_at,
            waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            "the acquisition at {called_at} has waited {waited:.1?} for a hold of lock `{}` that \
             its own {whose} keeps, taken at {held_at}: it waits for itself, for ever while that \
             hold is renewed. Every acquisition is an owner of its own: to nest, run the work \
             inside `with_lock` or `guard.scope(..)`, or take `guard.reenter()`{upgrade}. (If \
             that hold's guard went to another task or thread, which will give it back, this \
             wait is as meant.)",
            name
        );
    }
}

/// Runs `work`, polling `watch` (when given) right after it every time: the answer is
/// `work`'s. Both are pinned by the caller, where they were made (see `acquire_observed`).
pub(super) fn race<T, W>(
    mut work: Pin<&mut impl Future<Output = T>>,
    mut watch: Pin<&mut Option<W>>,
) -> impl Future<Output = T>
where
    W: Future<Output = Infallible>,
{
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        if let Some(watch) = watch.as_mut().as_pin_mut()
            && let Poll::Ready(never) = watch.poll(cx)
        {
            match never {}
        }
        Poll::Pending
    })
}
