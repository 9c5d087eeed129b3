//! Where this client's holds were taken, and its waits for holds of their own task: what the
//! watchdog's registry knows of every live lock hold (whose task or thread took it, where, and
//! under which owner), asked by an acquisition that waits or fails fast (see
//! [`self_wait`](crate::lock::self_wait)), by inspection for the client's own holders, and by
//! the heartbeat, which publishes it in the client's identity.

use std::panic::Location;
use std::sync::{Arc, MutexGuard, Weak};
use std::time::Duration;

use super::{RenewTarget, Shared, Watchdog};
use crate::map::Map;
use crate::owner::Asker;

/// How long a hold must have lived before the client's identity names it: short holds come and
/// go between two beats, and an operator looks for the ones that stay.
pub(crate) const PUBLISHED_AFTER: Duration = Duration::from_secs(1);

/// How many holds an identity names at most (it says how many there are).
pub(crate) const PUBLISHED_HOLDS: usize = 200;

/// Whose a lock's hold is and where it was taken: registered with its lease.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// The task (else thread) whose acquisition took it.
    pub(crate) asker: Asker,
    /// Where that acquisition was called.
    pub(crate) at: &'static Location<'static>,
    /// The owner's name in Redis, `<client-uuid>:<n>`.
    pub(crate) owner: Arc<str>,
}

/// A hold of this client as its identity names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct HeldSite {
    pub(crate) lock: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) at: &'static Location<'static>,
}

/// An acquisition that has waited past the warning's threshold for a hold its own task (or
/// thread) keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelfWaitEntry {
    pub(crate) lock: Arc<str>,
    /// The waiting acquisition's owner.
    pub(crate) owner: Arc<str>,
    pub(crate) held_at: &'static Location<'static>,
    pub(crate) called_at: &'static Location<'static>,
    /// When it began to wait (its first refusal).
    pub(crate) since: std::time::Instant,
    /// Asked outside any task: its own thread keeps the hold.
    pub(crate) thread: bool,
}

/// The self-waits under way, by ticket.
#[derive(Debug, Default)]
pub(super) struct SelfWaits {
    entries: Map<u64, SelfWaitEntry>,
    next_id: u64,
}

/// Keeps a self-wait listed until dropped (its acquisition ended, or the hold it waited for
/// went).
#[derive(Debug)]
pub(crate) struct SelfWaitTicket {
    shared: Weak<Shared>,
    id: u64,
}

impl Drop for SelfWaitTicket {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.self_waits().entries.remove(&self.id);
        }
    }
}

/// What the heartbeat publishes: the holds that have lived [`PUBLISHED_AFTER`] (at most
/// [`PUBLISHED_HOLDS`], by lock and owner), how many there are, and the self-waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sites {
    pub(crate) held: Vec<HeldSite>,
    pub(crate) held_total: usize,
    pub(crate) self_waits: Vec<SelfWaitEntry>,
}

impl Shared {
    fn self_waits(&self) -> MutexGuard<'_, SelfWaits> {
        self.self_waits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Watchdog {
    /// Where a live hold of lock `key` (either side of a read-write lock; read holds only when
    /// `reads`) that `asker` took was taken, if it keeps one: a scan of the client's holds
    /// (every live lock guard's hold is registered, renewed or checked).
    pub(crate) fn held_by(
        &self,
        key: &str,
        asker: Asker,
        reads: bool,
    ) -> Option<&'static Location<'static>> {
        let registry = self.shared.registry();
        registry.entries.values().find_map(|e| {
            let site = e.renewal.site.as_ref()?;
            let read = matches!(e.renewal.target, RenewTarget::ReadHolds { .. });
            let this = site.asker == asker
                && e.renewal.target.key() == key
                && (reads || !read)
                && !e.renewal.lease.is_lost();
            this.then_some(site.at)
        })
    }

    /// Where the live hold of lock `key` by `owner` (`<client-uuid>:<n>`) was taken, if this
    /// client keeps it.
    pub(crate) fn acquired_at(&self, key: &str, owner: &str) -> Option<&'static Location<'static>> {
        let registry = self.shared.registry();
        registry.entries.values().find_map(|e| {
            let site = e.renewal.site.as_ref()?;
            (&*site.owner == owner && e.renewal.target.key() == key).then_some(site.at)
        })
    }

    /// Lists `wait` until the ticket is dropped.
    pub(crate) fn self_wait(&self, wait: SelfWaitEntry) -> SelfWaitTicket {
        let mut waits = self.shared.self_waits();
        let id = waits.next_id;
        waits.next_id += 1;
        waits.entries.insert(id, wait);
        SelfWaitTicket {
            shared: Arc::downgrade(&self.shared),
            id,
        }
    }
}

/// The holds and self-waits the client's identity names now.
pub(super) fn current(shared: &Shared) -> Sites {
    // Shared names and static places only: nothing is formatted under the registry's lock,
    // which every renewal and grant takes too.
    let mut held: Vec<HeldSite> = {
        let registry = shared.registry();
        registry
            .entries
            .values()
            .filter(|e| !e.renewal.lease.is_lost())
            .filter(|e| e.renewal.lease.granted_at().elapsed() >= PUBLISHED_AFTER)
            .filter_map(|e| {
                let site = e.renewal.site.as_ref()?;
                Some(HeldSite {
                    lock: e.renewal.target.shared_key().clone(),
                    owner: site.owner.clone(),
                    at: site.at,
                })
            })
            .collect()
    };
    // One per owner and lock: a writer that also reads has two registered holds.
    held.sort_unstable();
    held.dedup();
    let held_total = held.len();
    held.truncate(PUBLISHED_HOLDS);
    let mut self_waits: Vec<SelfWaitEntry> =
        shared.self_waits().entries.values().cloned().collect();
    self_waits.sort_by(|a, b| (a.since, &a.lock, &a.owner).cmp(&(b.since, &b.lock, &b.owner)));
    Sites {
        held,
        held_total,
        self_waits,
    }
}
