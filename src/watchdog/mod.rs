//! The watchdog: one task per client that keeps every watchdog-held lease alive.
//!
//! Each registered lease is renewed every third of the watchdog timeout. Renewals that fall due
//! together go out together, [`BATCH`] keys per script call. A renewal answered "not yours"
//! marks the lease lost at once; one that fails is retried until the lease deadline, which marks
//! it lost. Guards deregister before they send their release, so no renewal is sent for a hold
//! after the hold's release; a renewal already on the wire is owner-checked by the script and
//! cannot revive a released lock.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::connection::on_own_connection;
use crate::lease::Lease;
use crate::map::Map;
use crate::names;
use crate::presence::doubt::Doubt;
use crate::script::{Executor, LOCK_RENEW, LuaScript, PERMIT_RENEW, RWLOCK_READ_RENEW, ScriptCall};
use crate::slots::key_slot;

mod check;
mod heartbeat;
mod presence;
mod sites;

#[cfg(test)]
pub(crate) use sites::HeldSite;
pub(crate) use sites::{SelfWaitEntry, SelfWaitTicket, Site, Sites};

/// Keys renewed by one script call (Redisson renews 100 per call as well).
pub(crate) const BATCH: usize = 100;

/// Where a hold lives in Redis, as far as renewing it goes.
#[derive(Debug, Clone)]
pub(crate) enum RenewTarget {
    /// A lock hash whose `field` marks the hold: RLock and fair lock (`<owner>`), write lock
    /// (`<owner>:write`). Renewing sets the hash's TTL when the field is there.
    HashField { key: Arc<str>, field: Arc<str> },
    /// A reader's holds on a read-write lock: each has its own timeout key under `timeouts`;
    /// renewing extends those, and the hash when it would die sooner.
    ReadHolds {
        key: Arc<str>,
        owner: Arc<str>,
        timeouts: Arc<str>,
    },
    /// The permits of one [`PermitGuard`](crate::PermitGuard): renewing sets each id's expiry in
    /// the semaphore's `timeouts` zset when all of them are still out.
    Permits {
        count: Arc<str>,
        timeouts: Arc<str>,
        channel: Arc<str>,
        /// The guard's permit ids, separated by spaces.
        ids: Arc<str>,
    },
}

impl RenewTarget {
    fn key(&self) -> &str {
        self.shared_key()
    }

    /// [`key`](Self::key), shared.
    fn shared_key(&self) -> &Arc<str> {
        match self {
            RenewTarget::HashField { key, .. } | RenewTarget::ReadHolds { key, .. } => key,
            RenewTarget::Permits { count, .. } => count,
        }
    }

    fn script(&self) -> &'static LuaScript {
        match self {
            RenewTarget::HashField { .. } => &LOCK_RENEW,
            RenewTarget::ReadHolds { .. } => &RWLOCK_READ_RENEW,
            RenewTarget::Permits { .. } => &PERMIT_RENEW,
        }
    }

    /// Whether another client may take this hold over when this client's presence is found
    /// gone (see [`presence`](crate::presence)): a lock's, not permits.
    pub(crate) fn may_be_taken_over(&self) -> bool {
        !matches!(self, RenewTarget::Permits { .. })
    }

    /// What marks this hold in the object's revocation requests: the hash field (the owner, or
    /// `<owner>:write`), the reader's owner; for permits, the first id (a request marks all).
    pub(crate) fn mark(&self) -> &str {
        match self {
            RenewTarget::HashField { field, .. } => field,
            RenewTarget::ReadHolds { owner, .. } => owner,
            RenewTarget::Permits { ids, .. } => ids.split(' ').next().unwrap_or_default(),
        }
    }

    /// Adds this hold's keys to a renewal call (one hold's keys follow the previous hold's).
    fn keys(&self, call: ScriptCall) -> ScriptCall {
        match self {
            RenewTarget::HashField { key, .. } => call.key(&**key).key(names::revocations(key)),
            RenewTarget::ReadHolds { key, timeouts, .. } => call
                .key(&**key)
                .key(&**timeouts)
                .key(names::revocations(key)),
            RenewTarget::Permits {
                count,
                timeouts,
                channel,
                ..
            } => call
                .key(&**count)
                .key(&**timeouts)
                .key(&**channel)
                .key(names::revocations(count)),
        }
    }

    /// Adds this hold's argument to a renewal call, after the lease.
    fn arg(&self, call: ScriptCall) -> ScriptCall {
        match self {
            RenewTarget::HashField { field, .. } => call.arg(&**field),
            RenewTarget::ReadHolds { owner, .. } => call.arg(&**owner),
            RenewTarget::Permits { ids, .. } => call.arg(&**ids),
        }
    }

    /// What a renewal's answer for this hold means, for the hold `lease`: `None` when it is no
    /// longer held; else whether a revocation of it was requested. A permit guard's answer says
    /// so with 2 (its marks are its own permit ids, new for every guard); a lock's answer is the
    /// request's stamp (server µs), which counts only when not below the hold's grant stamp
    /// (its token, but for a read nested in a write hold: see `Lease::stamp`), so that a
    /// request for an earlier hold of the same owner name never reaches a later one.
    pub(crate) fn answer(&self, answer: i64, lease: &Lease) -> Option<bool> {
        match (self, answer) {
            (_, 1) => Some(false),
            (RenewTarget::Permits { .. }, 2) => Some(true),
            (RenewTarget::Permits { .. }, _) => None,
            (_, stamp) if stamp > 1 => Some(stamp.unsigned_abs() >= lease.stamp()),
            _ => None,
        }
    }

    /// The renewal of this one hold to a TTL of `lease_ms`, answered as
    /// [`answer`](Self::answer) reads it.
    pub(crate) fn call(&self, lease_ms: u64) -> ScriptCall {
        let call = self.keys(ScriptCall::new(self.script())).arg(lease_ms);
        self.arg(call)
    }
}

/// What the watchdog needs to renew one lease.
#[derive(Debug)]
pub(crate) struct Renewal {
    pub(crate) target: RenewTarget,
    /// Whose the hold is and where it was taken (locks only): for the warning a wait for a
    /// hold of the waiter's own task gets, and for operators (see [`sites`]).
    pub(crate) site: Option<Site>,
    pub(crate) lease: Arc<Lease>,
    pub(crate) labels: crate::observe::Labels,
}

#[derive(Debug)]
struct Entry {
    renewal: Arc<Renewal>,
    next_due: Instant,
    in_flight: bool,
    /// A fixed lease: never renewed; only the heartbeat's look (see `heartbeat`) checks it.
    checked_only: bool,
    /// The last renewal or check failed: a lease that runs out now ran out for want of them.
    failing: bool,
}

/// How the watchdog keeps a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// Renewed every third of the watchdog timeout (and at once after a connection change).
    Renew,
    /// A fixed lease: never renewed, only looked at with every hold each heartbeat.
    Check,
}

/// When a checked-only hold is due: never, in practice (an `Instant` a year ahead stays far from
/// overflowing).
const NOT_DUE: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, Default)]
struct Registry {
    entries: Map<u64, Entry>,
    next_id: u64,
    /// Callers waiting for a renewal in flight of a deregistered entry to come back.
    settling: Map<u64, Vec<oneshot::Sender<()>>>,
}

#[derive(Debug, Default)]
struct Shared {
    registry: Mutex<Registry>,
    /// Waits for a hold of the waiter's own task or thread that passed the warning's threshold.
    self_waits: Mutex<sites::SelfWaits>,
}

impl Shared {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The client's watchdog. Its task stops when `shutdown` is dropped.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    lease: Duration,
    /// The client's presence, when it has one: while it is in doubt past its deadline a hold
    /// that may be taken over is lost as soon as it is taken.
    doubt: Option<Arc<Doubt>>,
}

impl Watchdog {
    pub(crate) fn start(
        executor: Executor,
        lease: Duration,
        shutdown: watch::Receiver<()>,
        runtime: &tokio::runtime::Handle,
        identity: Option<Arc<crate::identity::Own>>,
        doubt: Option<Arc<Doubt>>,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let changes = executor.connection_changes();
        // On the client thread's own connection: renewals never wait on a caller's runtime.
        runtime.spawn(on_own_connection(heartbeat::heartbeat(
            Arc::downgrade(&shared),
            executor.clone(),
            shutdown.clone(),
            identity,
            lease,
        )));
        runtime.spawn(on_own_connection(run(
            shared.clone(),
            executor,
            lease,
            shutdown,
            changes,
        )));
        Watchdog {
            shared,
            lease,
            doubt,
        }
    }

    /// The lease the watchdog keeps: the client's watchdog timeout.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// Starts keeping a hold as `how` says; returns the id that stops it.
    pub(crate) fn watch(&self, renewal: Renewal, how: Watch) -> u64 {
        let next_due = match how {
            // Due a third of the lease after its grant was sent, which is no later than the
            // server set the TTL (and spares the fast path a clock read).
            Watch::Renew => renewal.lease.granted_at() + self.lease / 3,
            Watch::Check => renewal.lease.granted_at() + NOT_DUE,
        };
        if let Some(doubt) = &self.doubt
            && renewal.target.may_be_taken_over()
        {
            // Another client may take it over at any moment (or may have): its holder must not
            // count on it. And from now on the lease asks the presence too (`Lease::is_lost`).
            if doubt.loses(renewal.lease.granted_at()) {
                renewal.lease.mark_lost();
            }
            renewal.lease.watch_presence(doubt.clone());
        }
        let entry = Entry {
            renewal: Arc::new(renewal),
            next_due,
            in_flight: false,
            checked_only: how == Watch::Check,
            failing: false,
        };
        let mut registry = self.shared.registry();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.entries.insert(id, entry);
        id
    }

    /// Stops renewing; a renewal in flight for it is ignored when it returns.
    pub(crate) fn deregister(&self, id: u64) {
        self.shared.registry().entries.remove(&id);
    }

    /// Stops renewing, and resolves once no renewal of it is on its way any more: a command sent
    /// after this resolves runs after the last renewal, so a lease it sets is not overwritten.
    pub(crate) async fn deregister_settled(&self, id: u64) {
        let settled = {
            let mut registry = self.shared.registry();
            match registry.entries.remove(&id) {
                Some(entry) if entry.in_flight => {
                    let (tx, rx) = oneshot::channel();
                    registry.settling.entry(id).or_default().push(tx);
                    Some(rx)
                }
                _ => None,
            }
        };
        if let Some(settled) = settled {
            // An error means the watchdog stopped: nothing is on its way any more either.
            let _ = settled.await;
        }
    }
}

/// How soon a renewal that failed while re-checking after a connection change is sent again:
/// the holder should hear within about a second of the server being back that its hold is gone.
const RECHECK_RETRY: Duration = Duration::from_millis(200);

async fn run(
    shared: Arc<Shared>,
    executor: Executor,
    lease: Duration,
    mut shutdown: watch::Receiver<()>,
    mut changes: watch::Receiver<u64>,
) {
    let retry = (lease / 10).max(Duration::from_millis(10));
    // After the connection dropped, was given up or reopened, every hold is renewed at once and,
    // until a round of renewals got through, retried at short intervals: a restarted server or
    // a new master may not have it any more, and its holder must stop now, not at the next
    // renewal a third of a lease away.
    let mut rechecking = false;
    // When every lease was last made due: at most once per RECHECK_RETRY, since the renewals
    // themselves may open a connection (a change), which must not start a round without pause.
    let mut rechecked: Option<Instant> = None;
    loop {
        let next = {
            let registry = shared.registry();
            registry
                .entries
                .values()
                .filter(|e| !e.in_flight)
                .map(|e| e.next_due)
                .min()
        };
        // An entry registered at t is first due a third of the lease after its grant was sent,
        // so by t + lease/3. The task never sleeps longer than lease/3 from when it fell asleep,
        // so it is up by then for every new entry (late only by however long the grant took to
        // reach its guard) without being woken: registering a lease costs the fast path no
        // wake-up of this task.
        let idle_until = Instant::now() + lease / 3;
        let until = next.map_or(idle_until, |due| due.min(idle_until));
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return; // the connection is gone: so is the client
                }
                if rechecked.is_none_or(|at| at.elapsed() >= RECHECK_RETRY) {
                    rechecked = Some(Instant::now());
                    rechecking = all_due(&shared);
                } else {
                    rechecking = true;
                }
            }
            () = tokio::time::sleep_until(until) => {}
        }
        let mut batch = take_due(&shared, Instant::now() + lease / 6);
        if batch.is_empty() {
            continue;
        }
        // One script per kind of hold, and on a cluster one per slot (a script's keys must
        // share a slot there): group the batch so, then cut the groups in chunks.
        let per_slot = executor.target().is_cluster();
        let group = |r: &Renewal| {
            let slot = if per_slot {
                key_slot(r.target.key())
            } else {
                0
            };
            (r.target.script().sha().as_ptr() as usize, slot)
        };
        batch.sort_by_key(|(_, r)| group(r));
        let chunks: Vec<&[(u64, Arc<Renewal>)]> = batch
            .chunk_by(|(_, a), (_, b)| group(a) == group(b))
            .flat_map(|group| group.chunks(BATCH))
            .collect();
        let calls = chunks
            .iter()
            .map(|chunk| renew_chunk(&executor, chunk, lease));
        let results = futures::future::join_all(calls).await;
        let failed = results.iter().any(|(_, result)| result.is_err());
        // A renewal that failed goes again after this.
        let again = Instant::now() + if rechecking { RECHECK_RETRY } else { retry };
        let mut registry = shared.registry();
        for (chunk, (sent_at, result)) in chunks.into_iter().zip(&results) {
            if let Err(e) = result {
                crate::observe::renewals_failed(chunk.len(), e)
            }
            for (i, (id, renewal)) in chunk.iter().enumerate() {
                let answer = match result {
                    Ok(renewed) => match renewed
                        .get(i)
                        .and_then(|a| renewal.target.answer(*a, &renewal.lease))
                    {
                        Some(revoked) => Answer::Held {
                            revoked,
                            renewed: (*sent_at, lease),
                        },
                        None => Answer::Gone,
                    },
                    Err(e) => Answer::Failed(e),
                };
                settle(&mut registry, *id, renewal, answer, again);
            }
        }
        rechecking &= failed;
    }
}

/// What a renewal of one hold found.
enum Answer<'a> {
    /// Still held, and renewed (sent at, for the lease).
    Held {
        revoked: bool,
        renewed: (Instant, Duration),
    },
    /// No longer held: the lease is lost.
    Gone,
    Failed(&'a crate::Error),
}

/// Takes in what a renewal of entry `id` found; an entry whose call failed is due `again`.
fn settle(registry: &mut Registry, id: u64, renewal: &Renewal, answer: Answer<'_>, again: Instant) {
    let Some(entry) = registry.entries.get_mut(&id) else {
        // Deregistered while the call was on its way: whoever waits for it to settle (see
        // `deregister_settled`) goes on.
        for waiter in registry.settling.remove(&id).unwrap_or_default() {
            let _ = waiter.send(());
        }
        return;
    };
    entry.in_flight = false;
    entry.failing = matches!(answer, Answer::Failed(_));
    let lost = |how, e| {
        crate::observe::lease_lost(&renewal.labels, renewal.target.key(), how, e);
    };
    match answer {
        Answer::Held {
            revoked,
            renewed: (sent_at, lease),
        } => {
            renewal.lease.renewed(sent_at, lease);
            entry.next_due = sent_at + lease / 3;
            if revoked {
                renewal.lease.mark_revoked();
            }
        }
        Answer::Gone => {
            lost(crate::observe::Lost::NotHeld, None);
            renewal.lease.mark_lost();
            registry.entries.remove(&id);
        }
        Answer::Failed(e) if renewal.lease.is_lost() => {
            lost(crate::observe::Lost::Expired, Some(e));
            registry.entries.remove(&id);
        }
        Answer::Failed(_) => entry.next_due = again,
    }
}

/// Every hold whose lease is not known lost, for a presence check.
fn live(shared: &Shared) -> Vec<(u64, Arc<Renewal>)> {
    shared
        .registry()
        .entries
        .iter()
        .filter(|(_, e)| !e.renewal.lease.is_lost())
        .map(|(id, e)| (*id, e.renewal.clone()))
        .collect()
}

/// The longest any hold not known lost may still live in Redis, counted from now (`None`: no
/// such hold): a renewed one, `lease` (the watchdog timeout, which a renewal sent just now would
/// set), or longer when a grant gave it more; a fixed one, what is left of its lease.
fn longest_hold(shared: &Shared, lease: Duration) -> Option<Duration> {
    let now = Instant::now();
    let registry = shared.registry();
    registry
        .entries
        .values()
        .filter(|e| !e.renewal.lease.is_lost())
        .map(|e| {
            let left = e.renewal.lease.deadline().saturating_duration_since(now);
            match e.checked_only {
                true => left,
                false => left.max(lease),
            }
        })
        .max()
}

/// A presence check found the hold of entry `id` gone: its lease is lost, unless the entry was
/// given up meanwhile (released: then the hold is gone because its guard gave it back).
fn found_gone(shared: &Shared, id: u64, renewal: &Arc<Renewal>) {
    let mut registry = shared.registry();
    let ours = registry
        .entries
        .get(&id)
        .is_some_and(|e| Arc::ptr_eq(&e.renewal, renewal));
    if ours {
        crate::observe::lease_lost(
            &renewal.labels,
            renewal.target.key(),
            crate::observe::Lost::NotHeld,
            None,
        );
        renewal.lease.mark_lost();
        registry.entries.remove(&id);
    }
}

/// Makes every renewed lease due now; returns whether there is any. (Fixed leases are looked
/// at by the heartbeat, which a connection change does not hurry: it beats every second, and
/// every 200 ms after a failed beat.)
fn all_due(shared: &Shared) -> bool {
    let now = Instant::now();
    let mut registry = shared.registry();
    let mut any = false;
    for entry in registry.entries.values_mut().filter(|e| !e.checked_only) {
        entry.next_due = now;
        any = true;
    }
    any
}

/// Takes every entry due by `horizon` (renewing a little early costs nothing and fills batches).
/// Leases already lost are dropped instead: their holders were told to stop.
fn take_due(shared: &Shared, horizon: Instant) -> Vec<(u64, Arc<Renewal>)> {
    let mut registry = shared.registry();
    let mut due = Vec::new();
    registry.entries.retain(|id, entry| {
        if entry.renewal.lease.is_lost() {
            // Its deadline passed between a failed renewal and the retry: it expired, and is
            // counted as such like one that expires while a renewal is on its way.
            if entry.failing {
                let renewal = &entry.renewal;
                let key = renewal.target.key();
                crate::observe::lease_lost(
                    &renewal.labels,
                    key,
                    crate::observe::Lost::Expired,
                    None,
                );
            }
            return false;
        }
        if !entry.in_flight && entry.next_due <= horizon {
            entry.in_flight = true;
            due.push((*id, entry.renewal.clone()));
        }
        true
    });
    due
}

async fn renew_chunk(
    executor: &Executor,
    chunk: &[(u64, Arc<Renewal>)],
    lease: Duration,
) -> (Instant, crate::Result<Vec<i64>>) {
    let Some((_, first)) = chunk.first() else {
        return (Instant::now(), Ok(Vec::new()));
    };
    let mut call = ScriptCall::new(first.target.script());
    for (_, renewal) in chunk {
        call = renewal.target.keys(call);
    }
    call = call.arg(lease.as_millis() as u64);
    for (_, renewal) in chunk {
        call = renewal.target.arg(call);
    }
    let sent_at = Instant::now();
    let result = executor.run::<Vec<i64>>(&call, first.target.key()).await;
    let result = result.and_then(|renewed| {
        if renewed.len() == chunk.len() {
            Ok(renewed)
        } else {
            Err(crate::Error::unexpected(format!(
                "renewal of {} leases answered {} results",
                chunk.len(),
                renewed.len()
            )))
        }
    });
    (sent_at, result)
}
