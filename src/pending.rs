//! Background work under way on the client's thread (releases of dropped guards, repairs, the
//! undo of a handover, leaving a fair queue), so that the end of a process can wait for it:
//! [`Client::close`](crate::Client::close), and the drop of a client's last handle.

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
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// What each piece of work is about (a lock name).
    work: Map<u64, String>,
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
        if state.work.is_empty() {
            drop(state);
            self.pending.idle.notify_all();
            self.pending.idle_async.notify_waiters();
        }
    }
}

impl Pending {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a piece of work about `what` until the ticket is dropped.
    pub(crate) fn begin(self: &Arc<Self>, what: String) -> Ticket {
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        state.work.insert(id, what);
        Ticket {
            pending: self.clone(),
            id,
        }
    }

    /// What is still under way (sorted, one entry per piece of work).
    fn left(state: &State) -> Vec<String> {
        let mut left: Vec<String> = state.work.values().cloned().collect();
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

    /// As [`settled`](Self::settled), blocking the calling thread (for a drop).
    pub(crate) fn settled_blocking(&self, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut state = self.state();
        loop {
            if state.work.is_empty() {
                return Vec::new();
            }
            let now = Instant::now();
            if now >= deadline {
                return Self::left(&state);
            }
            state = self
                .idle
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_wait_ends_when_the_work_does() {
        let pending = Arc::new(Pending::default());
        let ticket = pending.begin("orders".into());
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
        let ticket = pending.begin("a".into());
        let _other = pending.begin("b".into());
        drop(ticket);
        assert_eq!(
            pending.settled(Duration::from_millis(20)).await,
            vec!["b".to_owned()]
        );
        drop(_other);
        assert!(pending.settled(Duration::from_secs(1)).await.is_empty());
    }
}
