//! What a lock handle and its clones share: the client, the kind's scripts for one name, and
//! the rule that says whose an acquire is: a new [owner](crate::lock::owner), or the owner of
//! the hold whose [scope](crate::lock::scope) it is made in. The acquire works through a
//! [holder](crate::lock::holder) of that owner.

use std::fmt;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::error::Result;
use crate::lock::handover::LocalWaiters;
use crate::lock::ops::LockOps;
use crate::lock::owner::Owner;
use crate::lock::replies::{Inspection, inspect_field, run_force_unlock};
use crate::lock::scope::{ScopeKey, owner_in_scope};

/// What the lock engine keeps per client, besides the client's shared machinery: how many
/// owners live, and its local waiters.
#[derive(Debug, Default)]
pub(crate) struct ClientLocks {
    /// Owners of reentrant kinds alive now (made by an acquire, kept by guards and repairs).
    pub(crate) live: Arc<AtomicUsize>,
    /// This client's waiters per lock, for releases that hand the lock over.
    pub(crate) local_waiters: Arc<LocalWaiters>,
    /// When each lock last got the hint that a wait is for a hold of the waiter's own task.
    hinted: Mutex<Vec<(Arc<str>, Instant)>>,
}

/// How often one lock gets the own-task hint at most: a dispatcher that hands its guards to
/// workers waits for its own task's holds as meant, and once is enough to tell it.
const HINT_EVERY: Duration = Duration::from_secs(10);

impl ClientLocks {
    /// Whether lock `name` is due the own-task hint (at most once per [`HINT_EVERY`]); the
    /// rare path of a wait's first refusal for a hold of its own task.
    pub(crate) fn hint_due(&self, name: &Arc<str>) -> bool {
        let now = Instant::now();
        let mut hinted = self.hinted.lock().unwrap_or_else(|e| e.into_inner());
        hinted.retain(|(_, at)| now.duration_since(*at) < HINT_EVERY);
        if hinted.iter().any(|(n, _)| n == name) {
            return false;
        }
        hinted.push((name.clone(), now));
        true
    }
}

pub(crate) struct Handle {
    pub(crate) core: Arc<Core>,
    pub(crate) locks: Arc<ClientLocks>,
    pub(crate) ops: Box<dyn LockOps>,
    /// Never reentrant (an `RMutex`): even an acquire inside a hold's scope is an owner of its
    /// own.
    single: bool,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("name", self.ops.name())
            .field("kind", &self.ops.label())
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// A handle whose acquires nest in the scopes of their holds.
    pub(crate) fn new(core: Arc<Core>, locks: Arc<ClientLocks>, ops: Box<dyn LockOps>) -> Self {
        Handle {
            core,
            locks,
            ops,
            single: false,
        }
    }

    /// A handle each of whose acquires is an owner of its own, nested or not.
    pub(crate) fn single(core: Arc<Core>, locks: Arc<ClientLocks>, ops: Box<dyn LockOps>) -> Self {
        Handle {
            single: true,
            ..Self::new(core, locks, ops)
        }
    }

    /// Whether acquires of this handle may nest (all but an `RMutex`'s).
    pub(crate) fn reentrant(&self) -> bool {
        !self.single
    }

    pub(crate) fn name(&self) -> &str {
        self.ops.name()
    }

    /// Where this lock's holds are found in a scope.
    pub(crate) fn scope_key(&self) -> ScopeKey<'_> {
        ScopeKey {
            client: self.core.owners.client_id(),
            name: self.ops.name(),
            family: self.ops.family(),
        }
    }

    /// The owner an acquire of the caller works for: the owner of the hold whose scope the
    /// caller runs in, else a new one. One task-local read (and a thread-local one outside any
    /// scope).
    pub(crate) fn acquiring(&self) -> Arc<Owner> {
        if let Some(owner) = self.owner_in_scope() {
            return owner;
        }
        let name = self.ops.name();
        if self.single {
            return Owner::single(&self.core.owners, name);
        }
        Owner::counted(&self.core.owners, name, &self.locks.live)
    }

    /// The owner of the hold whose scope the caller runs in, if any.
    pub(crate) fn owner_in_scope(&self) -> Option<Arc<Owner>> {
        if self.single {
            return None;
        }
        owner_in_scope(self.scope_key())
    }

    /// The lock's state, and the holds on this side of it of the scope the caller runs in.
    pub(crate) async fn inspect(&self) -> Result<Inspection> {
        self.inspect_for(self.owner_in_scope().as_deref()).await
    }

    /// The lock's state, and `owner`'s holds on this side of it.
    pub(crate) async fn inspect_for(&self, owner: Option<&Owner>) -> Result<Inspection> {
        let nobody;
        let field = match owner {
            Some(owner) => self.ops.field(owner),
            // The caller runs in no hold's scope: its holds are counted for a name no owner has, so Redis
            // still says whether the lock is taken (and whether the key is a lock at all).
            None => {
                nobody = self.core.owners.nobody();
                &*nobody
            }
        };
        inspect_field(&self.core, self.name(), field).await
    }

    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let result = run_force_unlock(&self.core, &self.ops.force_unlock(), self.name()).await;
        if self.ops.hands_over() {
            // Whether or not the reply came, the local holder's view may be wrong now.
            self.locks.local_waiters.forget(self.name());
        }
        result
    }
}
