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
use std::sync::{Arc, OnceLock};

use uuid::Uuid;

use crate::lease::Lease;
use crate::lock::holds::Holds;
use crate::lock::owner::{Owner, Side};

tokio::task_local! {
    /// The holds whose work the current future runs inside of.
    static TASK_SCOPE: Scope;
}

thread_local! {
    /// The holds whose work the current thread runs inside of (the blocking API's closures),
    /// and the task id the thread had when it entered them (see [`ThreadScope`]).
    static THREAD_SCOPE: RefCell<Option<ThreadScope>> = const { RefCell::new(None) };
}

/// A thread's scope and the task id (`tokio::task::try_id`) of the code that entered it: `None`
/// on a plain thread, the blocking task's inside `spawn_blocking`, the task's inside
/// `block_in_place`. Only code with that same id is inside: a task the thread polls meanwhile
/// (one of a runtime the closure drives) has an id of its own.
#[derive(Clone, Debug)]
struct ThreadScope {
    scope: Scope,
    task: Option<tokio::task::Id>,
}

/// A chain of holds, innermost first.
#[derive(Clone, Debug)]
pub(crate) struct Scope(Arc<Link>);

#[derive(Debug)]
struct Link {
    client: Uuid,
    family: &'static str,
    /// `None`: a hold nothing nests in (an `RMutex`'s), whose work is still inside the outer
    /// holds' scopes.
    hold: Option<Nesting>,
    outer: Option<Scope>,
    /// The task the scope runs in, set when it starts running: a task-local is seen by
    /// whatever its future polls, tasks of a `LocalSet` driven inside the work included, and
    /// those are not inside the hold's work.
    task: OnceLock<Option<tokio::task::Id>>,
}

/// The hold an acquisition nests in: its owner, the side of the lock it holds and the lease of
/// the hold. A nested acquisition is one more hold of it only while that hold stands: once it
/// was given back or lost, the acquisition finds it gone instead of asking the server for a
/// fresh grant under the old owner (which a second nested acquisition could then share).
#[derive(Debug, Clone)]
pub(crate) struct Nesting {
    pub(crate) owner: Arc<Owner>,
    pub(crate) side: Side,
    pub(crate) lease: Arc<Lease>,
}

impl Nesting {
    /// Whether the hold stands as far as `holds`, its side's count, says: counted, on the same
    /// lease, not known lost.
    pub(crate) fn held_in(&self, holds: &Holds) -> bool {
        holds.live()
            && holds
                .lease
                .as_ref()
                .is_some_and(|l| Arc::ptr_eq(l, &self.lease))
    }
}

/// What a scope entry is looked up by: the client, the lock's name and its family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopeKey<'a> {
    pub(crate) client: Uuid,
    pub(crate) name: &'a str,
    pub(crate) family: &'static str,
}

impl Scope {
    /// The scope the caller runs inside of: the future's (in the task that runs it), or the
    /// thread's (code of the task id that entered it: a blocking closure, the `block_on`
    /// futures it runs, never a task that the thread polls meanwhile); the inner one when both.
    pub(crate) fn current() -> Option<Scope> {
        // Outside every scope (the fast path) this reads two thread-locals, not the task id.
        let in_task = TASK_SCOPE.try_with(Scope::clone).ok();
        let on_thread = THREAD_SCOPE.with(|s| s.borrow().clone());
        if in_task.is_none() && on_thread.is_none() {
            return None;
        }
        let task = tokio::task::try_id();
        let in_task = in_task.filter(|scope| scope.0.task.get() == Some(&task));
        let on_thread = on_thread.filter(|t| t.task == task).map(|t| t.scope);
        match (in_task, on_thread) {
            // Both: a blocking closure inside async work (`block_in_place`), or async work a
            // blocking closure runs (`block_on`). The one entered later has the other outside it.
            (Some(future), Some(thread)) if thread.encloses(&future) => Some(thread),
            (Some(future), Some(_)) => Some(future),
            (future, thread) => future.or(thread),
        }
    }

    /// Whether `other` is this chain or one of its outer scopes.
    fn encloses(&self, other: &Scope) -> bool {
        let mut link = Some(self);
        while let Some(scope) = link {
            if Arc::ptr_eq(&scope.0, &other.0) {
                return true;
            }
            link = scope.0.outer.as_ref();
        }
        false
    }

    /// `outer` with `hold` of `key` innermost.
    pub(crate) fn within(outer: Option<Scope>, key: ScopeKey<'_>, hold: Option<Nesting>) -> Scope {
        Scope(Arc::new(Link {
            client: key.client,
            family: key.family,
            hold,
            outer,
            task: OnceLock::new(),
        }))
    }

    /// The innermost hold of `key` in this chain.
    pub(crate) fn find(&self, key: ScopeKey<'_>) -> Option<Nesting> {
        let mut link = Some(self);
        while let Some(Scope(l)) = link {
            if let Some(hold) = &l.hold
                && l.client == key.client
                && l.family == key.family
                && **hold.owner.lock_name() == *key.name
            {
                return Some(hold.clone());
            }
            link = l.outer.as_ref();
        }
        None
    }

    /// Runs `work` inside this scope (a task-local: futures beside it are outside), in the
    /// task that first polls it.
    pub(crate) async fn run<F: Future>(self, work: F) -> F::Output {
        self.0.task.get_or_init(tokio::task::try_id);
        TASK_SCOPE.scope(self, work).await
    }

    /// Runs `work` on this thread inside this scope, restoring the thread's scope after (also
    /// when `work` panics).
    pub(crate) fn run_here<T>(self, work: impl FnOnce() -> T) -> T {
        struct Restore(Option<ThreadScope>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let outer = self.0.take();
                THREAD_SCOPE.with(|s| *s.borrow_mut() = outer);
            }
        }
        let entered = ThreadScope {
            scope: self,
            task: tokio::task::try_id(),
        };
        let outer = THREAD_SCOPE.with(|s| s.borrow_mut().replace(entered));
        let _restore = Restore(outer);
        work()
    }
}

/// The hold of `key` the caller runs inside of, if any.
pub(crate) fn nesting(key: ScopeKey<'_>) -> Option<Nesting> {
    Scope::current()?.find(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::Owners;

    fn hold(owner: &Arc<Owner>) -> Nesting {
        let lease = Lease::new(1, tokio::time::Instant::now(), 1000);
        Nesting {
            owner: owner.clone(),
            side: Side::Main,
            lease: Arc::new(lease),
        }
    }

    fn entered(key: ScopeKey<'_>, owner: &Arc<Owner>) -> Scope {
        Scope::within(Scope::current(), key, Some(hold(owner)))
    }

    fn owner_in_scope(key: ScopeKey<'_>) -> Option<Arc<Owner>> {
        nesting(key).map(|n| n.owner)
    }

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
        let scope = entered(key(client, "a"), &owner);
        let inside = scope.run(async { owner_in_scope(key(client, "a")) });
        let beside = async { owner_in_scope(key(client, "a")) };
        let (inside, beside) = tokio::join!(inside, beside);
        assert!(Arc::ptr_eq(&inside.unwrap(), &owner));
        assert!(beside.is_none(), "a sibling future is outside the scope");
        // Another client, name or family is another lock.
        let other = Uuid::new_v4();
        let s = entered(key(client, "a"), &owner);
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
        let spawned = entered(key(client, "a"), &owner)
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
        let found = entered(key(client, "a"), &oa)
            .run(async {
                entered(key(client, "b"), &ob)
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
        let inside =
            entered(key(client, "a"), &owner).run_here(|| owner_in_scope(key(client, "a")));
        assert!(inside.is_some());
        assert!(owner_in_scope(key(client, "a")).is_none());
        let other = std::thread::scope(|s| {
            entered(key(client, "a"), &owner).run_here(|| {
                s.spawn(|| owner_in_scope(key(client, "a")).is_none())
                    .join()
                    .unwrap()
            })
        });
        assert!(other, "another thread is outside");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            entered(key(client, "a"), &owner).run_here(|| panic!("work"))
        }));
        assert!(caught.is_err());
        assert!(owner_in_scope(key(client, "a")).is_none(), "restored");
    }

    #[test]
    fn a_thread_scope_is_not_seen_by_tasks_the_thread_polls() {
        let client = Uuid::new_v4();
        let owners = Owners::new(client);
        let name: Arc<str> = Arc::from("a");
        let owner = Owner::single(&owners, &name);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let task = rt.spawn(async move { owner_in_scope(key(client, "a")).is_none() });
        let (outside, in_block_on) = entered(key(client, "a"), &owner).run_here(|| {
            let outside = rt.block_on(task).unwrap();
            (
                outside,
                rt.block_on(async { owner_in_scope(key(client, "a")) }),
            )
        });
        assert!(
            outside,
            "a task polled inside the closure is not inside the hold's work"
        );
        assert!(in_block_on.is_some(), "the closure's own blocking call is");
    }

    #[tokio::test]
    async fn a_task_scope_is_not_seen_by_a_local_set_the_work_drives() {
        let client = Uuid::new_v4();
        let owners = Owners::new(client);
        let name: Arc<str> = Arc::from("a");
        let owner = Owner::single(&owners, &name);
        let local = tokio::task::LocalSet::new();
        let seen = entered(key(client, "a"), &owner)
            .run(async {
                let inner = local.spawn_local(async move { owner_in_scope(key(client, "a")) });
                let own = owner_in_scope(key(client, "a"));
                (local.run_until(inner).await.unwrap(), own)
            })
            .await;
        assert!(
            seen.0.is_none(),
            "a local task is not inside the hold's work"
        );
        assert!(seen.1.is_some());
    }

    #[test]
    fn a_thread_scope_covers_a_spawn_blocking_closure_and_not_tasks() {
        let client = Uuid::new_v4();
        let owners = Owners::new(client);
        let name: Arc<str> = Arc::from("a");
        let owner = Owner::single(&owners, &name);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let found = rt.block_on(async {
            let owner = owner.clone();
            tokio::task::spawn_blocking(move || {
                entered(key(client, "a"), &owner).run_here(|| owner_in_scope(key(client, "a")))
            })
            .await
            .unwrap()
        });
        assert!(found.is_some(), "a spawn_blocking closure's own scope");
        // Inside a task, a blocking closure (`block_in_place`) nested in async work: the inner
        // one, the thread's, is found; the async work's own scope after it.
        let (inner, outer) = rt.block_on(async {
            let owner = owner.clone();
            tokio::spawn(async move {
                let other: Arc<str> = Arc::from("a");
                let first = Owner::single(&Owners::new(client), &other);
                entered(key(client, "a"), &first)
                    .run(async {
                        let inner = tokio::task::block_in_place(|| {
                            entered(key(client, "a"), &owner)
                                .run_here(|| owner_in_scope(key(client, "a")))
                        });
                        (inner, owner_in_scope(key(client, "a")))
                    })
                    .await
            })
            .await
            .unwrap()
        });
        assert!(Arc::ptr_eq(&inner.unwrap(), &owner));
        assert!(!Arc::ptr_eq(&outer.unwrap(), &owner));
    }
}
