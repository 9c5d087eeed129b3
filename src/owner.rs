//! Owner identities: the names written into Redis, and where an acquisition was asked from.
//!
//! Redisson names a holder `<client-uuid>:<thread-id>`: every thread is a contender. Here every
//! acquisition is (see [`lock::owner`](crate::lock)): its name in Redis is `<client-uuid>:<n>`,
//! `n` a per-client counter, so Java threads and ferrisson acquisitions contend alike. The
//! [`Asker`] (the Tokio task, else the thread) only tells where an acquisition was made, for
//! the warning (or, failing fast, the error) a wait for a hold of its own task gets (see
//! [`self_wait`](crate::lock::self_wait)).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

/// Where an acquisition is asked from: the running Tokio task, else the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Asker {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Asker {
    /// The caller: one thread-local read inside a task, two outside.
    pub(crate) fn current() -> Self {
        match tokio::task::try_id() {
            Some(id) => Asker::Task(id),
            None => Asker::Thread(std::thread::current().id()),
        }
    }
}

/// Hands out owner names and request ids for one client.
#[derive(Debug)]
pub(crate) struct Owners {
    client: Uuid,
    /// `client` as text, written once (formatting a UUID costs more than the rest of a name).
    client_text: Box<str>,
    next_owner: AtomicU64,
    next_request: AtomicU64,
}

impl Owners {
    pub(crate) fn new(client: Uuid) -> Self {
        Owners {
            client,
            client_text: client.to_string().into(),
            next_owner: AtomicU64::new(1),
            next_request: AtomicU64::new(1),
        }
    }

    pub(crate) fn client_id(&self) -> Uuid {
        self.client
    }

    /// A fresh owner name, `<client-uuid>:<n>`.
    pub(crate) fn next_owner(&self) -> Arc<str> {
        let n = self.next_owner.fetch_add(1, Ordering::Relaxed);
        self.named(n)
    }

    /// The name no owner of this client ever has (`n` = 0): asking Redis about it answers for
    /// an asker that holds nothing.
    pub(crate) fn nobody(&self) -> Arc<str> {
        self.named(0)
    }

    fn named(&self, n: u64) -> Arc<str> {
        let mut digits = itoa_buf(n);
        crate::names::shared(&[&self.client_text, ":", digits.as_str()])
    }

    /// A request id unique across clients and processes, for idempotent releases.
    pub(crate) fn next_request_id(&self) -> String {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(self.client_text.len() + 22);
        id.push_str(&self.client_text);
        // Within the capacity: the only allocation is the one above.
        let _ = write!(id, ":r{n}");
        id
    }
}

/// `n` in decimal, without allocating.
fn itoa_buf(n: u64) -> Digits {
    let mut digits = Digits {
        buf: [0; 20],
        start: 20,
    };
    let mut n = n;
    loop {
        digits.start -= 1;
        digits.buf[digits.start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return digits;
        }
    }
}

struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_str(&mut self) -> &str {
        // ASCII digits only.
        std::str::from_utf8(&self.buf[self.start..]).unwrap_or("0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_client_uuid_and_counter() {
        let id = Uuid::new_v4();
        let owners = Owners::new(id);
        assert_eq!(&*owners.next_owner(), format!("{id}:1"));
        assert_eq!(&*owners.next_owner(), format!("{id}:2"));
        assert_eq!(&*owners.nobody(), format!("{id}:0"));
        for n in [0, 7, 10, 99_999, u64::MAX] {
            assert_eq!(itoa_buf(n).as_str(), n.to_string());
        }
        assert_ne!(owners.next_request_id(), owners.next_request_id());
    }

    #[test]
    fn uuid_is_hyphenated_like_java() {
        let owner = Owners::new(Uuid::new_v4()).next_owner();
        assert_eq!(owner.split(':').next().unwrap().len(), 36);
    }

    #[test]
    fn the_asker_is_the_task_inside_one_and_the_thread_outside() {
        let outside = Asker::current();
        assert_eq!(outside, Asker::Thread(std::thread::current().id()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (a, b) = rt.block_on(async {
            let a = tokio::spawn(async { Asker::current() }).await.unwrap();
            let b = tokio::spawn(async { Asker::current() }).await.unwrap();
            (a, b)
        });
        assert!(matches!(a, Asker::Task(_)));
        assert_ne!(a, b, "two tasks are two askers");
        // A block_on future is no task: the thread asks.
        assert_eq!(rt.block_on(async { Asker::current() }), outside);
    }
}
