//! The guide: how ferrisson's objects behave, one topic per page.
//!
//! Start with the crate's [front page](crate) (quick start, which lock to take, what you can count on),
//! then [`semantics`]. The rest can be read in any order:
//!
//! | page | what is in it |
//! |---|---|
//! | [`semantics`] | leases and the watchdog, lost leases, owners and reentrancy, fencing tokens, drop and cancellation |
//! | [`waiting`] | how waiters wake, fairness, how long each call may take, handover inside one client |
//! | [`lifecycle`] | one client per process, runtimes, ending a process: `close`, Ctrl-C and SIGTERM (`close_on_signal`), crashes and panics |
//! | [`faults`] | what survives a restart, a failover or an eviction; retries and repairs; errors |
//! | [`locks`] | `RLock`, `RFairLock`, `RReadWriteLock` (and writer preference), `RFencedLock`, `RMutex` |
//! | [`semaphores`] | `RSemaphore` and `RPermitExpirableSemaphore` |
//! | [`latch`] | `RCountDownLatch` |
//! | [`revocation`] | asking a holder to let go |
//! | [`inspect`] | who holds it, who waits: snapshots of every object, listing by pattern, for operators |
//! | [`operating`] | the `ferrisson` command-line tool: find a stuck lock, see who holds it, decide, force it |
//! | [`topologies`] | one server, Cluster, Sentinel; the failover window and `sync_replicas` |
//! | [`multilock`] | `MultiLock` and `RedLock` |
//! | [`porting`] | porting from Redisson: each Java habit and its ferrisson form, and finding a port that waits for itself |
//! | [`layout`] | every key and channel in Redis, shared with Redisson 3.x |
//! | [`acl`] | the Redis ACL rule explained, and what a missing permission looks like |
//! | [`observability`] | tracing spans and events, metrics, Prometheus |
//! | [`performance`] | benchmarks and how to run them |
//! | [`testing`] | how the test suite runs |
//!
//! The pages are the markdown files in the repository's `docs/` folder, and every Rust block in
//! them is compiled as a doctest.

#[doc = include_str!("../docs/semantics.md")]
pub mod semantics {}

#[doc = include_str!("../docs/waiting.md")]
pub mod waiting {}

#[doc = include_str!("../docs/lifecycle.md")]
pub mod lifecycle {}

#[doc = include_str!("../docs/faults.md")]
pub mod faults {}

#[doc = include_str!("../docs/locks.md")]
pub mod locks {}

#[doc = include_str!("../docs/semaphores.md")]
pub mod semaphores {}

#[doc = include_str!("../docs/latch.md")]
pub mod latch {}

#[doc = include_str!("../docs/revocation.md")]
pub mod revocation {}

#[doc = include_str!("../docs/inspect.md")]
pub mod inspect {}

#[doc = include_str!("../docs/operating.md")]
pub mod operating {}

#[doc = include_str!("../docs/topologies.md")]
pub mod topologies {}

#[doc = include_str!("../docs/multilock.md")]
pub mod multilock {}

#[doc = include_str!("../docs/porting.md")]
pub mod porting {}

#[doc = include_str!("../docs/layout.md")]
pub mod layout {}

#[doc = include_str!("../docs/acl.md")]
pub mod acl {}

#[doc = include_str!("../docs/observability.md")]
pub mod observability {}

#[doc = include_str!("../docs/performance.md")]
pub mod performance {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}
