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
//! there. A blocking call polls its future on the calling thread, within that runtime's
//! context: the calling thread sleeps until Redis answered, while the client's thread does the
//! I/O.
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
//! `std::process::exit` calls [`Client::close`] first. For Ctrl-C and SIGTERM, which end a
//! process without dropping anything, [`Client::close_on_signal`] lets the work under way finish
//! (a drain) and gives every hold still taken back first.
//!
//! # Where it may be called: threads that may block
//!
//! A blocking call may be made wherever the calling thread may block: a thread of your own (or
//! `main`), a `tokio::task::spawn_blocking` closure, a `tokio::task::block_in_place` closure on
//! a multi-thread runtime, a thread that only entered a runtime (`Runtime::enter`). Those
//! threads run no other task meanwhile, and the call's I/O is done by the client's own thread,
//! never by the caller's runtime, so it cannot deadlock there either.
//!
//! It is refused where the calling thread runs async code: inside an `async fn` or a task
//! (their poll), or inside a `block_on`'s future (`#[tokio::main]`'s and `#[tokio::test]`'s
//! bodies among them). Blocking there would stall the runtime's other tasks, or deadlock a
//! current-thread runtime whose only thread it is. Such a call fails at once with
//! [`Error::InsideRuntime`], before anything is sent. Async code uses the async API, for which
//! [`Client::as_async`] hands out the same client; or it moves the blocking call to
//! `spawn_blocking`. Dropping guards and handles is fine anywhere.
//!
//! | called from | |
//! |---|---|
//! | a plain thread, `main` without a runtime | works |
//! | `spawn_blocking`'s closure (any runtime) | works |
//! | `block_in_place`'s closure (multi-thread runtime) | works |
//! | under `Runtime::enter()`, outside any `block_on` | works |
//! | an `async fn`, a task (any runtime) | [`Error::InsideRuntime`] |
//! | a `block_on`'s future (`#[tokio::main]`, `#[tokio::test]`) | [`Error::InsideRuntime`] |
//!
//! Tokio has no public way to ask whether the calling thread is inside a poll; ferrisson tells
//! by the cooperative budget Tokio gives every poll and lifts on the threads that may block.
//! A future wrapped in `tokio::task::coop::unconstrained` runs without that budget, so a
//! blocking call inside it is not recognised: it blocks that thread (the call still completes,
//! its I/O being on the client's thread).
//!
//! ```no_run
//! # async fn demo(client: ferrisson::blocking::Client) {
//! let refused = client.get_lock("jobs").lock();
//! assert!(matches!(refused, Err(ferrisson::Error::InsideRuntime)));
//! let guard = client.as_async().get_lock("jobs").lock().await; // the async API instead
//! # drop(guard);
//! // Or the blocking API on a thread that may block:
//! let lock = client.get_lock("jobs");
//! let held = tokio::task::spawn_blocking(move || lock.lock().map(drop)).await;
//! # drop(held);
//! # }
//! ```
//!
//! # Always there
//!
//! This module is not behind a cargo feature: it adds no dependency (Tokio's `rt`, which the
//! crate needs anyway, has everything it uses) and is a thin layer of wrappers, so a feature
//! would save next to no build time and cost every user of it one more thing to know.

mod bounded;
mod client;
mod combinator;
mod guard;
mod lock;
mod permits;
mod rwlock;
mod signal;
mod sync;

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

pub use client::{Client, ClientBuilder};
pub use combinator::{MultiGuard, MultiLock, RedLock, RedLockGuard};
pub use guard::LockGuard;
pub use lock::{RFairLock, RFencedLock, RLock};
pub use permits::{PermitGuard, RPermitExpirableSemaphore};
pub use rwlock::RReadWriteLock;
pub use signal::OnSignal;
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
    /// The work sees the task id the thread had (`None` on a plain thread, the blocking task's
    /// inside `spawn_blocking`): the thread's scope (a blocking `with_lock`'s closure) is the
    /// one its acquisitions nest in.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] when the calling thread runs async code (see [`may_block`]).
    pub(crate) fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        may_block()?;
        Ok(drive(&self.runtime, work))
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

/// Polls `work` on the calling thread, parking it between polls, inside `runtime`'s context so
/// that its timers and sockets belong to that runtime, whose own thread drives them.
///
/// Not `Handle::block_on`: Tokio's refuses, with a panic, every thread that entered a runtime's
/// poll, also one whose budget was lifted; and a `futures` executor refuses one nested in
/// another. Here [`may_block`] alone decides, and nothing panics.
fn drive<F: Future>(runtime: &tokio::runtime::Handle, work: F) -> F::Output {
    let _context = runtime.enter();
    // A thread whose locals are being destroyed (a call from a thread-local's drop) makes one.
    let waker = WAKER
        .try_with(Waker::clone)
        .unwrap_or_else(|_| Waker::from(Arc::new(Unpark(std::thread::current()))));
    let mut cx = Context::from_waker(&waker);
    let mut work = std::pin::pin!(work);
    loop {
        if let Poll::Ready(out) = work.as_mut().poll(&mut cx) {
            return out;
        }
        // A wake-up that came before this park makes it return at once: none is missed.
        std::thread::park();
    }
}

/// Unparks the thread it was made on.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// The calling thread's waker, made once per thread.
    static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
}

/// `Err(Error::InsideRuntime)` when the calling thread runs async code: a task's poll, or a
/// `block_on`'s future. Blocking there stalls the runtime's other tasks, or deadlocks a
/// current-thread runtime. Threads that may block pass: plain ones, and inside a runtime
/// `spawn_blocking`'s and `block_in_place`'s closures, or a thread that only entered it.
pub(crate) fn may_block() -> Result<()> {
    if tokio::runtime::Handle::try_current().is_err() || !polling() {
        return Ok(());
    }
    Err(Error::InsideRuntime)
}

/// Whether the calling thread is inside a runtime's poll (of a task, or of a `block_on`'s
/// future).
///
/// Tokio has no public way to ask. But it gives each such poll a cooperative budget (at most
/// `u8::MAX` units), and lifts it where a thread may block: `spawn_blocking`'s closure,
/// `block_in_place`'s (Tokio: "blocking sections are not constrained by task budgets").
/// So the budget is spent here until it runs out, which happens within `u8::MAX + 1` units
/// inside a poll and never outside; then given back as it was (the first unit's restore, not
/// marked as progress, puts back the value from before the probe).
fn polling() -> bool {
    use tokio::task::coop::poll_proceed;
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(first) = poll_proceed(&mut cx) else {
        return true;
    };
    for _ in 0..u8::MAX {
        match poll_proceed(&mut cx) {
            // Not restored one by one: only `first` puts the budget back, once.
            Poll::Ready(spent) => spent.made_progress(),
            Poll::Pending => {
                drop(first);
                return true;
            }
        }
    }
    drop(first);
    false
}
