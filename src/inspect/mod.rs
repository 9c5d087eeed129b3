//! Inspection: what Redis holds for one object, as an operator asks it ("who holds it, for how
//! long still, who waits?"), read in one round trip that changes nothing.
//!
//! Every object has a `snapshot()` ([`RLock::snapshot`](crate::RLock::snapshot),
//! [`RReadWriteLock::snapshot`](crate::RReadWriteLock::snapshot),
//! [`RSemaphore::snapshot`](crate::RSemaphore::snapshot),
//! [`RPermitExpirableSemaphore::snapshot`](crate::RPermitExpirableSemaphore::snapshot),
//! [`RCountDownLatch::snapshot`](crate::RCountDownLatch::snapshot),
//! [`RMutex::snapshot`](crate::RMutex::snapshot)), and
//! [`Client::inspect`](crate::Client::inspect) reads a name whose kind is not known, finding
//! the kind from the keys, and [`Client::inspect_matching`](crate::Client::inspect_matching)
//! lists every object whose name matches a pattern. One script (`lua/inspect.lua`) reads every key of the object and the
//! server's clock together, so the snapshot is of one moment, and every time in it is measured
//! by the server's clock, never the client's. See the guide's [inspection
//! page](crate::guide::inspect).
//!
//! What the layout does not record is not in a snapshot: when a hold was granted, and a plain
//! hold's fencing token. Recording them would add a write to every grant, and the lock path
//! stays as it is. Where a hold was taken is not in the layout either: the snapshot says it
//! for the holds of the client that takes it, and every client's identity says it for its
//! own holds that have lived a second
//! ([`ClientIdentity::acquired_at`](crate::ClientIdentity::acquired_at)).
//!
//! With the `serde` feature every snapshot is `serde::Serialize`: durations as integer
//! milliseconds (fields named `..._ms`), client ids as strings, a [`Snapshot`] tagged by its
//! `object` field.

mod counts;
mod keys;
mod lock;
mod reply;
mod rwlock;
mod scan;

use std::fmt;
use std::time::Duration;

use redis::Value;
use uuid::Uuid;

pub use counts::{
    AbsentSnapshot, CountSnapshot, LatchSnapshot, Permit, PermitSemaphoreSnapshot,
    SemaphoreSnapshot,
};
pub use lock::{LockKind, LockSnapshot, QueuedWaiter, StarvingWaiter};
pub use rwlock::{Reader, RwLockSnapshot, RwMode, WriterMark};

use crate::core::Core;
use crate::error::{Error, Result};
use crate::script::{INSPECT, ScriptCall};
use crate::{names, slots};
use reply::Items;

/// What [`Client::inspect`](crate::Client::inspect) found under a name: one variant per kind of
/// object, the kind read from the keys (see each variant for how).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::inspect::Snapshot;
///
/// match client.inspect("orders:42").await? {
///     Snapshot::Lock(lock) => {
///         for holder in &lock.holders {
///             println!("held by {} ({} holds)", holder.owner, holder.holds);
///         }
///     }
///     Snapshot::Absent(_) => println!("nothing under that name"),
///     other => println!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "object", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Snapshot {
    /// A hash without a `mode` field, or without a hash a fair queue or a fenced lock's name
    /// counter: a plain, fair or fenced lock (or an `RMutex`). Its [`kind`](LockSnapshot::kind) is guessed from the keys.
    Lock(LockSnapshot),
    /// A hash with a `mode` field, or waiting writers' marks without a hash.
    ReadWriteLock(RwLockSnapshot),
    /// A count whose semaphore channel has subscribers and whose latch channel has none.
    Semaphore(SemaphoreSnapshot),
    /// A count beside a zset of permits (`{name}:timeout`). One whose permits are all back
    /// has no zset, and shows as a [`Semaphore`](Self::Semaphore) or a [`Count`](Self::Count).
    PermitExpirableSemaphore(PermitSemaphoreSnapshot),
    /// A count whose latch channel has subscribers and whose semaphore channel has none.
    CountDownLatch(LatchSnapshot),
    /// A count that a semaphore and a latch would both store the same way: nobody (or both
    /// kinds) listening says which it is. Ask the object's own `snapshot()` when you know.
    Count(CountSnapshot),
    /// No key under the name: a free lock, an open latch or a semaphore never set.
    Absent(AbsentSnapshot),
}

impl Snapshot {
    /// The name inspected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// assert_eq!(client.inspect("jobs").await?.name(), "jobs");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        match self {
            Snapshot::Lock(s) => &s.name,
            Snapshot::ReadWriteLock(s) => &s.name,
            Snapshot::Semaphore(s) => &s.name,
            Snapshot::PermitExpirableSemaphore(s) => &s.name,
            Snapshot::CountDownLatch(s) => &s.name,
            Snapshot::Count(s) => &s.name,
            Snapshot::Absent(s) => &s.name,
        }
    }
}

/// One owner holding a lock, as the lock's hash names it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for holder in client.get_lock("orders").snapshot().await?.holders {
///     // e.g. "1b4e28ba-2fa1-11d2-883f-0016d3cca427:7 of client Some(1b4e28ba-...): 1 hold(s)"
///     println!("{} of client {:?}: {} hold(s)", holder.owner, holder.client, holder.holds);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Holder {
    /// The owner field, `<client-uuid>:<n>` (ferrisson: one per acquisition; Java Redisson:
    /// `<uuid>:<thread id>`), e.g. `1b4e28ba-2fa1-11d2-883f-0016d3cca427:7`.
    pub owner: String,
    /// The client the owner belongs to: the UUID before the first `:` (a ferrisson client's
    /// [`Client::id`](crate::Client::id), a Redisson client's id), e.g.
    /// `Some(1b4e28ba-2fa1-11d2-883f-0016d3cca427)`; `None` when the owner does not start with
    /// one.
    pub client: Option<Uuid>,
    /// How many holds the owner has (reentrant acquisitions), e.g. `2`.
    pub holds: u32,
    /// Where the hold was taken: `file:line:column` of the acquiring call, e.g.
    /// `Some("src/orders.rs:42:27")`. Filled in, without a round trip, for a hold of the client
    /// that took the snapshot; `None` for other clients' holds, whose places their identities
    /// give once a hold has lived a second (look them up with
    /// [`ClientIdentity::acquired_at`](crate::ClientIdentity::acquired_at); the `ferrisson`
    /// tool does).
    pub acquired_at: Option<String>,
}

impl Holder {
    fn new(owner: String, holds: u32) -> Self {
        Holder {
            client: client_of(&owner),
            owner,
            holds,
            acquired_at: None,
        }
    }
}

/// The client UUID an owner name starts with.
pub(crate) fn client_of(owner: &str) -> Option<Uuid> {
    let (client, _) = owner.split_once(':')?;
    Uuid::try_parse(client).ok()
}

/// A pending revocation request (see [revocation](crate::guide::revocation)): which hold was
/// asked to let go, and when.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for request in client.get_lock("orders").snapshot().await?.revocations {
///     // e.g. "1b4e28ba-...:7 was asked to let go 1.2s ago"
///     println!("{} was asked to let go {:?} ago", request.hold, request.requested_ago);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Revocation {
    /// The hold asked: an owner (a lock's holder, a reader), `<owner>:write` (a read-write
    /// lock's writer) or a permit id, e.g. `1b4e28ba-2fa1-11d2-883f-0016d3cca427:7:write`.
    pub hold: String,
    /// How long ago the request was made, by the server's clock, e.g. `1.2 s`.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "requested_ago_ms", serialize_with = "ser::millis")
    )]
    pub requested_ago: Duration,
}

/// A moment on the server's clock, seen from the moment of the snapshot: ahead of it (a
/// deadline still to come) or behind it (one that has passed), to the millisecond.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ferrisson::inspect::FromNow;
///
/// let due = FromNow::from_millis(1500);
/// assert_eq!(due.ahead(), Some(Duration::from_millis(1500)));
/// assert_eq!(due.to_string(), "in 1.5s");
/// let passed = FromNow::from_millis(-200);
/// assert!(passed.has_passed());
/// assert_eq!(passed.behind(), Some(Duration::from_millis(200)));
/// assert_eq!(passed.to_string(), "200ms ago");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
pub struct FromNow {
    ms: i64,
}

impl FromNow {
    /// `ms` milliseconds from now: positive ahead, negative behind.
    pub const fn from_millis(ms: i64) -> Self {
        FromNow { ms }
    }

    /// Milliseconds from now: positive ahead, negative behind.
    pub const fn as_millis(self) -> i64 {
        self.ms
    }

    /// Whether the moment has passed (it is not ahead).
    pub const fn has_passed(self) -> bool {
        self.ms <= 0
    }

    /// How far ahead the moment is; `None` once it has passed.
    pub fn ahead(self) -> Option<Duration> {
        u64::try_from(self.ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    /// How long ago the moment passed; `None` while it is ahead.
    pub fn behind(self) -> Option<Duration> {
        (self.ms <= 0).then(|| Duration::from_millis(self.ms.unsigned_abs()))
    }
}

impl fmt::Display for FromNow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = Duration::from_millis(self.ms.unsigned_abs());
        if self.ms > 0 {
            write!(f, "in {span:?}")
        } else {
            write!(f, "{span:?} ago")
        }
    }
}

/// Durations as integer milliseconds in serialized snapshots.
#[cfg(feature = "serde")]
pub(crate) mod ser {
    use std::time::Duration;

    fn ms(d: &Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(ms(d))
    }

    pub(super) fn opt_millis<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&ms(d)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn each_opt_millis<S: serde::Serializer>(
        ds: &[Option<Duration>],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(ds.iter().map(|d| d.as_ref().map(ms)))
    }
}

/// What the caller takes the object for (`lua/inspect.lua`'s ARGV[1]).
#[derive(Debug, Clone, Copy)]
enum Asked {
    Lock,
    RwLock,
    Semaphore,
    Permits,
    Latch,
    Any,
}

impl Asked {
    fn arg(self) -> &'static str {
        match self {
            Asked::Lock => "lock",
            Asked::RwLock => "rwlock",
            Asked::Semaphore => "semaphore",
            Asked::Permits => "permits",
            Asked::Latch => "latch",
            Asked::Any => "any",
        }
    }
}

/// The call of `lua/inspect.lua` for `name`: every key and channel any kind uses.
fn call(name: &str, asked: Asked) -> ScriptCall {
    let base = names::suffix_base(name);
    let latch_channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    // Counted only in the name's slot: elsewhere it may be another node's (a latch refuses
    // such names anyway).
    let latch_channel = if slots::key_slot(&latch_channel) == slots::key_slot(name) {
        latch_channel
    } else {
        String::new()
    };
    ScriptCall::new(&INSPECT)
        .key(name)
        .key(slots::token_counter(name))
        .key(names::token_key(name))
        .key(names::derived("ferrisson_lock_starving", name))
        .key(names::derived("redisson_lock_queue", name))
        .key(names::derived("redisson_lock_timeout", name))
        .key(names::derived("ferrisson_fair_alive", name))
        .key(names::revocations(name))
        .key(format!("{base}:ferrisson_writers"))
        .key(format!("{base}:timeout"))
        .arg(asked.arg())
        .arg(names::lock_channel(name))
        .arg(names::rwlock_channel(name))
        .arg(names::derived("redisson_sc", name))
        .arg(latch_channel)
        .arg(base)
}

/// Runs the script for `name` taken as `asked`, and reads what it found.
async fn read(core: &Core, name: &str, asked: Asked) -> Result<Snapshot> {
    names::validate(name).map_err(Error::InvalidArgument)?;
    let reply: Value = core.executor.run_read(&call(name, asked), name).await?;
    let mut top = Items::of(&reply, "reply")?;
    let kind = top.text()?;
    let mut section = top.list("section")?;
    let name = name.to_owned();
    let snapshot = match kind.as_str() {
        "lock" => Snapshot::Lock(lock::parse(name, &mut section)?),
        "rwlock" => Snapshot::ReadWriteLock(rwlock::parse(name, &mut section)?),
        "semaphore" => Snapshot::Semaphore(counts::semaphore(name, &mut section)?),
        "permits" => Snapshot::PermitExpirableSemaphore(counts::permits(name, &mut section)?),
        "latch" => Snapshot::CountDownLatch(counts::latch(name, &mut section)?),
        "count" => counts::count(name, &mut section)?,
        "none" => Snapshot::Absent(counts::absent(name, &mut section)?),
        other => return Err(Error::unexpected(format!("inspect.lua: a kind `{other}`"))),
    };
    Ok(with_own_places(core, snapshot))
}

/// `snapshot`, each hold of this client's own saying where it was taken (see
/// [`Holder::acquired_at`]): from the client's registry of holds, without a round trip.
fn with_own_places(core: &Core, mut snapshot: Snapshot) -> Snapshot {
    let me = core.owners.client_id();
    let name = snapshot.name().to_owned();
    let place = |owner: &str, client: Option<Uuid>| {
        if client != Some(me) {
            return None;
        }
        let at = core.watchdog.acquired_at(&name, owner)?;
        Some(at.to_string())
    };
    match &mut snapshot {
        Snapshot::Lock(lock) => {
            for h in &mut lock.holders {
                h.acquired_at = place(&h.owner, h.client);
            }
        }
        Snapshot::ReadWriteLock(rw) => {
            if let Some(w) = &mut rw.writer {
                w.acquired_at = place(&w.owner, w.client);
            }
            for r in &mut rw.readers {
                r.acquired_at = place(&r.owner, r.client);
            }
        }
        _ => {}
    }
    snapshot
}

fn mismatch(asked: Asked, found: &Snapshot) -> Error {
    Error::unexpected(format!(
        "inspect.lua: asked for a {}, answered {found:?}",
        asked.arg()
    ))
}

/// Whatever is under `name`, its kind found from the keys.
pub(crate) async fn any(core: &Core, name: &str) -> Result<Snapshot> {
    read(core, name, Asked::Any).await
}

/// `name` as a lock of `kind` (plain, fair or fenced).
pub(crate) async fn lock(core: &Core, name: &str, kind: LockKind) -> Result<LockSnapshot> {
    match read(core, name, Asked::Lock).await? {
        Snapshot::Lock(mut lock) => {
            lock.kind = kind;
            Ok(lock)
        }
        other => Err(mismatch(Asked::Lock, &other)),
    }
}

/// `name` as a read-write lock.
pub(crate) async fn rwlock(core: &Core, name: &str) -> Result<RwLockSnapshot> {
    match read(core, name, Asked::RwLock).await? {
        Snapshot::ReadWriteLock(rw) => Ok(rw),
        other => Err(mismatch(Asked::RwLock, &other)),
    }
}

/// `name` as a semaphore.
pub(crate) async fn semaphore(core: &Core, name: &str) -> Result<SemaphoreSnapshot> {
    match read(core, name, Asked::Semaphore).await? {
        Snapshot::Semaphore(s) => Ok(s),
        other => Err(mismatch(Asked::Semaphore, &other)),
    }
}

/// `name` as a permit-expirable semaphore.
pub(crate) async fn permits(core: &Core, name: &str) -> Result<PermitSemaphoreSnapshot> {
    match read(core, name, Asked::Permits).await? {
        Snapshot::PermitExpirableSemaphore(s) => Ok(s),
        other => Err(mismatch(Asked::Permits, &other)),
    }
}

/// `name` as a count-down latch.
pub(crate) async fn latch(core: &Core, name: &str) -> Result<LatchSnapshot> {
    match read(core, name, Asked::Latch).await? {
        Snapshot::CountDownLatch(s) => Ok(s),
        other => Err(mismatch(Asked::Latch, &other)),
    }
}

/// `{hold, µs since requested, ...}`.
fn revocations(items: &mut Items<'_>) -> Result<Vec<Revocation>> {
    let mut flat = items.list("revocations")?;
    let mut found = Vec::new();
    while !flat.is_empty() {
        let hold = flat.text()?;
        let ago_us = flat.int()?;
        found.push(Revocation {
            hold,
            requested_ago: Duration::from_micros(u64::try_from(ago_us).unwrap_or(0)),
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_name_their_clients() {
        let id = Uuid::new_v4();
        assert_eq!(client_of(&format!("{id}:7")), Some(id));
        assert_eq!(client_of(&format!("{id}:7:write")), Some(id));
        assert_eq!(client_of("not-a-uuid:7"), None);
        assert_eq!(client_of(&id.to_string()), None, "no `:<n>` after it");
    }

    #[test]
    fn moments_read_both_ways() {
        assert_eq!(FromNow::from_millis(0).ahead(), None);
        assert!(FromNow::from_millis(0).has_passed());
        assert_eq!(FromNow::from_millis(5).behind(), None);
        assert_eq!(
            FromNow::from_millis(i64::MIN).behind().unwrap().as_millis(),
            1 << 63
        );
    }
}
