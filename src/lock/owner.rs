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
    /// A read-write lock's names derived from `id`, each made at first use (scripts write them
    /// in pieces instead: these are for the watchdog and the rare paths).
    write_field: OnceLock<Arc<str>>,
    timeouts: OnceLock<Arc<str>>,
    /// The hold count of every kind but a write lock's.
    main: Arc<AsyncMutex<Holds>>,
    /// A write lock's, made at first use.
    write: OnceLock<Arc<AsyncMutex<Holds>>>,
    /// Set once a command of the owner whose outcome is unknown may still reach Redis, on
    /// either side (see [`leftover`](crate::lock::leftover)): an acquire reads it first, so the
    /// uncontended path takes no extra lock.
    tainted: AtomicBool,
    /// Acquires of this owner under way (counted under the table's lock for registered owners).
    acquiring: AtomicUsize,
    /// Where the owner is registered, to leave the table when it goes.
    registered: Option<(Arc<OwnerTable>, Asker)>,
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
    fn new(id: Arc<str>, Spare { main }: Spare, lock: Arc<str>) -> Self {
        Owner {
            id,
            lock,
            write_field: OnceLock::new(),
            timeouts: OnceLock::new(),
            main,
            write: OnceLock::new(),
            tainted: AtomicBool::new(false),
            acquiring: AtomicUsize::new(0),
            registered: None,
        }
    }

    /// An owner of `lock` for one acquire only, in no table (an `RMutex` is never reentrant).
    pub(crate) fn single(owners: &Owners, lock: &Arc<str>) -> Arc<Self> {
        Arc::new(Owner::new(
            owners.next_owner(),
            Spare::default(),
            lock.clone(),
        ))
    }

    /// What this owner, going, leaves to a new one: its hold count, when nothing can still
    /// refer to it and it holds nothing. (Never its name: a name may still meet what was left
    /// under it, a revocation request, a writer's mark, a renewal already on its way.)
    fn spare(&mut self, blank: &Spare) -> Option<Spare> {
        if Arc::strong_count(&self.main) != 1 || !self.main.try_lock().is_ok_and(|h| h.pristine()) {
            return None;
        }
        Some(Spare {
            main: std::mem::replace(&mut self.main, blank.main.clone()),
        })
    }

    /// The owner's name in Redis.
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// The hold count of `side`.
    pub(crate) fn holds(&self, side: Side) -> &Arc<AsyncMutex<Holds>> {
        match side {
            Side::Main => &self.main,
            Side::Write => self.write.get_or_init(Arc::default),
        }
    }

    /// `<owner>:write`, the owner's field on a read-write lock's write side.
    pub(crate) fn write_field(&self) -> &Arc<str> {
        self.write_field
            .get_or_init(|| names::shared(&names::write_field_pieces(&self.id)))
    }

    /// `{name}:<owner>:rwlock_timeout`, the prefix of the owner's read-hold timeout keys.
    pub(crate) fn read_timeouts(&self) -> &Arc<str> {
        self.timeouts
            .get_or_init(|| names::shared(&names::read_timeouts_pieces(&self.lock, &self.id)))
    }

    /// Whether a side of the owner may be tainted (read without the holds' locks).
    pub(crate) fn may_be_tainted(&self) -> bool {
        self.tainted.load(Ordering::Acquire)
    }

    /// A side of the owner was tainted (its holds' [`Leftovers`](crate::lock::leftover) say
    /// which): the owner's task retires it at its next acquire.
    pub(crate) fn taint(&self) {
        self.tainted.store(true, Ordering::Release);
    }

    /// Acquires of this owner under way.
    pub(crate) fn acquiring(&self) -> usize {
        self.acquiring.load(Ordering::Acquire)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let Some((table, asker)) = self.registered.take() else {
            return;
        };
        let spare = self.spare(&table.blank);
        table.unlink(asker, self, spare);
    }
}

/// A hold count for a new owner.
#[derive(Debug, Default)]
struct Spare {
    main: Arc<AsyncMutex<Holds>>,
}

/// The most spares a client keeps.
const SPARES: usize = 256;

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

/// One owner in the table: its lock name, family, and a pointer to it.
type Entry = (Arc<str>, &'static str, Weak<Owner>);

/// One asker's owners, per lock name and family. Most tasks hold one lock at a time: that one
/// is kept inline, with no allocation of its own.
#[derive(Debug)]
enum Entries {
    One(Entry),
    Many(Vec<Entry>),
}

impl Entries {
    fn iter(&self) -> std::slice::Iter<'_, Entry> {
        match self {
            Entries::One(e) => std::slice::from_ref(e).iter(),
            Entries::Many(v) => v.iter(),
        }
    }

    fn push(&mut self, entry: Entry) {
        match self {
            Entries::One(_) => {
                let Entries::One(first) = std::mem::replace(self, Entries::Many(Vec::new())) else {
                    unreachable!("matched above");
                };
                *self = Entries::Many(vec![first, entry]);
            }
            Entries::Many(v) => v.push(entry),
        }
    }

    /// Keeps the entries `keep` approves; false when none is left.
    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) -> bool {
        match self {
            Entries::One(e) => keep(e),
            Entries::Many(v) => {
                v.retain(keep);
                !v.is_empty()
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Entries::One(_) => 1,
            Entries::Many(v) => v.len(),
        }
    }
}

/// A client's owners, per asker, lock name and family. It points at owners without keeping
/// them: an owner leaves it when its last holder goes (or when it is retired).
#[derive(Debug, Default)]
pub(crate) struct OwnerTable {
    state: Mutex<TableState>,
    /// Stand-ins a going owner takes in place of what it leaves as a spare.
    blank: Spare,
}

#[derive(Debug, Default)]
struct TableState {
    askers: Map<Asker, Entries>,
    /// What gone owners left for new ones (a task that locks and unlocks in a loop makes an
    /// owner each time: this saves one of its allocations); at most [`SPARES`].
    spares: Vec<Spare>,
}

impl OwnerTable {
    fn state(&self) -> MutexGuard<'_, TableState> {
        // Every change under this lock is one push, removal or replacement.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The owner `asker` has for `lock` of `family` (made when it has none), with this acquire
    /// counted.
    pub(crate) fn acquiring(
        self: &Arc<Self>,
        owners: &Owners,
        (lock, family): (&Arc<str>, &'static str),
        asker: Asker,
    ) -> Acquiring {
        let mut state = self.state();
        let same = |(name, f, _): &Entry| **name == **lock && *f == family;
        let found = state
            .askers
            .get(&asker)
            .and_then(|entries| entries.iter().find(|e| same(e)))
            .and_then(|(_, _, owner)| owner.upgrade());
        let owner = match found {
            Some(owner) => owner,
            None => {
                let spare = state.spares.pop().unwrap_or_default();
                let mut owner = Owner::new(owners.next_owner(), spare, lock.clone());
                owner.registered = Some((self.clone(), asker));
                let owner = Arc::new(owner);
                let entry = (lock.clone(), family, Arc::downgrade(&owner));
                // A dead entry (its owner is dropping right now) is replaced.
                match state.askers.get_mut(&asker) {
                    Some(entries) => {
                        if entries.retain(|e| !same(e)) {
                            entries.push(entry);
                        } else {
                            *entries = Entries::One(entry);
                        }
                    }
                    None => {
                        state.askers.insert(asker, Entries::One(entry));
                    }
                }
                owner
            }
        };
        owner.acquiring.fetch_add(1, Ordering::AcqRel);
        Acquiring(owner)
    }

    /// The owner `asker` has for `lock` of `family`, if any.
    pub(crate) fn find(&self, (lock, family): (&str, &str), asker: Asker) -> Option<Arc<Owner>> {
        self.state()
            .askers
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
        let mut state = self.state();
        // Counted under this lock: no other acquire can pick the owner up meanwhile.
        if owner.acquiring() != 1 {
            return false;
        }
        Self::remove(&mut state.askers, *asker, Arc::as_ptr(owner));
        true
    }

    /// The owner at `owner` is gone, leaving `spare`: its entry goes, unless another owner
    /// took it.
    fn unlink(&self, asker: Asker, owner: *const Owner, spare: Option<Spare>) {
        let mut state = self.state();
        Self::remove(&mut state.askers, asker, owner);
        if let Some(spare) = spare
            && state.spares.len() < SPARES
        {
            state.spares.push(spare);
        }
    }

    fn remove(askers: &mut Map<Asker, Entries>, asker: Asker, owner: *const Owner) {
        let Some(entries) = askers.get_mut(&asker) else {
            return;
        };
        if !entries.retain(|(_, _, entry)| !std::ptr::eq(entry.as_ptr(), owner)) {
            askers.remove(&asker);
        }
    }

    /// How many owners the table points at.
    pub(crate) fn len(&self) -> usize {
        self.state().askers.values().map(Entries::len).sum()
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
        assert!(table.state().askers.is_empty());
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
    fn a_gone_owner_leaves_its_hold_count_and_never_its_name() {
        let (table, owners, lock) = setup();
        let me = Asker::current();
        let first = table.acquiring(&owners, (&lock, LOCK), me);
        let id = first.owner().id().clone();
        let holds = Arc::as_ptr(first.owner().holds(Side::Main));
        drop(first);
        let second = table.acquiring(&owners, (&lock, LOCK), me);
        assert_ne!(second.owner().id(), &id, "a name serves one owner");
        assert_eq!(
            Arc::as_ptr(second.owner().holds(Side::Main)),
            holds,
            "the hold count, pristine, serves the next"
        );
        // A hold count still referred to elsewhere is not passed on.
        let kept = second.owner().holds(Side::Main).clone();
        drop(second);
        let third = table.acquiring(&owners, (&lock, LOCK), me);
        assert!(!Arc::ptr_eq(third.owner().holds(Side::Main), &kept));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn rw_names_derive_from_the_owner() {
        let (_, owners, lock) = setup();
        let owner = Owner::single(&owners, &lock);
        assert_eq!(&**owner.write_field(), format!("{}:write", owner.id()));
        assert_eq!(
            &**owner.read_timeouts(),
            format!("{{lock}}:{}:rwlock_timeout", owner.id())
        );
    }
}
