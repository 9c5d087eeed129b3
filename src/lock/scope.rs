//! Nesting: where an acquisition is one more hold of an acquisition already made.
//!
//! Every acquisition is an owner of its own (see [`owner`](crate::lock::owner)), unless it is
//! made inside the work of a hold of the same lock: inside `with_lock`'s future, inside a
//! [`LockGuard::scope`](crate::LockGuard::scope) future (both a `tokio::task_local!` scope, so
//! futures polled *beside* the work in the same task are outside it), or inside the blocking
//! `with_lock`'s closure (a thread-local scope for the closure's duration). A scope is a chain:
//! work nested in the scopes of locks A and then B is inside both.
//!
//! The chain is looked up by client, lock name and [family](crate::lock::ops::LockOps::family):
//! a read acquisition inside a writer's scope finds the writer's owner (the script grants a
//! writer its own reads), and a write inside a reader's scope finds the reader's owner (the
//! script refuses the upgrade at once).

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;

use crate::lock::owner::Owner;

tokio::task_local! {
    /// The holds whose work the current future runs inside of.
    static TASK_SCOPE: Scope;
}

thread_local! {
    /// The holds whose work the current thread runs inside of (the blocking API's closures).
    static THREAD_SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// A chain of holds, innermost first.
#[derive(Clone, Debug)]
pub(crate) struct Scope(Arc<Link>);

#[derive(Debug)]
struct Link {
    client: Uuid,
    name: Arc<str>,
    family: &'static str,
    owner: Arc<Owner>,
    outer: Option<Scope>,
}

/// What a scope entry is looked up by: the client, the lock's name and its family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopeKey<'a> {
    pub(crate) client: Uuid,
    pub(crate) name: &'a str,
    pub(crate) family: &'static str,
}

impl Scope {
    /// The scope the caller runs inside of: the future's, else the thread's.
    pub(crate) fn current() -> Option<Scope> {
        if let Ok(scope) = TASK_SCOPE.try_with(Scope::clone) {
            return Some(scope);
        }
        THREAD_SCOPE.with(|s| s.borrow().clone())
    }

    /// The current scope with `owner`'s hold of `key` innermost.
    #[cfg(test)]
    pub(crate) fn entered(key: ScopeKey<'_>, name: &Arc<str>, owner: &Arc<Owner>) -> Scope {
        Self::within(Scope::current(), key, name, owner)
    }

    /// `outer` with `owner`'s hold of `key` innermost.
    pub(crate) fn within(
        outer: Option<Scope>,
        key: ScopeKey<'_>,
        name: &Arc<str>,
        owner: &Arc<Owner>,
    ) -> Scope {
        Scope(Arc::new(Link {
            client: key.client,
            name: name.clone(),
            family: key.family,
            owner: owner.clone(),
            outer,
        }))
    }

    /// The owner of the innermost hold of `key` in this chain.
    pub(crate) fn find(&self, key: ScopeKey<'_>) -> Option<Arc<Owner>> {
        let mut link = Some(self);
        while let Some(Scope(l)) = link {
            if l.client == key.client && l.family == key.family && *l.name == *key.name {
                return Some(l.owner.clone());
            }
            link = l.outer.as_ref();
        }
        None
    }

    /// Runs `work` inside this scope (a task-local: futures beside it are outside).
    pub(crate) fn run<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        TASK_SCOPE.scope(self, work)
    }

    /// Runs `work` on this thread inside this scope, restoring the thread's scope after (also
    /// when `work` panics).
    pub(crate) fn run_here<T>(self, work: impl FnOnce() -> T) -> T {
        struct Restore(Option<Scope>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let outer = self.0.take();
                THREAD_SCOPE.with(|s| *s.borrow_mut() = outer);
            }
        }
        let outer = THREAD_SCOPE.with(|s| s.borrow_mut().replace(self));
        let _restore = Restore(outer);
        work()
    }
}

/// The owner of `key` in the caller's current scope, if it runs inside one of its holds.
pub(crate) fn owner_in_scope(key: ScopeKey<'_>) -> Option<Arc<Owner>> {
    Scope::current()?.find(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::Owners;

    fn key(client: Uuid, name: &str) -> ScopeKey<'_> {
        ScopeKey {
            client,
            name,
            family: "lock",
        }
    }

    #[tokio::test]
    async fn a_scope_covers_its_work_and_not_the_futures_beside_it() {
        let client = Uuid::new_v4();
        let owners = Owners::new(client);
        let name: Arc<str> = Arc::from("a");
        let owner = Owner::single(&owners, &name);
        let scope = Scope::entered(key(client, "a"), &name, &owner);
        let inside = scope.run(async { owner_in_scope(key(client, "a")) });
        let beside = async { owner_in_scope(key(client, "a")) };
        let (inside, beside) = tokio::join!(inside, beside);
        assert!(Arc::ptr_eq(&inside.unwrap(), &owner));
        assert!(beside.is_none(), "a sibling future is outside the scope");
        // Another client, name or family is another lock.
        let other = Uuid::new_v4();
        let s = Scope::entered(key(client, "a"), &name, &owner);
        let found = s
            .run(async {
                (
                    owner_in_scope(key(other, "a")),
                    owner_in_scope(key(client, "b")),
                    owner_in_scope(ScopeKey {
                        client,
                        name: "a",
                        family: "fair",
                    }),
                )
            })
            .await;
        assert!(found.0.is_none() && found.1.is_none() && found.2.is_none());
        // A spawned task is outside.
        let spawned = Scope::entered(key(client, "a"), &name, &owner)
            .run(async {
                tokio::spawn(async move { owner_in_scope(key(client, "a")) })
                    .await
                    .unwrap()
            })
            .await;
        assert!(spawned.is_none());
    }

    #[tokio::test]
    async fn scopes_nest() {
        let client = Uuid::new_v4();
        let owners = Owners::new(client);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let (oa, ob) = (Owner::single(&owners, &a), Owner::single(&owners, &b));
        let found = Scope::entered(key(client, "a"), &a, &oa)
            .run(async {
                Scope::entered(key(client, "b"), &b, &ob)
                    .run(async {
                        (
                            owner_in_scope(key(client, "a")),
                            owner_in_scope(key(client, "b")),
                        )
                    })
                    .await
            })
            .await;
        assert!(Arc::ptr_eq(&found.0.unwrap(), &oa));
        assert!(Arc::ptr_eq(&found.1.unwrap(), &ob));
    }

    #[test]
    fn a_thread_scope_lasts_for_its_closure() {
        let client = Uuid::new_v4();
        let owners = Owners::new(client);
        let name: Arc<str> = Arc::from("a");
        let owner = Owner::single(&owners, &name);
        let inside = Scope::entered(key(client, "a"), &name, &owner)
            .run_here(|| owner_in_scope(key(client, "a")));
        assert!(inside.is_some());
        assert!(owner_in_scope(key(client, "a")).is_none());
        let other = std::thread::scope(|s| {
            Scope::entered(key(client, "a"), &name, &owner).run_here(|| {
                s.spawn(|| owner_in_scope(key(client, "a")).is_none())
                    .join()
                    .unwrap()
            })
        });
        assert!(other, "another thread is outside");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Scope::entered(key(client, "a"), &name, &owner).run_here(|| panic!("work"))
        }));
        assert!(caught.is_err());
        assert!(owner_in_scope(key(client, "a")).is_none(), "restored");
    }
}
