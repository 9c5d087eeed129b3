//! What a lock handle and its clones share: the client, the kind's scripts for one name, and
//! the rule that says whose an acquire is: a new [owner](crate::lock::owner), or the owner of
//! the hold whose [scope](crate::lock::scope) it is made in. The acquire works through a
//! [holder](crate::lock::holder) of that owner.

use std::fmt;
use std::panic::Location;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::core::Core;
use crate::error::Result;
use crate::lock::handover::LocalWaiters;
use crate::lock::ops::LockOps;
use crate::lock::owner::Owner;
use crate::lock::replies::{Inspection, inspect_field, run_force_unlock};
use crate::lock::scope::{Nesting, ScopeKey, nesting};

/// A lock as a combinator names it when it fails as a part: its name and its client's server.
/// Kept while the part's guard is given back, so the release's error can name it too.
#[derive(Clone)]
pub(crate) struct PartOf(Arc<Handle>);

impl PartOf {
    pub(crate) fn of(handle: &Arc<Handle>) -> Self {
        PartOf(handle.clone())
    }

    /// `error`, as this part's failure.
    pub(crate) fn failed(&self, error: crate::error::Error) -> crate::error::Error {
        crate::error::Error::Part {
            name: self.0.name().to_owned(),
            address: self.0.core.address.to_string(),
            error: Box::new(error),
        }
    }
}

/// What the lock engine keeps per client, besides the client's shared machinery: how many
/// owners live, and its local waiters.
#[derive(Debug, Default)]
pub(crate) struct ClientLocks {
    /// Owners of reentrant kinds alive now (made by an acquire, kept by guards and repairs).
    pub(crate) live: Arc<AtomicUsize>,
    /// This client's waiters per lock, for releases that hand the lock over.
    pub(crate) local_waiters: Arc<LocalWaiters>,
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

    /// The error of a hold of this lock found gone.
    pub(crate) fn lost(&self) -> crate::error::Error {
        crate::error::Error::LockLost {
            name: self.name().to_owned(),
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

    /// A new owner, for an acquisition nested in no hold, called `at`.
    pub(crate) fn new_owner(&self, at: &'static Location<'static>) -> Arc<Owner> {
        let name = self.ops.name();
        if self.single {
            return Owner::single_at(&self.core.owners, name, at);
        }
        Owner::counted(&self.core.owners, name, &self.locks.live, at)
    }

    /// The hold of this lock whose scope the caller runs in, if any (never for an `RMutex`).
    /// Outside every scope: a task-local and a thread-local read.
    pub(crate) fn nesting(&self) -> Option<Nesting> {
        if self.single {
            return None;
        }
        nesting(self.scope_key())
    }

    /// The lock's state, and the holds on this side of it of the scope the caller runs in.
    pub(crate) async fn inspect(&self) -> Result<Inspection> {
        let owner = self.nesting().map(|n| n.owner);
        self.inspect_for(owner.as_deref()).await
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
