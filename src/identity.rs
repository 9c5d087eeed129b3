//! Client identities: who each client is, recorded under its id, so that an owner name
//! `<uuid>:<n>` found on a stuck lock maps to a service, a host and a process.
//!
//! Written when the client connects (`lua/client_identity.lua`), kept alive by the watchdog's
//! heartbeat (one `PEXPIRE` a second; written again when the heartbeat finds it gone), removed by
//! [`Client::close`]; a client that dies without closing is gone within [`TTL`] when it held
//! nothing, else once none of its holds can live any more ([`own::beat_ttl`]), so that a
//! stopped or hung holder can still be found; the TTL each beat set is recorded
//! (`beat_ttl_ms`), and a reader tells how long ago the client last beat from it and the key's
//! `PTTL`. The heartbeat
//! also says there where the client's holds were taken and which of its acquisitions wait for
//! a hold of their own task ([`sites`]), in the same call, when that changed
//! (`lua/client_beat.lua` instead of the `PEXPIRE`).

use std::collections::HashMap;
use std::time::Duration;

use uuid::Uuid;

use crate::Client;
use crate::config::ClientBuilder;
use crate::error::{Error, Result};
use crate::script::Executor;

mod own;
mod sites;

pub(crate) use own::Own;

pub use sites::{HoldSite, SelfWaitSite};

/// The pattern every identity key matches (and the ACL rule grants).
const PATTERN: &str = "ferrisson_client:*";

/// How long an identity outlives its client's last heartbeat: five beats, so that a beat or
/// two lost to a slow server or a short outage does not drop a live client from the list.
pub(crate) const TTL: Duration = Duration::from_secs(5);

/// A client silent for less than this still beats (its heartbeat is due every second): see
/// [`ClientIdentity::is_live`].
const LIVE_WITHIN: Duration = Duration::from_secs(3);

/// The field that records the TTL the last beat set, in ms.
const BEAT_TTL: &str = "beat_ttl_ms";

/// The key of client `id`'s identity; the id is its hash tag, so the key has a slot of its own.
pub(crate) fn key(id: Uuid) -> String {
    format!("ferrisson_client:{{{id}}}")
}

/// The client id a key of [`PATTERN`] names; `None` for a key that is not an identity's.
fn id_of_key(key: &str) -> Option<Uuid> {
    let id = key.strip_prefix("ferrisson_client:{")?.strip_suffix('}')?;
    Uuid::parse_str(id).ok()
}

impl ClientBuilder {
    /// The application name this client's identity gives (see
    /// [`Client::clients`]), so that an operator who finds its owner name on a stuck lock
    /// knows which service holds it. Default: the executable's file name.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .app_name("billing-worker")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = Some(name.into());
        self
    }

    /// Whether the client records who it is in Redis: its application name, host, process id,
    /// version and start, under `ferrisson_client:{<id>}`, kept alive by a call every second
    /// and gone within 5 s of the client's last beat (or, while it held something, once those
    /// holds could no longer live: a paused or hung holder stays findable; see
    /// [`ClientIdentity::silent_for`], [`Client::clients`] and
    /// [what it costs](crate::guide::observability#client-identities)). Off, the client writes
    /// no such key and makes no call while it holds nothing, as before identities. Default: on.
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .identity(false) // nothing but the locks themselves in Redis
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn identity(mut self, on: bool) -> Self {
        self.identity = on;
        self
    }
}

/// Who a ferrisson client is: what it recorded under its id when it connected, read back
/// by [`Client::clients`] or [`Client::identity_of`]. The owner names a client writes into
/// locks are `<id>:<n>`, so the first half of a holder's owner name finds its identity.
///
/// A client that stopped beating (a process paused with `SIGSTOP`, hung, or dead) keeps its
/// identity while any of its holds may still live, so that whoever finds its lock stuck still
/// learns its host and pid; [`silent_for`](Self::silent_for) says how long ago it last beat,
/// and [`is_live`](Self::is_live) whether it still does.
///
/// A field the record lacks (written by another version, or by hand) reads as empty or 0.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for who in client.clients().await? {
///     // billing-worker on web-3 (pid 4242, ferrisson 0.1.0), up 3h12m: 0c4a...
///     println!(
///         "{} on {} (pid {}, ferrisson {}), up {:?}: {}",
///         who.app, who.host, who.pid, who.version, who.age, who.id
///     );
/// }
/// # Ok(()) }
/// ```
///
/// With the `serde` feature it is `serde::Serialize`, its age as `age_ms` and its silence as
/// `silent_for_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ClientIdentity {
    /// The client's id ([`Client::id`]): the part before the last `:` of every owner name it
    /// writes into a lock.
    pub id: Uuid,
    /// The application name: [`ClientBuilder::app_name`], or else the client's executable's
    /// file name.
    pub app: String,
    /// The name of the host the client runs on (empty when it could not be read).
    pub host: String,
    /// The client's process id on that host (0 when the record lacks it).
    pub pid: u32,
    /// The ferrisson version the client was built with (`0.1.0`).
    pub version: String,
    /// When the client connected: unix time in milliseconds, on the clock of the server that
    /// holds the identity (the client's own clock may be off).
    pub started_ms: u64,
    /// How long ago the client connected: the server's `TIME` when this was read minus
    /// [`started_ms`](Self::started_ms), so a client host's clock does not skew it.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "age_ms", serialize_with = "crate::inspect::ser::millis")
    )]
    pub age: Duration,
    /// How long ago the client last beat (its heartbeat refreshes the identity every second):
    /// under a second or so for a live client; more for one that stopped, hung or died while
    /// it held something (its identity stays while its holds may live). The TTL its last beat
    /// set (the `beat_ttl_ms` field) minus the key's `PTTL`; zero for an identity that does
    /// not record that TTL (an earlier version's).
    #[cfg_attr(
        feature = "serde",
        serde(
            rename = "silent_for_ms",
            serialize_with = "crate::inspect::ser::millis"
        )
    )]
    pub silent_for: Duration,
    /// Where the client's lock holds that have lived at least a second were taken (the
    /// `file:line:column` of each acquiring call), by lock and owner; at most 200 (see
    /// [`hold_sites_total`](Self::hold_sites_total)). Refreshed by the client's heartbeat
    /// within about a second of a change; empty from a client of an earlier version. Look one
    /// up with [`acquired_at`](Self::acquired_at).
    pub hold_sites: Vec<HoldSite>,
    /// How many holds the client has that have lived at least a second: more than
    /// [`hold_sites`](Self::hold_sites) lists when it has more than 200.
    pub hold_sites_total: usize,
    /// The client's acquisitions that have waited longer than its
    /// [`self_wait_warning`](crate::ClientBuilder::self_wait_warning) for a hold their own task
    /// (or thread) keeps, and still wait: most likely for ever (see the guide's [wait for your
    /// own hold](crate::guide::semantics#a-wait-for-your-own-hold)).
    pub self_waits: Vec<SelfWaitSite>,
}

impl ClientIdentity {
    /// The identity in `fields` (an `HGETALL` of `id`'s key) whose key had `pttl_ms` left (its
    /// `PTTL`), read when the server's clock said `now_ms`; `None` for an empty hash (a key gone
    /// since it was listed).
    fn of(id: Uuid, fields: HashMap<String, String>, pttl_ms: i64, now_ms: u64) -> Option<Self> {
        if fields.is_empty() {
            return None;
        }
        // No recorded TTL, or no TTL on the key (-1; -2: gone since): beating now, as far as
        // anybody can tell.
        let beat_ttl_ms: Option<u64> = fields.get(BEAT_TTL).and_then(|t| t.parse().ok());
        let silent_ms = match (beat_ttl_ms, u64::try_from(pttl_ms)) {
            (Some(set), Ok(left)) => set.saturating_sub(left),
            _ => 0,
        };
        let sites = sites::read(&fields, now_ms);
        let text = |name: &str| fields.get(name).cloned().unwrap_or_default();
        let started_ms = fields
            .get("started")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Some(ClientIdentity {
            id,
            app: text("app"),
            host: text("host"),
            pid: fields.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0),
            version: text("version"),
            started_ms,
            age: Duration::from_millis(now_ms.saturating_sub(started_ms)),
            silent_for: Duration::from_millis(silent_ms),
            hold_sites: sites.holds,
            hold_sites_total: sites.holds_total,
            self_waits: sites.self_waits,
        })
    }

    /// Where this client's hold of lock `lock` by `owner` (`<client-uuid>:<n>`, as a snapshot's
    /// holder, writer or reader names it) was taken, `file:line:column`, if the identity says
    /// (see [`hold_sites`](Self::hold_sites)): `None` for a hold younger than a second or not
    /// among the 200 listed, and for another client's owner.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("orders:42").snapshot().await?;
    /// for holder in &lock.holders {
    ///     let Some(id) = holder.client else { continue };
    ///     if let Some(who) = client.identity_of(id).await? {
    ///         let at = who.acquired_at(&lock.name, &holder.owner);
    ///         println!("{} holds it, acquired at {}", who.app, at.unwrap_or("?"));
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acquired_at(&self, lock: &str, owner: &str) -> Option<&str> {
        self.hold_sites
            .iter()
            .find(|h| h.lock == lock && h.owner == owner)
            .map(|h| h.acquired_at.as_str())
    }

    /// Whether the client still beats: [`silent_for`](Self::silent_for) is under 3 s (three
    /// heartbeats). A client that is not live was paused, hangs, or died while it held
    /// something; its holds last until their leases run out.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// for who in client.clients().await? {
    ///     if !who.is_live() {
    ///         println!("pid {} on {}, silent for {:?}", who.pid, who.host, who.silent_for);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_live(&self) -> bool {
        self.silent_for < LIVE_WITHIN
    }
}

impl Client {
    /// Every ferrisson client of these servers that records its identity (see
    /// [`ClientBuilder::identity`]): `SCAN` for `ferrisson_client:*` on the server, on a
    /// Cluster on every master, then each identity read (its `HGETALL` and `PTTL`, sent
    /// together); ordered by start, oldest first. A client that closed is not listed, nor one
    /// silent for longer than 5 s that held nothing; one that held something is listed, with
    /// how long it has been silent ([`ClientIdentity::silent_for`]), until none of its holds
    /// can live any more.
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`] for an ACL user without `+scan` (the README's rule leaves it
    /// out: `SCAN` lists every key name of the database; see
    /// [the ACL page](crate::guide::acl)); [`Error::Redis`] when a server does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let holder = "0c4a6f52-2f43-4d4b-9d3a-2f0e8c1b7a11";
    /// let who = client.clients().await?;
    /// match who.iter().find(|c| c.id.to_string() == holder) {
    ///     Some(c) => println!("{} on {}, pid {}", c.app, c.host, c.pid),
    ///     None => println!("{holder} is gone (or records no identity)"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn clients(&self) -> Result<Vec<ClientIdentity>> {
        let executor = &self.inner.executor;
        let masters = executor.master_slots().await?;
        let lists = futures::future::try_join_all(
            masters
                .into_iter()
                .map(|slot| identities_on(executor, slot)),
        )
        .await?;
        let mut all: Vec<ClientIdentity> = lists.into_iter().flatten().collect();
        all.sort_by_key(|c| (c.started_ms, c.id));
        Ok(all)
    }

    /// The identity of client `id` (the part of an owner name before its last `:`), if that
    /// client records one that is still there: `None` when it closed, turned identities off,
    /// or went silent more than 5 s ago holding nothing (a client silent while it holds
    /// something keeps its identity as long as those holds may live; see
    /// [`ClientIdentity::silent_for`]). One `HGETALL`, a `PTTL` and the server's `TIME`, sent
    /// together.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the key holds something else than a hash;
    /// [`Error::PermissionDenied`] when the ACL user may not read it; [`Error::Redis`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let me = client.identity_of(client.id()).await?.expect("identities are on");
    /// println!("{} (pid {}), connected {:?} ago", me.app, me.pid, me.age);
    /// # Ok(()) }
    /// ```
    pub async fn identity_of(&self, id: Uuid) -> Result<Option<ClientIdentity>> {
        let executor = &self.inner.executor;
        let key = key(id);
        let read = fields(executor, &key);
        let now = server_ms(executor, crate::slots::key_slot(&key) as u16);
        let ((fields, pttl), now) = futures::future::join(read, now).await;
        Ok(ClientIdentity::of(id, fields?, pttl?, now?))
    }
}

/// The identities on the master that serves `slot`, aged by that master's clock.
async fn identities_on(executor: &Executor, slot: u16) -> Result<Vec<ClientIdentity>> {
    let keys = executor.scan_on_slot(slot, PATTERN).await?;
    let now = server_ms(executor, slot).await?;
    let reads = keys
        .iter()
        .filter_map(|key| Some((id_of_key(key)?, key)))
        .map(|(id, key)| async move {
            match fields(executor, key).await {
                (Ok(fields), Ok(pttl)) => Ok(ClientIdentity::of(id, fields, pttl, now)),
                // Not an identity, whatever its name: left out.
                (Err(Error::WrongType { .. } | Error::UnexpectedReply(_)), _) => Ok(None),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        });
    let read = futures::future::try_join_all(reads).await?;
    Ok(read.into_iter().flatten().collect())
}

/// The fields of the identity at `key` (`HGETALL`), and its `PTTL`, sent together (one round
/// trip on the key's connection); bytes that are not UTF-8, which no client writes, are shown
/// lossily rather than failing the whole read.
async fn fields(executor: &Executor, key: &str) -> (Result<HashMap<String, String>>, Result<i64>) {
    let mut hgetall = redis::cmd("HGETALL");
    hgetall.arg(key);
    let mut pttl = redis::cmd("PTTL");
    pttl.arg(key);
    let hash = executor.read::<HashMap<Vec<u8>, Vec<u8>>>(&hgetall, key);
    let left = executor.read::<i64>(&pttl, key);
    let (raw, left) = futures::future::join(hash, left).await;
    (raw.map(text_fields), left)
}

/// A hash read as text.
fn text_fields(raw: HashMap<Vec<u8>, Vec<u8>>) -> HashMap<String, String> {
    raw.into_iter()
        .map(|(k, v)| {
            let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            (text(k), text(v))
        })
        .collect()
}

/// The clock of the master that serves `slot` (`TIME`), in unix ms.
async fn server_ms(executor: &Executor, slot: u16) -> Result<u64> {
    let (secs, micros): (u64, u64) = executor
        .read_on_slot(&redis::cmd("TIME"), slot, "TIME")
        .await?;
    Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_client() {
        let id = Uuid::new_v4();
        assert_eq!(id_of_key(&key(id)), Some(id));
        assert_eq!(id_of_key("ferrisson_client:{not-a-uuid}"), None);
        assert_eq!(id_of_key(&format!("ferrisson_client:{id}")), None);
    }

    #[test]
    fn a_record_missing_fields_reads_as_empty() {
        let id = Uuid::new_v4();
        assert_eq!(ClientIdentity::of(id, HashMap::new(), 4000, 5), None);
        let fields = HashMap::from([
            ("app".to_owned(), "api".to_owned()),
            ("pid".to_owned(), "x".to_owned()),
            ("started".to_owned(), "9000".to_owned()),
        ]);
        let read = ClientIdentity::of(id, fields, 4000, 5000).unwrap();
        assert_eq!((read.app.as_str(), read.host.as_str()), ("api", ""));
        assert_eq!((read.pid, read.started_ms), (0, 9000));
        assert_eq!(
            read.age,
            Duration::ZERO,
            "a start after now is no negative age"
        );
        assert_eq!(
            read.silent_for,
            Duration::ZERO,
            "no beat_ttl_ms: beating now"
        );
        assert!(read.is_live());
    }

    #[test]
    fn silence_is_the_ttl_set_less_the_ttl_left() {
        let id = Uuid::new_v4();
        let with = |ttl: &str| HashMap::from([(BEAT_TTL.to_owned(), ttl.to_owned())]);
        let read = |ttl: &str, pttl| ClientIdentity::of(id, with(ttl), pttl, 0).unwrap();
        assert_eq!(read("36000", 35_200).silent_for, Duration::from_millis(800));
        assert!(read("36000", 35_200).is_live());
        let paused = read("36000", 6_000);
        assert_eq!(paused.silent_for, Duration::from_secs(30));
        assert!(!paused.is_live());
        assert_eq!(read("5000", -1).silent_for, Duration::ZERO, "no TTL");
        assert_eq!(read("x", 10).silent_for, Duration::ZERO, "not a number");
        assert_eq!(
            read("5000", 9_000).silent_for,
            Duration::ZERO,
            "more left than set"
        );
    }
}
