//! What a lock handle and its clones share: the client, the kind's scripts for one name, and
//! the rule that says whose an acquire is: a new [owner](crate::lock::owner), or the owner of
//! the hold whose [scope](crate::lock::scope) it is made in. The acquire works through a
//! [holder](crate::lock::holder) of that owner.

use std::fmt;
use std::sync::Arc;

use crate::core::Core;
use crate::error::Result;
use crate::lock::holder::{Holder, LockOps};
use crate::lock::owner::{ClientLocks, Owner};
use crate::lock::replies::{Inspection, inspect_field, run_force_unlock};
use crate::lock::scope::{ScopeKey, owner_in_scope};

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

    /// A holder of `owner`'s holds through this handle's kind.
    pub(crate) fn holder(self: &Arc<Self>, owner: Arc<Owner>) -> Holder {
        Holder {
            handle: self.clone(),
            owner,
        }
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
