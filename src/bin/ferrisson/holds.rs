//! What a snapshot says of holds and clients, whatever its kind: the table's columns, the
//! holds `clients` groups by client, the exit code of `inspect`.

use std::time::Duration;

use ferrisson::inspect::{LockKind, RwMode, Snapshot};
use uuid::Uuid;

/// One owner's hold on an object.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub(crate) object: String,
    pub(crate) owner: String,
    pub(crate) client: Option<Uuid>,
    /// `read` or `write` on a read-write lock, empty otherwise.
    pub(crate) side: &'static str,
    pub(crate) holds: u32,
    /// The lease left of this hold: a reader's own (its longest read hold's), else the
    /// object's.
    pub(crate) lease: Option<Duration>,
    /// Where the hold was taken, `file:line:col`, when the snapshot says (see
    /// [`Directory::fill_places`](crate::who::Directory::fill_places)).
    pub(crate) acquired_at: Option<String>,
}

/// Every hold of `snapshot`, writer before readers.
pub(crate) fn holds(snapshot: &Snapshot) -> Vec<Hold> {
    let object = snapshot.name().to_owned();
    let hold = |owner: &str, client, side, holds, lease, at: &Option<String>| Hold {
        object: object.clone(),
        owner: owner.to_owned(),
        client,
        side,
        holds,
        lease,
        acquired_at: at.clone(),
    };
    match snapshot {
        Snapshot::Lock(lock) => lock
            .holders
            .iter()
            .map(|h| hold(&h.owner, h.client, "", h.holds, lock.lease, &h.acquired_at))
            .collect(),
        Snapshot::ReadWriteLock(rw) => rw
            .writer
            .iter()
            .map(|w| {
                hold(
                    &w.owner,
                    w.client,
                    "write",
                    w.holds,
                    rw.lease,
                    &w.acquired_at,
                )
            })
            .chain(rw.readers.iter().map(|r| {
                // The hash's lease lasts as long as the longest reader's: a dead reader's
                // own runs out sooner.
                let own = r.leases.iter().flatten().max().copied();
                hold(&r.owner, r.client, "read", r.holds, own, &r.acquired_at)
            }))
            .collect(),
        _ => Vec::new(),
    }
}

/// One owner waiting for an object, where the layout names it: a place in a fair queue, a
/// starving waiter, a waiting writer's mark. A plain lock's other waiters only listen on its
/// channel: counted ([`waiting`]), not named.
#[derive(Debug, Clone)]
pub(crate) struct Wait {
    pub(crate) object: String,
    pub(crate) owner: String,
    pub(crate) client: Option<Uuid>,
    /// `in line, 1 of 2`, `starving for 3.0s`, `to write`.
    pub(crate) how: String,
}

/// Every named waiter of `snapshot`.
pub(crate) fn waits(snapshot: &Snapshot) -> Vec<Wait> {
    let object = snapshot.name().to_owned();
    let wait = |owner: &str, client, how| Wait {
        object: object.clone(),
        owner: owner.to_owned(),
        client,
        how,
    };
    match snapshot {
        Snapshot::Lock(lock) => {
            let line = lock.queue.iter().enumerate().map(|(place, w)| {
                let how = format!("in line, {} of {}", place + 1, lock.queue.len());
                wait(&w.owner, w.client, how)
            });
            let starving = lock.starving.iter().map(|w| {
                let how = format!("starving for {}", crate::text::span(w.starving_for));
                wait(&w.owner, w.client, how)
            });
            line.chain(starving).collect()
        }
        Snapshot::ReadWriteLock(rw) => rw
            .waiting_writers
            .iter()
            .map(|w| wait(&w.owner, w.client, "to write".to_owned()))
            .collect(),
        _ => Vec::new(),
    }
}

/// Every client `snapshot` names: holders, readers, writer, queued, starving and waiting
/// writers.
pub(crate) fn parties(snapshot: &Snapshot) -> Vec<Uuid> {
    let held = holds(snapshot).into_iter().filter_map(|h| h.client);
    let waiting = waits(snapshot).into_iter().filter_map(|w| w.client);
    let mut ids: Vec<Uuid> = held.chain(waiting).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whether anybody holds the object: a lock's holder, a read-write lock's mode, a permit out
/// (`inspect` exits with 1 then). A semaphore's or latch's count names no holder.
pub(crate) fn is_held(snapshot: &Snapshot) -> bool {
    match snapshot {
        Snapshot::Lock(lock) => lock.is_held(),
        Snapshot::ReadWriteLock(rw) => rw.mode.is_some(),
        Snapshot::PermitExpirableSemaphore(p) => !p.permits.is_empty(),
        _ => false,
    }
}

/// The kind as the table shows it.
pub(crate) fn kind(snapshot: &Snapshot) -> &'static str {
    match snapshot {
        Snapshot::Lock(lock) => lock_kind(lock.kind),
        Snapshot::ReadWriteLock(rw) => match rw.mode {
            Some(RwMode::Write) => "rwlock/w",
            Some(RwMode::Read) => "rwlock/r",
            _ => "rwlock",
        },
        Snapshot::Semaphore(_) => "semaphore",
        Snapshot::PermitExpirableSemaphore(_) => "permits",
        Snapshot::CountDownLatch(_) => "latch",
        Snapshot::Count(_) => "count",
        _ => "absent",
    }
}

/// A lock's kind as the table shows it.
pub(crate) fn lock_kind(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Fair => "fair",
        LockKind::Fenced => "fenced",
        _ => "lock",
    }
}

/// The lease left: a lock's or read-write lock's, or the first permit's to expire.
pub(crate) fn lease(snapshot: &Snapshot) -> Option<Duration> {
    match snapshot {
        Snapshot::Lock(lock) => lock.lease,
        Snapshot::ReadWriteLock(rw) => rw.lease,
        Snapshot::PermitExpirableSemaphore(p) => {
            p.permits.iter().filter_map(|p| p.expires.ahead()).min()
        }
        _ => None,
    }
}

/// Who waits: a fair lock's queue; otherwise the connections listening on the object's
/// channel (one per client that waits, however many of its tasks do).
pub(crate) fn waiting(snapshot: &Snapshot) -> u64 {
    match snapshot {
        Snapshot::Lock(lock) if !lock.queue.is_empty() => lock.queue.len() as u64,
        Snapshot::Lock(lock) => lock.subscribers,
        Snapshot::ReadWriteLock(rw) => rw.subscribers.max(rw.waiting_writers.len() as u64),
        Snapshot::Semaphore(s) => s.subscribers,
        Snapshot::PermitExpirableSemaphore(p) => p.subscribers,
        Snapshot::CountDownLatch(l) => l.subscribers,
        Snapshot::Count(c) => c.semaphore_subscribers + c.latch_subscribers,
        _ => 0,
    }
}

/// What a count-like object holds, for the table's holders column: `3 free`, `count 2`,
/// `2 out, 1 free`.
pub(crate) fn count(snapshot: &Snapshot) -> Option<String> {
    let free = |n: Option<i64>| n.map_or_else(|| "not set".to_owned(), |n| format!("{n} free"));
    match snapshot {
        Snapshot::Semaphore(s) => Some(free(s.available)),
        Snapshot::PermitExpirableSemaphore(p) => {
            Some(format!("{} out, {}", p.permits.len(), free(p.available)))
        }
        Snapshot::CountDownLatch(l) => Some(format!("count {}", l.count)),
        Snapshot::Count(c) => Some(format!("count {}", c.count)),
        _ => None,
    }
}
