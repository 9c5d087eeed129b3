//! Background work under way on the client's thread (releases of dropped guards, repairs, the
//! undo of a handover, leaving a fair queue), so that the end of a process can wait for it:
//! [`Client::close`](crate::Client::close), and the drop of a client's last handle. Next to it,
//! the holds still live, which the end of a process on a signal gives back.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::map::Map;

#[derive(Debug, Default)]
pub(crate) struct Pending {
    state: Mutex<State>,
    /// Signalled when the last piece of work ends (for a blocking wait).
    idle: Condvar,
    /// The same, for an async wait.
    idle_async: tokio::sync::Notify,
    /// The holds the client's guards stand for now.
    pub(crate) holds: crate::live::LiveHolds,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// What each piece of work is about (a lock name), and whether it goes over the client
    /// thread's own connection (it can finish while the caller's runtime is blocked).
    work: Map<u64, (Work, bool)>,
}

/// What a piece of work is, as a close that waits for it names it: said in words, or the
/// release of an object's hold (named only if somebody asks, so that an `unlock()` on the
/// fast path allocates nothing for it).
#[derive(Debug, Clone)]
pub(crate) enum Work {
    Said(String),
    /// The caller's own release of a hold of the object so named.
    Release(Arc<str>),
}

impl From<String> for Work {
    fn from(what: String) -> Self {
        Work::Said(what)
    }
}

impl std::fmt::Display for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Work::Said(what) => f.write_str(what),
            Work::Release(name) => write!(f, "the release of `{name}`"),
        }
    }
}

/// One piece of work; its end is its drop (finished, or dropped with the runtime).
#[derive(Debug)]
pub(crate) struct Ticket {
    pending: Arc<Pending>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.pending.state();
        state.work.remove(&self.id);
        let empty = state.work.is_empty();
        drop(state);
        self.pending.idle.notify_all();
        if empty {
            self.pending.idle_async.notify_waiters();
        }
    }
}

impl Pending {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a piece of work about `what` until the ticket is dropped; `own`: it goes over
    /// the client thread's own connection.
    pub(crate) fn begin(self: &Arc<Self>, what: impl Into<Work>, own: bool) -> Ticket {
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        state.work.insert(id, (what.into(), own));
        Ticket {
            pending: self.clone(),
            id,
        }
    }

    /// What is still under way (sorted, one entry per piece of work).
    fn left(state: &State) -> Vec<String> {
        let mut left: Vec<String> = state.work.values().map(|(w, _)| w.to_string()).collect();
        left.sort_unstable();
        left
    }

    /// Waits until no work is under way, at most `within`; returns what was left then.
    pub(crate) async fn settled(&self, within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let idle = self.idle_async.notified();
            {
                let state = self.state();
                if state.work.is_empty() {
                    return Vec::new();
                }
                if tokio::time::Instant::now() >= deadline {
                    return Self::left(&state);
                }
            }
            let _ = tokio::time::timeout_at(deadline, idle).await;
        }
    }

    /// As [`settled`](Self::settled), blocking the calling thread (for a drop), for the work
    /// over the client thread's own connection only: the rest may need the caller's runtime,
    /// which the wait blocks (a current-thread runtime), so it is not waited for (it goes on
    /// while the process does). Returns the work of the own connection left then.
    pub(crate) fn settled_blocking(&self, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut state = self.state();
        loop {
            let mut left: Vec<String> = (state.work.values())
                .filter(|(_, own)| *own)
                .map(|(w, _)| w.to_string())
                .collect();
            if left.is_empty() || Instant::now() >= deadline {
                left.sort_unstable();
                return left;
            }
            let now = Instant::now();
            state = self
                .idle
                .wait_timeout(state, deadline.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Shared by every clone of a [`Client`](crate::Client): its drop is the drop of the client's last handle.
pub(crate) struct LastHandle {
    pending: Arc<Pending>,
}

impl LastHandle {
    pub(crate) fn new(pending: Arc<Pending>) -> Self {
        LastHandle { pending }
    }
}

/// How long the drop of a client's last handle waits for its background work.
const FLUSH_ON_DROP: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for LastHandle {
    fn drop(&mut self) {
        // The background work runs on the client's thread, over its own connection for the
        // releases of dropped guards: blocking here does not stop it.
        let left = self.pending.settled_blocking(FLUSH_ON_DROP);
        warn_left(&left);
    }
}

pub(crate) fn warn_left(left: &[String]) {
    for what in left {
        tracing::warn!(work = %what, "the client is closing with this still under way; what it would have released frees itself when its lease runs out");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_wait_ends_when_the_work_does() {
        let pending = Arc::new(Pending::default());
        let ticket = pending.begin(String::from("orders"), true);
        assert_eq!(
            pending.settled_blocking(Duration::from_millis(10)),
            vec!["orders".to_owned()]
        );
        let waiter = {
            let pending = pending.clone();
            std::thread::spawn(move || pending.settled_blocking(Duration::from_secs(5)))
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(ticket);
        assert!(waiter.join().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_async_wait_ends_when_the_work_does() {
        let pending = Arc::new(Pending::default());
        let ticket = pending.begin(String::from("a"), true);
        let _other = pending.begin(String::from("b"), false);
        drop(ticket);
        assert_eq!(
            pending.settled(Duration::from_millis(20)).await,
            vec!["b".to_owned()]
        );
        drop(_other);
        assert!(pending.settled(Duration::from_secs(1)).await.is_empty());
    }
}
