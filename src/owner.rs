//! Owner identities: who holds a lock, as written into Redis.
//!
//! Redisson names a holder `<client-uuid>:<thread-id>`. Async tasks hop threads, so here the
//! second part is a per-client counter handed out when a lock handle is created: a handle and
//! its clones are one owner, two handles are two contenders.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

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
        format!("{}:{n}", self.client_text).into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_client_uuid_and_counter() {
        let id = Uuid::new_v4();
        let owners = Owners::new(id);
        assert_eq!(&*owners.next_owner(), format!("{id}:1"));
        assert_eq!(&*owners.next_owner(), format!("{id}:2"));
        assert_ne!(owners.next_request_id(), owners.next_request_id());
    }

    #[test]
    fn uuid_is_hyphenated_like_java() {
        let owner = Owners::new(Uuid::new_v4()).next_owner();
        assert_eq!(owner.split(':').next().unwrap().len(), 36);
    }
}
