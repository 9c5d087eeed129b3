//! Owners: who a hold belongs to (the first thing an acquisition settles, see
//! [`handle`](crate::lock::handle)).
//!
//! A hold belongs to its acquisition: every acquire (`lock`, `try_lock*`, `lock_with_lease`, the
//! fenced, fair, read and write forms, the blocking twins) is an [`Owner`] of its own, with its
//! own name in Redis, so two acquisitions exclude each other whatever task, thread, handle or
//! future they come from. The one exception is nesting (see [`scope`](crate::lock::scope)): an
//! acquire made inside the work of a hold of the same lock, or from its guard, works for that
//! hold's owner and is one more hold of it. Holders and guards keep their owner alive; nothing
//! else does, so an owner goes with its last guard, acquire or repair.

use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Mutex as AsyncMutex;

use crate::lock::holds::Holds;
use crate::names;
use crate::owner::{Asker, Owners};

/// Which hold count of an owner an operation moves: a read-write lock's write side keeps its
/// own (the read side, and every other kind, use the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Main = 0,
    Write = 1,
}

/// One owner of one lock: one acquisition, and the holds nested in it.
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
    /// The task (else thread) whose acquire made the owner: a long wait for a hold taken in the
    /// waiter's own task is worth a warning (see [`self_wait`](crate::lock::self_wait)).
    asker: Asker,
    /// Where the acquire that made the owner was called: where its hold was taken, for the
    /// warnings, errors and operators that name it (holds nested in it keep it).
    at: &'static Location<'static>,
    /// The client's count of live owners, which this one is part of.
    counted: Option<Arc<AtomicUsize>>,
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
    /// A new owner of `lock`, for one acquisition of the caller, called at the caller's
    /// caller.
    #[cfg(test)]
    #[track_caller]
    pub(crate) fn single(owners: &Owners, lock: &Arc<str>) -> Arc<Self> {
        Self::single_at(owners, lock, Location::caller())
    }

    /// A new owner of `lock`, for one acquisition of the caller made `at`.
    pub(crate) fn single_at(
        owners: &Owners,
        lock: &Arc<str>,
        at: &'static Location<'static>,
    ) -> Arc<Self> {
        Arc::new(Self::new(owners, lock, None, at))
    }

    /// A new owner of `lock`, for an acquisition made `at`, counted among the client's live
    /// owners while it lives.
    pub(crate) fn counted(
        owners: &Owners,
        lock: &Arc<str>,
        live: &Arc<AtomicUsize>,
        at: &'static Location<'static>,
    ) -> Arc<Self> {
        live.fetch_add(1, Ordering::Relaxed);
        Arc::new(Self::new(owners, lock, Some(live.clone()), at))
    }

    fn new(
        owners: &Owners,
        lock: &Arc<str>,
        counted: Option<Arc<AtomicUsize>>,
        at: &'static Location<'static>,
    ) -> Self {
        Owner {
            id: owners.next_owner(),
            lock: lock.clone(),
            write_field: OnceLock::new(),
            timeouts: OnceLock::new(),
            main: Arc::default(),
            write: OnceLock::new(),
            asker: Asker::current(),
            at,
            counted,
        }
    }

    /// The name of the lock this owner holds.
    pub(crate) fn lock_name(&self) -> &Arc<str> {
        &self.lock
    }

    /// The owner's name in Redis.
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Where the acquisition that made this owner was asked from.
    pub(crate) fn asker(&self) -> Asker {
        self.asker
    }

    /// The owner's hold as the watchdog registers it: whose it is and where it was taken.
    pub(crate) fn site(&self) -> crate::watchdog::Site {
        crate::watchdog::Site {
            asker: self.asker,
            at: self.at,
            owner: self.id.clone(),
        }
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
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(live) = &self.counted {
            live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn every_owner_has_a_name_of_its_own_and_is_counted_while_it_lives() {
        let owners = Owners::new(Uuid::new_v4());
        let lock: Arc<str> = Arc::from("lock");
        let live = Arc::new(AtomicUsize::new(0));
        let here = Location::caller();
        let a = Owner::counted(&owners, &lock, &live, here);
        let b = Owner::counted(&owners, &lock, &live, here);
        assert_ne!(a.id(), b.id());
        assert_eq!(live.load(Ordering::Relaxed), 2);
        assert_eq!(a.asker(), Asker::current());
        let site = a.site();
        assert_eq!((site.at.file(), site.at.line()), (file!(), here.line()));
        assert_eq!((site.owner, site.asker), (a.id().clone(), a.asker()));
        drop((a, b));
        assert_eq!(live.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn rw_names_derive_from_the_owner() {
        let owners = Owners::new(Uuid::new_v4());
        let lock: Arc<str> = Arc::from("lock");
        let owner = Owner::single(&owners, &lock);
        assert_eq!(&**owner.write_field(), format!("{}:write", owner.id()));
        assert_eq!(
            &**owner.read_timeouts(),
            format!("{{lock}}:{}:rwlock_timeout", owner.id())
        );
    }
}
