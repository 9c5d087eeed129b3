//! A blocking API for synchronous code: the same client and objects, with methods that block
//! the calling thread instead of returning futures.
//!
//! For CLIs and cron jobs, batch jobs on a thread pool, build tools, synchronous web frameworks,
//! and libraries that must not force an async runtime on their callers. Nothing else is needed:
//! no runtime to build, keep driven or enter.
//!
//! ```no_run
//! # fn main() -> ferrisson::Result<()> {
//! let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let lock = client.get_lock("nightly-report");
//! let guard = lock.lock()?;
//! let token = guard.fencing_token(); // goes with every write the lock protects
//! # let _ = token;
//! // ... minutes of synchronous work: the lease is renewed meanwhile ...
//! guard.unlock()?;
//! # Ok(()) }
//! ```
//!
//! # What it is
//!
//! [`Client`] wraps an async [`ferrisson::Client`](crate::Client), and each object here wraps
//! its async twin, with the same method names: `lock`, `try_lock`, `try_lock_for`,
//! `lock_with_lease`, `hold_count`, `request_revocation`, `acquire`, `await_zero`, … returning
//! [`Result`] directly. Their documentation, the async one's (linked from each
//! method), tells what they do; this one tells what is different.
//!
//! Every async client owns a thread, `ferrisson-client`, running a small Tokio runtime: the
//! watchdog, the pub/sub hub, the connections' drivers and the releases of dropped guards run
//! there. A blocking call runs its future on the calling thread, driven by that runtime's
//! handle (`Handle::block_on`): the calling thread sleeps until Redis answered, while the
//! client's thread does the I/O.
//!
//! # Owners: the acquisition
//!
//! A hold belongs to its acquisition, as in the async API: every `lock`, `try_lock*` and
//! `lock_with_lease` is an owner of its own (written into Redis as `<client-uuid>:<n>` where
//! Redisson writes `<uuid>:<thread-id>`), so two acquisitions exclude each other whatever
//! thread or handle they come from, and a guard handed to another thread carries its hold there.
//! Reentrancy is nesting, made explicit: an acquisition of the same lock made on the calling
//! thread inside [`RLock::with_lock`]'s closure or a guard's [`scope`](LockGuard::scope), or
//! taken with [`LockGuard::reenter`], is one more hold of that acquisition (same token, no
//! wait). A second `lock()` on the same thread outside any scope waits. [`RMutex`] is never
//! reentrant.
//!
//! # Renewals, loss and drop
//!
//! A lease taken without a fixed lease is renewed by the client's watchdog, on the client's
//! thread, over a connection of its own: whatever the holding thread does (CPU work, a
//! `std::thread::sleep`, blocking I/O), its lease is renewed. Guards tell when a hold is lost
//! ([`LockGuard::is_lost`], [`LockGuard::wait_lost`]) and carry its fencing token.
//!
//! `unlock()` (`release()` for permits) gives the hold back and reports errors. Dropping a guard
//! instead stops its renewal at once and sends the release from the client's thread without
//! blocking the dropping thread (failures are logged with `tracing`; the lease frees what the
//! release could not). The drop of a client's last handle waits up to 1 s for such releases, so
//! a `main` that returns with a guard alive still gives the lock back; a process that ends with
//! `std::process::exit` calls [`Client::close`] first.
//!
//! # Not inside an async runtime
//!
//! A blocking call made on a thread inside a Tokio runtime (an `async fn`, a task, a
//! `block_on`; also `spawn_blocking` and `Runtime::enter`, which Tokio does not let a library
//! tell apart) fails at once with [`Error::InsideRuntime`], before
//! anything is sent, instead of stalling the runtime or deadlocking. Async code uses the async
//! API, for which [`Client::as_async`] hands out the same client. Dropping guards and handles
//! is fine anywhere.
//!
//! ```no_run
//! # async fn demo(client: ferrisson::blocking::Client) {
//! let refused = client.get_lock("jobs").lock();
//! assert!(matches!(refused, Err(ferrisson::Error::InsideRuntime)));
//! let guard = client.as_async().get_lock("jobs").lock().await; // the async API instead
//! # drop(guard);
//! # }
//! ```
//!
//! # Always there
//!
//! This module is not behind a cargo feature: it adds no dependency (Tokio's `rt`, which the
//! crate needs anyway, has everything it uses) and is a thin layer of wrappers, so a feature
//! would save next to no build time and cost every user of it one more thing to know.

mod client;
mod combinator;
mod guard;
mod lock;
mod permits;
mod rwlock;
mod sync;

use std::future::Future;

pub use client::{Client, ClientBuilder};
pub use combinator::{MultiGuard, MultiLock, RedLock, RedLockGuard};
pub use guard::LockGuard;
pub use lock::{RFairLock, RFencedLock, RLock};
pub use permits::{PermitGuard, RPermitExpirableSemaphore};
pub use rwlock::RReadWriteLock;
pub use sync::{RCountDownLatch, RMutex, RSemaphore};

use crate::error::{Error, Result};

/// Runs futures of one client to completion on the calling thread, with the runtime of the
/// client's own thread driving their I/O and timers.
///
/// The runtime lives as long as the client's shared core, which every object wrapped next to a
/// `Blocker` keeps alive: a `Blocker` never outlives the runtime it drives with.
#[derive(Debug, Clone)]
pub(crate) struct Blocker {
    runtime: tokio::runtime::Handle,
}

impl Blocker {
    /// The blocker of the client whose core this is.
    pub(crate) fn of(core: &crate::core::Core) -> Self {
        Blocker {
            runtime: core.thread.handle().clone(),
        }
    }

    /// Runs `work` on the calling thread until it is done.
    ///
    /// `tokio::task::try_id()` is `None` in a `block_on`: the thread's scope (a blocking
    /// `with_lock`'s closure) is the one its acquisitions nest in.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] when the calling thread is inside a Tokio runtime.
    pub(crate) fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        outside_runtime()?;
        Ok(self.runtime.block_on(work))
    }

    /// As [`run`](Self::run), for work that answers a `Result` itself.
    pub(crate) fn call<T, F>(&self, work: F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        self.run(work)?
    }

    /// Waits at most `timeout` for `event`; whether it came. `Duration::MAX` waits for ever.
    pub(crate) fn wait_for<F>(&self, timeout: std::time::Duration, event: F) -> Result<bool>
    where
        F: Future<Output = ()>,
    {
        self.run(async { tokio::time::timeout(timeout, event).await.is_ok() })
    }
}

/// `Err(Error::InsideRuntime)` when the calling thread is inside a Tokio runtime, where blocking
/// would stall it (Tokio's `block_on` panics there).
pub(crate) fn outside_runtime() -> Result<()> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Err(Error::InsideRuntime),
        Err(_) => Ok(()),
    }
}
