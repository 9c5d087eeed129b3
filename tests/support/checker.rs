//! Records every hold of a contended lock and proves no two overlapped.
#![allow(unreachable_pub)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// One hold: its fencing token and when it was held.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub token: u64,
    pub start: Instant,
    pub end: Instant,
}

#[derive(Debug, Default)]
pub struct Checker {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    holds: Mutex<Vec<Hold>>,
}

impl Checker {
    /// Call right after acquiring; returns the start time to pass to [`exit`](Self::exit).
    pub fn enter(&self) -> Instant {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(now, Ordering::SeqCst);
        Instant::now()
    }

    /// Call right before releasing.
    pub fn exit(&self, token: u64, start: Instant) {
        let end = Instant::now();
        self.inside.fetch_sub(1, Ordering::SeqCst);
        self.holds.lock().unwrap().push(Hold { token, start, end });
    }

    /// Asserts that holds never overlapped and tokens strictly increased from one to the next;
    /// returns the holds in order.
    pub fn verify(&self) -> Vec<Hold> {
        assert_eq!(
            self.max_inside.load(Ordering::SeqCst),
            1,
            "two holders were inside at once"
        );
        let mut holds = self.holds.lock().unwrap().clone();
        holds.sort_by_key(|h| h.start);
        for pair in holds.windows(2) {
            assert!(
                pair[0].end <= pair[1].start,
                "holds overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
            assert!(
                pair[0].token < pair[1].token,
                "fencing tokens did not increase: {} then {}",
                pair[0].token,
                pair[1].token
            );
        }
        holds
    }
}
