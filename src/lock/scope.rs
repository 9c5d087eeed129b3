//! Nesting: where an acquisition is one more hold of an acquisition already made.
//!
//! Every acquisition is an owner of its own (see [`owner`](crate::lock::owner)), unless it is
//! made inside the work of a hold of the same lock: inside `with_lock`'s future, inside a
//! [`LockGuard::scope`](crate::LockGuard::scope) future (both a [`Scoped`] future: a
//! `tokio::task_local!` set while, and only while, that future is polled, so futures polled
//! *beside* the work in the same task are outside it), or inside the blocking `with_lock`'s
//! closure (a thread-local scope for the closure's duration). A scope is a chain: work nested in
//! the scopes of locks A and then B is inside both.
//!
//! A scope takes effect where and while its future runs: each poll of a [`Scoped`] future puts
//! its holds inside the scope of the code polling it *then*, in the task polling it then. So a
//! scope future built inside A's work but run elsewhere (spawned, or awaited after A's work
//! ended) is not inside A, and `ga.scope(gb.scope(work))` is inside both. Every link of a chain
//! names the task it was entered in, and a chain is seen only by that task.
//!
//! The chain is looked up by client, lock name and [family](crate::lock::ops::LockOps::family):
//! a read acquisition inside a writer's scope finds the writer's owner (the script grants a
//! writer its own reads), and a write inside a reader's scope finds the reader's owner (the
//! script refuses the upgrade at once).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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
    entry: Entry,
    outer: Option<Scope>,
    /// The task the link was entered in (`None`: no task, a thread's own code). A task-local
    /// is seen by whatever its future polls, tasks of a `LocalSet` driven inside the work
    /// included, and those are not inside the hold's work.
    task: Option<tokio::task::Id>,
}

/// One hold's place in a scope: the lock it is of, and the hold acquisitions nest in.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    client: Uuid,
    family: &'static str,
    /// `None`: a hold nothing nests in (an `RMutex`'s), whose work is still inside the outer
    /// holds' scopes.
    hold: Option<Nesting>,
}

impl Entry {
    /// The scope entry of `hold`, of the lock `key` names.
    pub(crate) fn new(key: ScopeKey<'_>, hold: Option<Nesting>) -> Self {
        Entry {
            client: key.client,
            family: key.family,
            hold,
        }
    }

    /// Runs `work` on this thread inside this entry's hold, itself inside the thread's current
    /// scope, restoring the thread's scope after (also when `work` panics).
    pub(crate) fn run_here<T>(self, work: impl FnOnce() -> T) -> T {
        run_here(vec![self], work)
    }
}

/// Runs `work` on this thread inside `entries`' holds (the last innermost), themselves inside
/// the thread's current scope, restoring the thread's scope after (also when `work` panics).
/// No entries: `work` as it is.
pub(crate) fn run_here<T>(entries: Vec<Entry>, work: impl FnOnce() -> T) -> T {
    struct Restore(Option<ThreadScope>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            THREAD_SCOPE.with(|s| *s.borrow_mut() = outer);
        }
    }
    if entries.is_empty() {
        return work();
    }
    let task = tokio::task::try_id();
    let Some(scope) = Scope::chain(Scope::current(), &entries, task) else {
        return work();
    };
    let entered = ThreadScope { scope, task };
    let outer = THREAD_SCOPE.with(|s| s.borrow_mut().replace(entered));
    let _restore = Restore(outer);
    work()
}

/// The hold an acquisition nests in: its owner, the side of the lock it holds and the lease of
/// the hold. A nested acquisition is one more hold of it only while that hold stands: once it
/// was given back or lost, the acquisition finds it gone instead of asking the server for a
/// fresh grant under the old owner (which a second nested acquisition could then share). The
/// script checks it too, on the server, in the same call (see [`Want::nested`]).
///
/// [`Want::nested`]: crate::lock::ops::Want::nested
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
        let in_task = in_task.filter(|scope| scope.0.task == task);
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

    /// `outer` with `entry` innermost, entered in `task`.
    fn link(outer: Option<Scope>, entry: Entry, task: Option<tokio::task::Id>) -> Scope {
        Scope(Arc::new(Link { entry, outer, task }))
    }

    /// `outer` with `entries` inside it, the last innermost, entered in `task`.
    fn chain(
        outer: Option<Scope>,
        entries: &[Entry],
        task: Option<tokio::task::Id>,
    ) -> Option<Scope> {
        entries.iter().fold(outer, |outer, entry| {
            Some(Scope::link(outer, entry.clone(), task))
        })
    }

    /// The innermost hold of `key` in this chain, among the links entered in the task of the
    /// innermost one (a chain is only ever made of one task's links; this keeps it so).
    pub(crate) fn find(&self, key: ScopeKey<'_>) -> Option<Nesting> {
        let task = self.0.task;
        let mut link = Some(self);
        while let Some(Scope(l)) = link {
            if l.task != task {
                return None;
            }
            let e = &l.entry;
            if let Some(hold) = &e.hold
                && e.client == key.client
                && e.family == key.family
                && **hold.owner.lock_name() == *key.name
            {
                return Some(hold.clone());
            }
            link = l.outer.as_ref();
        }
        None
    }
}

/// The hold of `key` the caller runs inside of, if any.
pub(crate) fn nesting(key: ScopeKey<'_>) -> Option<Nesting> {
    Scope::current()?.find(key)
}

pin_project_lite::pin_project! {
    /// A future run inside the scopes of some holds: while, and only while, it is polled, and
    /// inside the scope of whatever polls it at that moment, in the task that polls it.
    #[derive(Debug)]
    pub(crate) struct Scoped<F> {
        entries: Vec<Entry>,
        // The chain of the last poll, and the scope it was put inside of: made again only when
        // a poll comes from another scope or task (one allocation per entry then).
        made: Option<(Option<Scope>, Option<Scope>)>,
        #[pin]
        work: F,
    }
}

impl<F: Future> Scoped<F> {
    /// `work`, run inside `entries`' holds (the last innermost).
    pub(crate) fn new(entries: Vec<Entry>, work: F) -> Self {
        Scoped {
            entries,
            made: None,
            work,
        }
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.entries.is_empty() {
            return this.work.poll(cx);
        }
        let outer = Scope::current();
        let task = tokio::task::try_id();
        let same = |made: &(Option<Scope>, Option<Scope>)| {
            let outer_same = match (&made.0, &outer) {
                (Some(a), Some(b)) => Arc::ptr_eq(&a.0, &b.0),
                (None, None) => true,
                _ => false,
            };
            outer_same && made.1.as_ref().is_some_and(|s| s.0.task == task)
        };
        if !this.made.as_ref().is_some_and(same) {
            let chain = Scope::chain(outer.clone(), this.entries, task);
            *this.made = Some((outer, chain));
        }
        match this.made.as_ref().and_then(|m| m.1.clone()) {
            Some(chain) => TASK_SCOPE.sync_scope(chain, || this.work.poll(cx)),
            None => this.work.poll(cx),
        }
    }
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

    fn entry(key: ScopeKey<'_>, owner: &Arc<Owner>) -> Entry {
        Entry::new(key, Some(hold(owner)))
    }

    fn scoped<F: Future>(key: ScopeKey<'_>, owner: &Arc<Owner>, work: F) -> Scoped<F> {
        Scoped::new(vec![entry(key, owner)], work)
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

    fn two_owners(client: Uuid) -> (Arc<Owner>, Arc<Owner>) {
        let owners = Owners::new(client);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        (Owner::single(&owners, &a), Owner::single(&owners, &b))
    }

    fn is(found: Option<Arc<Owner>>, owner: &Arc<Owner>) -> bool {
        found.is_some_and(|f| Arc::ptr_eq(&f, owner))
    }

    #[tokio::test]
    async fn a_scope_covers_its_work_and_not_the_futures_beside_it() {
        let client = Uuid::new_v4();
        let (owner, _) = two_owners(client);
        let inside = scoped(key(client, "a"), &owner, async {
            owner_in_scope(key(client, "a"))
        });
        let beside = async { owner_in_scope(key(client, "a")) };
        let (inside, beside) = tokio::join!(inside, beside);
        assert!(is(inside, &owner));
        assert!(beside.is_none(), "a sibling future is outside the scope");
        // Another client, name or family is another lock.
        let other = Uuid::new_v4();
        let found = scoped(key(client, "a"), &owner, async {
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
        let spawned = scoped(key(client, "a"), &owner, async {
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
        let (oa, ob) = two_owners(client);
        let found = scoped(key(client, "a"), &oa, async {
            scoped(key(client, "b"), &ob, async {
                (
                    owner_in_scope(key(client, "a")),
                    owner_in_scope(key(client, "b")),
                )
            })
            .await
        })
        .await;
        assert!(is(found.0, &oa));
        assert!(is(found.1, &ob));
    }

    #[tokio::test]
    async fn a_scope_future_composed_directly_is_inside_both() {
        // `ga.scope(gb.scope(work))`: B's future is built before A's scope is entered, and
        // still runs inside both.
        let client = Uuid::new_v4();
        let (oa, ob) = two_owners(client);
        let work = async {
            (
                owner_in_scope(key(client, "a")),
                owner_in_scope(key(client, "b")),
            )
        };
        let found = scoped(key(client, "a"), &oa, scoped(key(client, "b"), &ob, work)).await;
        assert!(is(found.0, &oa), "A's scope is kept");
        assert!(is(found.1, &ob));
    }

    #[tokio::test]
    async fn a_scope_future_spawned_from_inside_another_scope_is_only_inside_its_own() {
        let client = Uuid::new_v4();
        let (oa, ob) = two_owners(client);
        let (ob2, oa2) = (ob.clone(), oa.clone());
        let found = scoped(key(client, "a"), &oa, async move {
            // Built inside A's work, run by another task: inside B only.
            let b_work = scoped(key(client, "b"), &ob2, async move {
                tokio::task::yield_now().await;
                (
                    owner_in_scope(key(client, "a")),
                    owner_in_scope(key(client, "b")),
                )
            });
            let _keep = oa2;
            tokio::spawn(b_work).await.unwrap()
        })
        .await;
        assert!(found.0.is_none(), "the spawned task is not inside A's work");
        assert!(is(found.1, &ob));
    }

    // The scope future is returned from A's work unawaited on purpose.
    #[allow(clippy::async_yields_async)]
    #[tokio::test]
    async fn a_scope_future_built_in_one_scope_and_run_after_it_is_not_inside_it() {
        let client = Uuid::new_v4();
        let (oa, ob) = two_owners(client);
        let ob2 = ob.clone();
        let built = scoped(key(client, "a"), &oa, async move {
            Box::pin(scoped(key(client, "b"), &ob2, async move {
                (
                    owner_in_scope(key(client, "a")),
                    owner_in_scope(key(client, "b")),
                )
            }))
        })
        .await;
        let found = built.await;
        assert!(found.0.is_none(), "A's work had ended");
        assert!(is(found.1, &ob));
        // Polled once inside A, then finished outside it: outside A from then on.
        let (oa3, ob3) = (oa.clone(), ob.clone());
        let mut polled_in_a = false;
        let gate = Arc::new(tokio::sync::Notify::new());
        let opened = gate.clone();
        let mut fut = Box::pin(scoped(key(client, "b"), &ob3, async move {
            let first = owner_in_scope(key(client, "a"));
            opened.notified().await;
            (first, owner_in_scope(key(client, "a")))
        }));
        scoped(key(client, "a"), &oa3, async {
            tokio::select! {
                biased;
                _ = &mut fut => unreachable!("the gate is shut"),
                () = std::future::ready(()) => polled_in_a = true,
            }
        })
        .await;
        assert!(polled_in_a);
        gate.notify_one();
        let (first, later) = fut.await;
        assert!(is(first, &oa3), "inside A while A's work polled it");
        assert!(later.is_none(), "outside A once polled from outside it");
    }

    #[tokio::test]
    async fn a_chain_is_seen_only_by_the_task_it_was_entered_in() {
        let client = Uuid::new_v4();
        let (oa, _) = two_owners(client);
        let chain = Scope::chain(None, &[entry(key(client, "a"), &oa)], None).unwrap();
        let found = tokio::spawn(async move {
            let inner = Scope::link(
                Some(chain),
                Entry::new(key(client, "b"), None),
                tokio::task::try_id(),
            );
            inner.find(key(client, "a")).is_none()
        })
        .await
        .unwrap();
        assert!(found, "an outer link of another task is not looked at");
    }

    #[test]
    fn a_thread_scope_lasts_for_its_closure() {
        let client = Uuid::new_v4();
        let (owner, _) = two_owners(client);
        let inside = entry(key(client, "a"), &owner).run_here(|| owner_in_scope(key(client, "a")));
        assert!(inside.is_some());
        assert!(owner_in_scope(key(client, "a")).is_none());
        let other = std::thread::scope(|s| {
            entry(key(client, "a"), &owner).run_here(|| {
                s.spawn(|| owner_in_scope(key(client, "a")).is_none())
                    .join()
                    .unwrap()
            })
        });
        assert!(other, "another thread is outside");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            entry(key(client, "a"), &owner).run_here(|| panic!("work"))
        }));
        assert!(caught.is_err());
        assert!(owner_in_scope(key(client, "a")).is_none(), "restored");
    }

    #[test]
    fn a_thread_scope_is_not_seen_by_tasks_the_thread_polls() {
        let client = Uuid::new_v4();
        let (owner, _) = two_owners(client);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let task = rt.spawn(async move { owner_in_scope(key(client, "a")).is_none() });
        let (outside, in_block_on) = entry(key(client, "a"), &owner).run_here(|| {
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
        let (owner, _) = two_owners(client);
        let local = tokio::task::LocalSet::new();
        let seen = scoped(key(client, "a"), &owner, async {
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
        let (owner, _) = two_owners(client);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let found = rt.block_on(async {
            let owner = owner.clone();
            tokio::task::spawn_blocking(move || {
                entry(key(client, "a"), &owner).run_here(|| owner_in_scope(key(client, "a")))
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
                let (first, _) = two_owners(client);
                scoped(key(client, "a"), &first, async {
                    let inner = tokio::task::block_in_place(|| {
                        entry(key(client, "a"), &owner)
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
