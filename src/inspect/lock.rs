//! A plain, fair or fenced lock's snapshot.

use std::time::Duration;

use uuid::Uuid;

use super::reply::{Items, holds, remaining};
use super::{FromNow, Holder, Revocation, client_of, revocations};
use crate::error::Result;

/// Which lock a [`LockSnapshot`] is of. From a handle's `snapshot()` it is the handle's kind;
/// from [`Client::inspect`](crate::Client::inspect) a guess from the keys: `Fair` when a fair
/// queue exists, else `Fenced` when Redisson's per-name token counter exists, else `Plain` (a
/// fair lock nobody waits for looks plain).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::inspect::LockKind;
///
/// let snapshot = client.get_fair_lock("print-queue").snapshot().await?;
/// assert_eq!(snapshot.kind, LockKind::Fair);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum LockKind {
    /// [`Client::get_lock`](crate::Client::get_lock) (and an [`RMutex`](crate::RMutex)).
    Plain,
    /// [`Client::get_fair_lock`](crate::Client::get_fair_lock).
    Fair,
    /// [`Client::get_fenced_lock`](crate::Client::get_fenced_lock).
    Fenced,
}

/// A lock as Redis holds it at one moment: holders, lease, waiters, revocation requests and
/// token counters (see the [layout](crate::guide::layout) for the keys).
///
/// Not here, because the layout does not record them: when a hold was granted, and the token
/// of a plain lock's hold (a fenced lock's latest token is its
/// [`name_token_counter`](Self::name_token_counter)). Recording them would add work to every
/// grant.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let lock = client.get_lock("orders:42").snapshot().await?;
/// if lock.is_held() {
///     let holder = &lock.holders[0];
///     println!(
///         "held by {} ({} holds), lease {:?} left, {} connection(s) waiting",
///         holder.owner, holder.holds, lock.lease, lock.subscribers
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LockSnapshot {
    /// The lock's name, e.g. `orders:42`.
    pub name: String,
    /// Which lock this is, e.g. [`LockKind::Plain`].
    pub kind: LockKind,
    /// Every owner holding the lock, e.g. one `1b4e28ba-...:7` with 2 holds; empty when the
    /// lock is free. A lock has one holder at a time; more would be a foreign writer's doing.
    pub holders: Vec<Holder>,
    /// The lease left (the hash's PTTL), e.g. `Some(27.5 s)`; `None` when the lock is free, or
    /// held without a TTL (a foreign holder that set none: it never frees itself).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "lease_ms", serialize_with = "super::ser::opt_millis")
    )]
    pub lease: Option<Duration>,
    /// Connections subscribed to the lock's channel (`redisson_lock__channel:{name}`), e.g.
    /// `2`: one per client that has waiters (a ferrisson client's waiters share one), Java
    /// Redisson clients' included. Fair waiters listen on channels of their own instead (see
    /// [`QueuedWaiter::subscribers`]).
    pub subscribers: u64,
    /// Of those, ferrisson clients (they also listen on `redisson_lock__channel:{name}:ferrisson`),
    /// e.g. `1`.
    pub ferrisson_subscribers: u64,
    /// A fair lock's queue, first in line first, e.g. two waiters with their turns; empty for
    /// other kinds and when nobody waits.
    pub queue: Vec<QueuedWaiter>,
    /// Waiters that have waited past their client's starvation threshold, first to be served
    /// first (ferrisson only), e.g. one owner starving for 3 s.
    pub starving: Vec<StarvingWaiter>,
    /// Pending revocation requests of holds of this lock, e.g. one for the holder, made 1.2 s
    /// ago; a request lives about one lease, and may outlive the hold it asked.
    pub revocations: Vec<Revocation>,
    /// The fencing counter of the name's cluster slot (`ferrisson_token:{<tag>}`): the latest
    /// token handed out by any ferrisson lock in that slot, e.g. `Some(1732612345123456)`;
    /// `None` before the first.
    pub token_counter: Option<u64>,
    /// Redisson's per-name counter (`redisson_lock_token:{name}`), which fenced locks (Java's
    /// `RFencedLock` too) count in: the latest fenced token of this name, e.g. `Some(42)`;
    /// `None` when no fenced lock of this name was ever taken.
    pub name_token_counter: Option<u64>,
}

impl LockSnapshot {
    /// Whether anybody holds the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("orders:42");
    /// assert_eq!(lock.snapshot().await?.is_held(), lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// One waiter in a fair lock's queue.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for (place, waiter) in client.get_fair_lock("tickets").snapshot().await?.queue.iter().enumerate() {
///     // e.g. "1. 1b4e28ba-...:9, turn times out in 299.9s, calls again in 4.2s"
///     println!("{}. {}, turn times out {:?}, calls again {:?}",
///         place + 1, waiter.owner, waiter.turn_timeout, waiter.alive_deadline);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's owner name, e.g. `1b4e28ba-...:9`.
    pub owner: String,
    /// The client it belongs to (see [`Holder::client`]), e.g. `Some(1b4e28ba-...)`.
    pub client: Option<Uuid>,
    /// When its turn times out (`redisson_lock_timeout:{name}`, Redisson's meaning: one thread
    /// wait time after the turn ahead), e.g. in 299.9 s; `None` when the queue has no turn for
    /// it. Java clients write it by their own clocks, so it is only as exact as theirs.
    pub turn_timeout: Option<FromNow>,
    /// By when a ferrisson waiter must call again to keep its place
    /// (`ferrisson_fair_alive:{name}`), e.g. in 4.2 s; passed, the waiter is taken for dead and
    /// dropped once it reaches the head. `None` for Java waiters, which have none.
    pub alive_deadline: Option<FromNow>,
    /// Connections listening on the waiter's own channel
    /// (`redisson_lock__channel:{name}:<owner>`), e.g. `1`; `0` for a waiter whose client has
    /// gone (or one between two calls).
    pub subscribers: u64,
}

/// A waiter that has waited past its client's starvation threshold (see
/// [`ClientBuilder::lock_starvation_threshold`](crate::ClientBuilder::lock_starvation_threshold)).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for waiter in client.get_lock("hot").snapshot().await?.starving {
///     println!("{} starves for {:?}", waiter.owner, waiter.starving_for);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct StarvingWaiter {
    /// The waiter's owner name, e.g. `1b4e28ba-...:12`.
    pub owner: String,
    /// The client it belongs to (see [`Holder::client`]).
    pub client: Option<Uuid>,
    /// How long since it first said it starves, by the server's clock, e.g. 3 s.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "starving_for_ms", serialize_with = "super::ser::millis")
    )]
    pub starving_for: Duration,
}

/// Reads the 'lock' section of `lua/inspect.lua`'s reply.
pub(super) fn parse(name: String, section: &mut Items<'_>) -> Result<LockSnapshot> {
    let lease = remaining(section.int()?);
    let mut fields = section.list("holders")?;
    let mut holders = Vec::new();
    while !fields.is_empty() {
        let owner = fields.text()?;
        let count = holds(&fields.text()?, &owner)?;
        holders.push(Holder::new(owner, count));
    }
    let token_counter = section.opt_stored()?;
    let name_token_counter = section.opt_stored()?;
    let mut subscribed = section.list("subscribers")?;
    let subscribers = subscribed.count()?;
    let ferrisson_subscribers = subscribed.count()?;
    let mut entries = section.list("queue")?;
    let mut queue = Vec::new();
    while !entries.is_empty() {
        let mut entry = entries.list("queue entry")?;
        let owner = entry.text()?;
        queue.push(QueuedWaiter {
            client: client_of(&owner),
            owner,
            turn_timeout: entry.opt_int()?.map(FromNow::from_millis),
            alive_deadline: entry.opt_int()?.map(FromNow::from_millis),
            subscribers: entry.count()?,
        });
    }
    let mut flat = section.list("starving")?;
    let mut starving = Vec::new();
    while !flat.is_empty() {
        let owner = flat.text()?;
        let since = FromNow::from_millis(flat.int()?);
        starving.push(StarvingWaiter {
            client: client_of(&owner),
            owner,
            starving_for: since.behind().unwrap_or_default(),
        });
    }
    let revocations = revocations(section)?;
    let kind = if !queue.is_empty() {
        LockKind::Fair
    } else if name_token_counter.is_some() {
        LockKind::Fenced
    } else {
        LockKind::Plain
    };
    Ok(LockSnapshot {
        name,
        kind,
        holders,
        lease,
        subscribers,
        ferrisson_subscribers,
        queue,
        starving,
        revocations,
        token_counter,
        name_token_counter,
    })
}
