//! The holds a client's guards stand for now, so that a signal's shutdown (see
//! [`Client::close_on_signal`](crate::Client::close_on_signal)) can give every one of them back
//! at once while the guards are still alive in the interrupted code.
//!
//! Only weak references are listed: the list keeps no guard, handle, owner or client alive, and
//! a hold its guards gave back meanwhile is skipped. A lock's hold is listed while a guard of
//! its lease lives (see [`Holder`](crate::lock::holder::Holder)), a permit guard's permits from
//! their grant to their release.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::lease::Lease;
use crate::map::Map;

/// A give-back under way.
pub(crate) type GivingBack = Pin<Box<dyn Future<Output = crate::error::Result<()>> + Send>>;

/// What gives back one kind of hold: a lock handle (for one of its owners), a permit guard's
/// permits.
pub(crate) trait GiveBack: Send + Sync + 'static {
    /// The object's name, for what is logged and reported.
    fn name(&self) -> &str;

    /// Gives back on the server every hold of this object that `whose` (a lock's owner; `None`
    /// for permits) has, whatever their count.
    fn give_back(self: Arc<Self>, whose: Option<Arc<dyn Any + Send + Sync>>) -> GivingBack;
}

/// One live hold.
pub(crate) struct Hold {
    pub(crate) by: Weak<dyn GiveBack>,
    /// A lock's owner (a type the lock engine knows; this module does not).
    pub(crate) whose: Option<Weak<dyn Any + Send + Sync>>,
    /// Marked lost once given back: the guards' holders learn that the hold is gone.
    pub(crate) lease: Weak<Lease>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.by.upgrade().map(|by| by.name().to_owned());
        f.debug_struct("Hold")
            .field("name", &name)
            .finish_non_exhaustive()
    }
}

impl Hold {
    /// The give-back of this hold, unless its object is gone (its guards with it).
    pub(crate) fn giving_back(&self) -> Option<(String, GivingBack)> {
        let by = self.by.upgrade()?;
        let whose = match &self.whose {
            Some(whose) => Some(whose.upgrade()?),
            None => None,
        };
        Some((by.name().to_owned(), by.give_back(whose)))
    }
}

/// The list of one client.
#[derive(Debug, Default)]
pub(crate) struct LiveHolds {
    state: Mutex<State>,
    /// Told when the list becomes empty (for a signal's drain).
    emptied: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    holds: Map<u64, Hold>,
    next: u64,
    /// Set by [`LiveHolds::close`]: holds granted from now on are given back at once, and
    /// whether their guards are to learn they are lost.
    closed: Option<Lose>,
}

/// Whether the guards of a hold given back are told it is lost (their holders go on) or not
/// (the process is about to end, and the holders' reactions would only race its exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lose {
    Tell,
    Quietly,
}

impl LiveHolds {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists `hold`, under the id returned. Once the list is closed, `hold` is handed back
    /// instead, for the caller to give back at once as the list's closing said; its id is then
    /// listed nowhere.
    pub(crate) fn list(&self, hold: Hold) -> (u64, Option<(Hold, Lose)>) {
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        if let Some(lose) = state.closed {
            return (id, Some((hold, lose)));
        }
        state.holds.insert(id, hold);
        (id, None)
    }

    /// The hold `id` was given back (or never listed): forgets it.
    pub(crate) fn unlist(&self, id: u64) {
        let mut state = self.state();
        state.holds.remove(&id);
        let empty = state.holds.is_empty();
        drop(state);
        if empty {
            self.emptied.notify_waiters();
        }
    }

    /// Whether no hold is listed now.
    pub(crate) fn is_empty(&self) -> bool {
        self.state().holds.is_empty()
    }

    /// Resolves once no hold is listed (at once when none is).
    pub(crate) async fn emptied(&self) {
        loop {
            let emptied = self.emptied.notified();
            let mut emptied = std::pin::pin!(emptied);
            // Registered before the look, so an unlist between the two is not missed.
            emptied.as_mut().enable();
            if self.is_empty() {
                return;
            }
            emptied.await;
        }
    }

    /// Closes the list and returns every hold on it: from now on a new hold is not listed but
    /// handed back to be given back at once, `lose` saying how (see [`list`](Self::list)).
    pub(crate) fn close(&self, lose: Lose) -> Vec<Hold> {
        let mut state = self.state();
        state.closed.get_or_insert(lose);
        let holds = state.holds.drain().map(|(_, hold)| hold).collect();
        drop(state);
        self.emptied.notify_waiters();
        holds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    impl GiveBack for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn give_back(self: Arc<Self>, _whose: Option<Arc<dyn Any + Send + Sync>>) -> GivingBack {
            Box::pin(async { Ok(()) })
        }
    }

    fn hold(by: &Arc<Named>, lease: &Arc<Lease>) -> Hold {
        let by: Arc<dyn GiveBack> = by.clone();
        Hold {
            by: Arc::downgrade(&by),
            whose: None,
            lease: Arc::downgrade(lease),
        }
    }

    #[tokio::test]
    async fn emptied_resolves_once_the_last_hold_is_unlisted() {
        let live = Arc::new(LiveHolds::default());
        live.emptied().await; // none listed: at once
        let lease = Arc::new(Lease::new(1, tokio::time::Instant::now(), 1000));
        let (a, b) = (Arc::new(Named("a")), Arc::new(Named("b")));
        let (id_a, _) = live.list(hold(&a, &lease));
        let (id_b, _) = live.list(hold(&b, &lease));
        let waiter = tokio::spawn({
            let live = live.clone();
            async move { live.emptied().await }
        });
        live.unlist(id_a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "b is still listed");
        live.unlist(id_b);
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("told when the list became empty")
            .unwrap();
        assert!(live.is_empty());
    }

    #[test]
    fn a_closed_list_hands_new_holds_back_and_skips_the_gone() {
        let live = LiveHolds::default();
        let lease = Arc::new(Lease::new(1, tokio::time::Instant::now(), 1000));
        let (a, b) = (Arc::new(Named("a")), Arc::new(Named("b")));
        let (id_a, none) = live.list(hold(&a, &lease));
        assert!(none.is_none());
        let (id_b, _) = live.list(hold(&b, &lease));
        assert_ne!(id_a, id_b);
        live.unlist(id_a);
        drop(b);
        let listed = live.close(Lose::Tell);
        assert_eq!(listed.len(), 1, "a was given back by its guard");
        assert!(listed[0].giving_back().is_none(), "b's object is gone");
        let (_, handed) = live.list(hold(&a, &lease));
        let (hold, lose) = handed.expect("closed: handed back");
        assert_eq!(lose, Lose::Tell);
        assert_eq!(hold.giving_back().unwrap().0, "a");
        assert!(live.close(Lose::Quietly).is_empty());
    }
}
