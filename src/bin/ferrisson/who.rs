//! Who a client id is: the identities live clients record (`Client::clients`,
//! `Client::identity_of`), shown short (`app@host:pid`) or long, and added to JSON output.

use std::collections::HashMap;

use ferrisson::inspect::Snapshot;
use ferrisson::{Client, ClientIdentity};
use serde_json::Value;
use uuid::Uuid;

use crate::text::{clean, span};

/// The identities known for this command, by client id.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    by_id: HashMap<Uuid, ClientIdentity>,
    /// This tool's own client, marked as such.
    own: Option<Uuid>,
}

impl Directory {
    /// Every live client's identity (a `SCAN` of every master).
    pub(crate) async fn all(client: &Client) -> ferrisson::Result<Self> {
        Ok(Self::of_list(client, client.clients().await?))
    }

    /// The identities of `ids` only, one read each (no `SCAN`: an ACL user without `+scan`
    /// can still `inspect`).
    ///
    /// A user that may not read identities still inspects: the holders are shown by client id,
    /// and a line on stderr says why.
    pub(crate) async fn of(client: &Client, ids: &[Uuid]) -> ferrisson::Result<Self> {
        let read = futures::future::try_join_all(ids.iter().map(|id| client.identity_of(*id)));
        match read.await {
            Ok(found) => Ok(Self::of_list(client, found.into_iter().flatten().collect())),
            Err(ferrisson::Error::PermissionDenied { .. }) => {
                eprintln!(
                    "ferrisson: this ACL user may not read client identities \
                     (~ferrisson_client:*, read-only %R~ on Redis 7): holders are shown by client id"
                );
                Ok(Self::of_list(client, Vec::new()))
            }
            Err(e) => Err(e),
        }
    }

    fn of_list(client: &Client, list: Vec<ClientIdentity>) -> Self {
        Directory {
            by_id: list.into_iter().map(|c| (c.id, c)).collect(),
            own: Some(client.id()),
        }
    }

    /// The identities, oldest client first.
    pub(crate) fn list(&self) -> Vec<&ClientIdentity> {
        let mut all: Vec<&ClientIdentity> = self.by_id.values().collect();
        all.sort_by_key(|c| (c.started_ms, c.id));
        all
    }

    pub(crate) fn get(&self, id: Uuid) -> Option<&ClientIdentity> {
        self.by_id.get(&id)
    }

    pub(crate) fn is_own(&self, id: Uuid) -> bool {
        self.own == Some(id)
    }

    /// Fills in where each hold of `snapshot` was taken, as its client's identity says (holds
    /// of this tool's own client say so already; so do holds younger than a second nowhere).
    pub(crate) fn fill_places(&self, snapshot: &mut Snapshot) {
        let name = snapshot.name().to_owned();
        let fill = |client: Option<Uuid>, owner: &str, at: &mut Option<String>| {
            if at.is_none() {
                let known = client.and_then(|id| self.get(id));
                *at = known
                    .and_then(|c| c.acquired_at(&name, owner))
                    .map(str::to_owned);
            }
        };
        match snapshot {
            Snapshot::Lock(lock) => {
                for h in &mut lock.holders {
                    fill(h.client, &h.owner, &mut h.acquired_at);
                }
            }
            Snapshot::ReadWriteLock(rw) => {
                if let Some(w) = &mut rw.writer {
                    fill(w.client, &w.owner, &mut w.acquired_at);
                }
                for r in &mut rw.readers {
                    fill(r.client, &r.owner, &mut r.acquired_at);
                }
            }
            _ => {}
        }
    }

    /// `app@host:pid`, and `(silent 47.0s)` after it for a client that stopped beating;
    /// `?1b4e28ba` for a client without an identity; the owner itself when it names no client.
    /// [`clean`]: what a client records, and owners, come from Redis.
    pub(crate) fn short(&self, client: Option<Uuid>, owner: &str) -> String {
        let text = match client {
            Some(id) => match self.get(id) {
                Some(c) if !c.is_live() => format!(
                    "{}@{}:{} (silent {})",
                    c.app,
                    c.host,
                    c.pid,
                    span(c.silent_for)
                ),
                Some(c) => format!("{}@{}:{}", c.app, c.host, c.pid),
                None => format!("?{}", &id.simple().to_string()[..8]),
            },
            None => owner.to_owned(),
        };
        clean(&text).into_owned()
    }

    /// `billing@web-3 pid 4242 (client 1b4e…, ferrisson 0.1.0, up 3m12s)`, with `, silent
    /// for 47.0s: paused, hung or dead` for a client that stopped beating; or why there is no
    /// identity; [`clean`], as [`short`](Self::short).
    pub(crate) fn long(&self, client: Option<Uuid>, owner: &str) -> String {
        let text = match client {
            Some(id) => match self.get(id) {
                Some(c) => format!(
                    "{}@{} pid {} (client {id}, ferrisson {}, up {}){}",
                    c.app,
                    c.host,
                    c.pid,
                    c.version,
                    span(c.age),
                    silence(c)
                ),
                None => format!("client {id}, no live identity {WHY_NONE}"),
            },
            None => format!("owner `{owner}`, which names no client id"),
        };
        clean(&text).into_owned()
    }
}

/// Why a client id may have no identity, as `inspect` and `clients` say it.
pub(crate) const WHY_NONE: &str = "(a Java Redisson client, identities off, an earlier \
     ferrisson's client, or a client gone: 5 s after its last beat if it held nothing, else \
     once its holds could no longer live)";

/// `, silent for 47.0s: paused, hung or dead` for a client that stopped beating; empty for a
/// live one.
pub(crate) fn silence(c: &ClientIdentity) -> String {
    match c.is_live() {
        true => String::new(),
        false => format!(", silent for {}: paused, hung or dead", span(c.silent_for)),
    }
}

/// An identity as JSON: the library's own serialization (durations in milliseconds, as the
/// snapshots have them).
pub(crate) fn identity_json(c: &ClientIdentity) -> Value {
    serde_json::to_value(c).unwrap_or(Value::Null)
}

/// Adds `"identity": {...}` beside every `"client"` id of `value` whose identity is known, at
/// any depth (holders, readers, the writer, queued and starving waiters).
pub(crate) fn enrich(value: &mut Value, directory: &Directory) {
    match value {
        Value::Object(fields) => {
            let known = fields
                .get("client")
                .and_then(Value::as_str)
                .and_then(|id| Uuid::try_parse(id).ok())
                .and_then(|id| directory.get(id));
            if let Some(identity) = known {
                fields.insert("identity".into(), identity_json(identity));
            }
            for (_, field) in fields.iter_mut() {
                enrich(field, directory);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| enrich(v, directory)),
        _ => {}
    }
}
