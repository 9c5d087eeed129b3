//! Owners: who a hold belongs to. The second step of the walk `lock()` → owner → holder.
//!
//! A hold belongs to the client and the task that asked (the thread outside any task; see
//! [`Asker`]), whatever handle it asked through: tasks sharing a handle are separate contenders,
//! and one task locking a name again, through any handle of that name, is reentrant. Per lock
//! name and [family](crate::lock::holder::LockOps::family) (a plain or fenced lock, a fair lock,
//! a read-write lock), each asker of this client has one [`Owner`]: its name in Redis and everything the engine
//! keeps per owner (the hold counts of both sides of a read-write lock, their leftovers, the
//! acquires under way). Holders and guards keep their owner alive; the client's table only
//! points at it, so an owner goes away with its last guard, acquire or repair, and the table
//! keeps nothing for tasks that hold nothing.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use tokio::sync::Mutex as AsyncMutex;

use crate::lock::handover::LocalWaiters;
use crate::lock::holder::Holds;
use crate::lock::leftover::Leftovers;
use crate::map::Map;
use crate::names;
use crate::owner::{Asker, Owners};

/// What the lock engine keeps per client, besides the client's shared machinery: its owners
/// and its local waiters.
#[derive(Debug, Default)]
pub(crate) struct ClientLocks {
    pub(crate) owners: Arc<OwnerTable>,
    /// This client's waiters per lock, for releases that hand the lock over.
    pub(crate) local_waiters: Arc<LocalWaiters>,
}

/// Which hold count of an owner an operation moves: a read-write lock's write side keeps its
/// own (the read side, and every other kind, use the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Main = 0,
    Write = 1,
}

/// One owner of one lock: an asker of this client, or one acquire of an `RMutex`.
pub(crate) struct Owner {
    /// The name written into Redis, `<client-uuid>:<n>`; fixed for the owner's life.
    id: Arc<str>,
    lock: Arc<str>,
    /// A read-write lock's names derived from `id`, made at first use.
    rw: OnceLock<RwOwner>,
    holds: [Arc<AsyncMutex<Holds>>; 2],
    /// Each side's taint flag, readable without its holds' lock (see
    /// [`leftover`](crate::lock::leftover)).
    tainted: [Arc<AtomicBool>; 2],
    /// Acquires of this owner under way (counted under the table's lock for registered owners).
    acquiring: AtomicUsize,
    /// Where the owner is registered, to leave the table when it goes.
    registered: Option<(Arc<OwnerTable>, Asker)>,
}

/// A read-write lock owner's derived names.
#[derive(Debug)]
pub(crate) struct RwOwner {
    /// `<owner>:write`, the write side's hash field.
    pub(crate) write_field: Arc<str>,
    /// `{name}:<owner>:rwlock_timeout`, the prefix of the owner's read-hold timeout keys.
    pub(crate) timeouts: Arc<str>,
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("id", &self.id)
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

impl Owner {
    fn new(id: Arc<str>, lock: Arc<str>, registered: Option<(Arc<OwnerTable>, Asker)>) -> Self {
        let (main, write) = (Holds::default(), Holds::default());
        Owner {
            id,
            lock,
            rw: OnceLock::new(),
            tainted: [main.leftovers.hint(), write.leftovers.hint()],
            holds: [main, write].map(|h| Arc::new(AsyncMutex::new(h))),
            acquiring: AtomicUsize::new(0),
            registered,
        }
    }

    /// An owner of `lock` for one acquire only, in no table (an `RMutex` is never reentrant).
    pub(crate) fn single(owners: &Owners, lock: &Arc<str>) -> Arc<Self> {
        Arc::new(Owner::new(owners.next_owner(), lock.clone(), None))
    }

    /// The owner's name in Redis.
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// The hold count of `side`.
    pub(crate) fn holds(&self, side: Side) -> &Arc<AsyncMutex<Holds>> {
        &self.holds[side as usize]
    }

    /// The read-write lock names of this owner.
    pub(crate) fn rw(&self) -> &RwOwner {
        self.rw.get_or_init(|| RwOwner {
            write_field: format!("{}:write", self.id).into(),
            timeouts: names::read_timeouts(&self.lock, &self.id).into(),
        })
    }

    /// Whether `side` may be tainted (read without its holds' lock).
    pub(crate) fn may_be_tainted(&self, side: Side) -> bool {
        Leftovers::may_be_tainted(&self.tainted[side as usize])
    }

    /// Acquires of this owner under way.
    pub(crate) fn acquiring(&self) -> usize {
        self.acquiring.load(Ordering::Acquire)
    }

    /// Whether the owner holds nothing on the side other than `side` (taken without waiting;
    /// an operation under way there counts as holding).
    pub(crate) fn idle_besides(&self, side: Side) -> bool {
        let other = match side {
            Side::Main => Side::Write,
            Side::Write => Side::Main,
        };
        self.holds(other)
            .try_lock()
            .is_ok_and(|h| h.count() == 0 && !h.leftovers.tainted())
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some((table, asker)) = &self.registered {
            table.unlink(*asker, self);
        }
    }
}

/// An acquire of an owner under way; dropping it ends the count.
#[derive(Debug)]
pub(crate) struct Acquiring(Arc<Owner>);

impl Acquiring {
    /// Counts an acquire of `owner` (one in no table; a registered owner is counted by the
    /// table, under its lock).
    pub(crate) fn single(owner: Arc<Owner>) -> Self {
        owner.acquiring.fetch_add(1, Ordering::AcqRel);
        Acquiring(owner)
    }

    pub(crate) fn owner(&self) -> &Arc<Owner> {
        &self.0
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.0.acquiring.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One asker's owners: per lock name and family.
type Entries = Vec<(Arc<str>, &'static str, Weak<Owner>)>;

/// A client's owners, per asker, lock name and family. It points at owners without keeping
/// them: an owner leaves it when its last holder goes (or when it is retired).
#[derive(Debug, Default)]
pub(crate) struct OwnerTable {
    askers: Mutex<Map<Asker, Entries>>,
}

impl OwnerTable {
    fn askers(&self) -> MutexGuard<'_, Map<Asker, Entries>> {
        // Every change under this lock is one push, removal or replacement.
        self.askers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The owner `asker` has for `lock` of `family` (made when it has none), with this acquire
    /// counted.
    pub(crate) fn acquiring(
        self: &Arc<Self>,
        owners: &Owners,
        (lock, family): (&Arc<str>, &'static str),
        asker: Asker,
    ) -> Acquiring {
        let mut askers = self.askers();
        let entries = askers.entry(asker).or_default();
        let found = entries
            .iter()
            .find(|(name, f, _)| **name == **lock && *f == family)
            .and_then(|(_, _, owner)| owner.upgrade());
        let owner = match found {
            Some(owner) => owner,
            None => {
                let owner = Arc::new(Owner::new(
                    owners.next_owner(),
                    lock.clone(),
                    Some((self.clone(), asker)),
                ));
                // A dead entry (its owner is dropping right now) is replaced.
                entries.retain(|(name, f, _)| !(**name == **lock && *f == family));
                entries.push((lock.clone(), family, Arc::downgrade(&owner)));
                owner
            }
        };
        owner.acquiring.fetch_add(1, Ordering::AcqRel);
        Acquiring(owner)
    }

    /// The owner `asker` has for `lock` of `family`, if any.
    pub(crate) fn find(&self, (lock, family): (&str, &str), asker: Asker) -> Option<Arc<Owner>> {
        self.askers()
            .get(&asker)?
            .iter()
            .find(|(name, f, _)| **name == *lock && *f == family)
            .and_then(|(_, _, owner)| owner.upgrade())
    }

    /// Takes `owner` out of the table when the acquire counted in `acquiring` is its only one,
    /// so that its asker's next acquire gets a new owner (and name). Returns whether it did.
    pub(crate) fn retire(&self, acquiring: &Acquiring) -> bool {
        let owner = acquiring.owner();
        let Some((_, asker)) = &owner.registered else {
            return false;
        };
        let mut askers = self.askers();
        // Counted under this lock: no other acquire can pick the owner up meanwhile.
        if owner.acquiring() != 1 {
            return false;
        }
        Self::remove(&mut askers, *asker, Arc::as_ptr(owner));
        true
    }

    /// The owner at `owner` is gone: its entry goes, unless another owner took it.
    fn unlink(&self, asker: Asker, owner: *const Owner) {
        Self::remove(&mut self.askers(), asker, owner);
    }

    fn remove(askers: &mut Map<Asker, Entries>, asker: Asker, owner: *const Owner) {
        let Some(entries) = askers.get_mut(&asker) else {
            return;
        };
        entries.retain(|(_, _, entry)| !std::ptr::eq(entry.as_ptr(), owner));
        if entries.is_empty() {
            askers.remove(&asker);
        }
    }

    /// How many owners the table points at.
    pub(crate) fn len(&self) -> usize {
        self.askers().values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    const LOCK: &str = "lock";

    fn setup() -> (Arc<OwnerTable>, Owners, Arc<str>) {
        (
            Arc::default(),
            Owners::new(Uuid::new_v4()),
            Arc::from("lock"),
        )
    }

    #[test]
    fn one_owner_per_asker_and_name_while_it_lives() {
        let (table, owners, lock) = setup();
        let me = Asker::current();
        let a = table.acquiring(&owners, (&lock, LOCK), me);
        let b = table.acquiring(&owners, (&lock, LOCK), me);
        assert!(Arc::ptr_eq(a.owner(), b.owner()), "one asker, one owner");
        assert_eq!(a.owner().acquiring(), 2);
        let other = table.acquiring(&owners, (&Arc::from("other"), LOCK), me);
        assert_ne!(
            other.owner().id(),
            a.owner().id(),
            "another name, another owner"
        );
        let fair = table.acquiring(&owners, (&lock, "fair"), me);
        assert_ne!(
            fair.owner().id(),
            a.owner().id(),
            "another family, another owner"
        );
        drop(fair);
        assert_eq!(table.len(), 2);
        let kept = a.owner().clone();
        drop((a, b, other));
        assert_eq!(table.len(), 1, "the owner still held lives on");
        assert!(table.find(("lock", LOCK), me).is_some());
        drop(kept);
        assert_eq!(
            table.len(),
            0,
            "nothing is left for an asker holding nothing"
        );
        assert!(table.askers().is_empty());
    }

    #[test]
    fn a_retired_owner_is_replaced_by_a_new_name() {
        let (table, owners, lock) = setup();
        let me = Asker::current();
        let first = table.acquiring(&owners, (&lock, LOCK), me);
        let second = table.acquiring(&owners, (&lock, LOCK), me);
        assert!(!table.retire(&first), "not while another acquire uses it");
        drop(second);
        assert!(table.retire(&first));
        let next = table.acquiring(&owners, (&lock, LOCK), me);
        assert_ne!(next.owner().id(), first.owner().id());
        drop(first);
        assert_eq!(
            table.len(),
            1,
            "the retired owner's drop leaves the new one alone"
        );
        assert!(Arc::ptr_eq(
            &table.find(("lock", LOCK), me).unwrap(),
            next.owner()
        ));
    }

    #[test]
    fn rw_names_derive_from_the_owner() {
        let (_, owners, lock) = setup();
        let owner = Owner::single(&owners, &lock);
        assert_eq!(&*owner.rw().write_field, format!("{}:write", owner.id()));
        assert!(owner.rw().timeouts.contains(&**owner.id()));
    }
}
