//! What a lock handle and its clones share: the client, the kind's scripts for one name, and
//! the rule that says whose an acquire is. An acquire finds the asking task's
//! [owner](crate::lock::owner) and works through a [holder](crate::lock::holder) of it.

use std::fmt;
use std::sync::Arc;

use crate::core::Core;
use crate::error::Result;
use crate::lock::holder::{Holder, LockOps};
use crate::lock::owner::{Acquiring, ClientLocks, Owner};
use crate::lock::replies::{Inspection, inspect_field, run_force_unlock};
use crate::owner::Asker;

pub(crate) struct Handle {
    pub(crate) core: Arc<Core>,
    pub(crate) locks: Arc<ClientLocks>,
    pub(crate) ops: Box<dyn LockOps>,
    /// Every acquire is an owner of its own (an `RMutex`, never reentrant), instead of the
    /// asking task's.
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
    /// A handle whose holds belong to the asking task.
    pub(crate) fn new(core: Arc<Core>, locks: Arc<ClientLocks>, ops: Box<dyn LockOps>) -> Self {
        Handle {
            core,
            locks,
            ops,
            single: false,
        }
    }

    /// A handle each of whose acquires is an owner of its own.
    pub(crate) fn single(core: Arc<Core>, locks: Arc<ClientLocks>, ops: Box<dyn LockOps>) -> Self {
        Handle {
            single: true,
            ..Self::new(core, locks, ops)
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.ops.name()
    }

    /// The owner an acquire of the caller works for, with the acquire counted: the asking
    /// task's (or thread's) owner of this lock on this client. One task-id read and one table
    /// lookup.
    pub(crate) fn acquiring(&self) -> Acquiring {
        let name = self.ops.name();
        if self.single {
            return Acquiring::single(Owner::single(&self.core.owners, name));
        }
        let key = (name, self.ops.family());
        self.locks
            .owners
            .acquiring(&self.core.owners, key, Asker::current())
    }

    /// The caller's owner of this lock, if it has one (an asker holding nothing may have none).
    pub(crate) fn current_owner(&self) -> Option<Arc<Owner>> {
        if self.single {
            return None;
        }
        let key = (&**self.ops.name(), self.ops.family());
        self.locks.owners.find(key, Asker::current())
    }

    /// A holder of `owner`'s holds through this handle's kind.
    pub(crate) fn holder(self: &Arc<Self>, owner: Arc<Owner>) -> Holder {
        Holder {
            handle: self.clone(),
            owner,
        }
    }

    /// The lock's state, and the caller's holds on this side of it.
    pub(crate) async fn inspect(&self) -> Result<Inspection> {
        let owner = self.current_owner();
        let nobody;
        let field = match &owner {
            Some(owner) => self.ops.field(owner),
            // The caller holds nothing: its holds are counted for a name no owner has, so Redis
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
