//! `RReadWriteLock`: Redisson's read-write lock, a read side and a write side on one hash.

use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::lock::handle::ClientLocks;
use crate::lock::ops::LockOps;
use crate::lock::ops::{ReleaseRequest, TAKEOVER_POLL_MS, Want, flag};
use crate::lock::owner::{Owner, Side};
use crate::lock::rlock::RLock;
use crate::script::{
    LOCK_FORCE_UNLOCK, RWLOCK_READ_ACQUIRE, RWLOCK_READ_RELEASE, RWLOCK_REPAIR,
    RWLOCK_WRITE_ACQUIRE, RWLOCK_WRITE_RELEASE, RWLOCK_WRITER_LEAVE, ScriptCall,
};
use crate::watchdog::RenewTarget;
use crate::{names, slots};

/// The message that wakes every waiter: a write hold ended (readers may all enter).
const WAKE_ALL: &str = "1";

/// A read-write lock, Redisson's `RReadWriteLock`: many readers or one writer.
///
/// [`read_lock`](Self::read_lock) and [`write_lock`](Self::write_lock) are [`RLock`]s: each read
/// or write acquisition is an owner of its own and follows the matrix (a reader beside a writer
/// in one task waits for it). Nested in a hold's scope (`with_lock`'s work, a guard's
/// [`scope`](crate::LockGuard::scope)) both sides are one owner: a read nested in the writer's
/// scope is the writer's own and granted at once (write→read reentry), and releasing the write
/// hold while still reading downgrades the lock to a read lock. A write nested in a reader's
/// scope gets [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) at once instead
/// of waiting for itself.
///
/// In Redis it is a hash named like the lock with `mode` = `read`|`write`, `<owner>` → read
/// holds and `<owner>:write` → write holds; each read hold has its own key
/// `{name}:<owner>:rwlock_timeout:<k>` with its own lease, and the hash lives as long as the
/// longest hold. The watchdog renews only this client's own read holds, so a crashed reader's
/// holds expire even while other readers go on. Releases publish on `redisson_rwlock:{name}`:
/// `1` (wake everybody) when a write hold ends, `0` when the last reader leaves (`1` under
/// [`RwPolicy::PreferWriters`] while a writer waits).
///
/// Under the default [`RwPolicy::Redisson`], readers are not fair to writers: a steady stream of
/// overlapping readers keeps a writer waiting (as in Redisson). A handle from
/// [`Client::get_read_write_lock_with`](crate::Client::get_read_write_lock_with) and [`RwPolicy::PreferWriters`] lets a waiting writer
/// hold new readers back instead.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let doc = client.get_read_write_lock("doc:7");
/// let read = doc.read_lock().lock().await?;   // shared with other readers
/// read.unlock().await?;
/// let write = doc.write_lock().lock().await?; // alone
/// write.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RReadWriteLock {
    read: RLock,
    write: RLock,
    policy: RwPolicy,
}

impl RReadWriteLock {
    pub(crate) fn new(
        core: Arc<Core>,
        locks: Arc<ClientLocks>,
        name: &str,
        policy: RwPolicy,
    ) -> Self {
        // A mark lives as long as a fair waiter's place: the same promise (a live waiter keeps
        // it, a dead one loses it within that time), so the same setting.
        let mark = (policy == RwPolicy::PreferWriters).then_some(core.config.fair_queue.timeout);
        let sides = RwNames::new(name, mark);
        let read = RLock::of(
            core.clone(),
            locks.clone(),
            Box::new(ReadOps(sides.clone())),
        );
        let write = RLock::of(core, locks, Box::new(WriteOps(sides)));
        RReadWriteLock {
            read,
            write,
            policy,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// Whether this handle's writers hold new readers back while they wait (see [`RwPolicy`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use ferrisson::RwPolicy;
    ///
    /// let rw = client.get_read_write_lock_with("doc:7", RwPolicy::PreferWriters);
    /// assert_eq!(rw.policy(), RwPolicy::PreferWriters);
    /// assert_eq!(client.get_read_write_lock("doc:7").policy(), RwPolicy::Redisson);
    /// # Ok(()) }
    /// ```
    pub fn policy(&self) -> RwPolicy {
        self.policy
    }

    /// What Redis holds for this lock now: mode, the writer, each reader with each read
    /// hold's lease, waiting writers' marks, pending revocation requests and subscribers, read
    /// in one round trip that changes nothing. See
    /// [`RwLockSnapshot`](crate::inspect::RwLockSnapshot).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) when a key of the lock holds another type,
    /// or the name holds another kind of lock; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a malformed name; [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let rw = client.get_read_write_lock("catalog").snapshot().await?;
    /// println!("{:?}: {} reader(s), writer {:?}", rw.mode, rw.readers.len(), rw.writer);
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> crate::Result<crate::inspect::RwLockSnapshot> {
        self.read.check()?;
        crate::inspect::rwlock(self.read.core(), self.name()).await
    }

    /// The read side: shared among readers, excluded by a writer (except a read nested in the
    /// writer's scope, which is the writer's own).
    pub fn read_lock(&self) -> RLock {
        self.read.clone()
    }

    /// The write side: excludes every other reader and writer; nested in a reader's scope it is
    /// refused at once (a reader cannot upgrade).
    pub fn write_lock(&self) -> RLock {
        self.write.clone()
    }
}

/// Whether waiting writers hold new readers back: the policy of one [`RReadWriteLock`] handle,
/// chosen with [`Client::get_read_write_lock_with`](crate::Client::get_read_write_lock_with).
///
/// # Cancel safety
///
/// Every acquire of either policy is cancel safe as [`RLock::lock`]: dropping the future leaves
/// no hold behind, and fencing tokens are handed out alike. Under
/// [`PreferWriters`](Self::PreferWriters) a dropped writer's wait also takes its mark away, from
/// a background task right after the drop; should that removal not reach Redis, the mark runs
/// out by itself within the fair lock queue timeout.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::RwPolicy;
///
/// // Readers come and go all the time; the hourly rebuild must still get its turn.
/// let index = client.get_read_write_lock_with("search-index", RwPolicy::PreferWriters);
/// let rebuild = index.write_lock().lock().await?; // new readers wait from now on
/// rebuild.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RwPolicy {
    /// Redisson's behaviour, layout and messages, unchanged: a reader enters whenever no writer
    /// holds the lock, even while writers wait. Readers that overlap without a pause keep a
    /// writer out for as long as they go on.
    #[default]
    Redisson,
    /// A waiting writer holds new readers back until it has had its turn.
    ///
    /// **How.** While its `lock()` or `try_lock_for` waits, the writer keeps a mark in the
    /// sorted set `{name}:ferrisson_writers` (in the lock's cluster slot): its owner, scored with
    /// the Redis server time until which the mark lives. The write-acquire script leaves or
    /// refreshes the mark on every refused attempt, and the waiting writer attempts again at
    /// least every third of the mark's life, which is the client's
    /// [fair lock queue timeout](crate::ClientBuilder::fair_lock_queue_timeout) (5 s by
    /// default: the same promise as a fair waiter's place, so the same setting); the key expires
    /// with its longest-living mark. The read-acquire script of this policy refuses a *new*
    /// reader while a live mark exists and answers with the mark's remaining life, so a reader
    /// held back sleeps until a wake-up or that time, never polling faster. Readers already
    /// inside finish; when the last one leaves, its release publishes `1` (instead of
    /// Redisson's `0`) because marks exist, which wakes every waiter of this client, the writer
    /// among them (a `0` wakes one, maybe a held-back reader that is refused again). The grant
    /// takes the writer's mark away, and the write release's `1` wakes the readers.
    ///
    /// **No deadlock on reentry.** An owner that already holds read holds still gets more, and
    /// the writer itself may take read holds (write→read): a reader inside its critical section
    /// that enters again must not wait for a writer that waits for it.
    ///
    /// **Giving up.** A wait that ends without the lock (its budget ran out, it failed, or the
    /// `lock()` future was dropped: see Cancel safety above) takes its mark away at once and, when no other live mark is left and no writer holds the lock, publishes
    /// `1` so held-back readers enter. A writer whose process dies (or whose removal never
    /// reaches Redis) holds readers back until its mark runs out: at most the fair lock queue
    /// timeout. `try_lock()` never leaves a mark.
    ///
    /// **Java Redisson and the default policy ignore marks.** Java readers and
    /// [`RwPolicy::Redisson`] readers on the same name are not held back, so a steady stream of
    /// them still starves the writer (which meanwhile holds back the readers of this policy).
    /// The messages stay Redisson's: `1` is what Java waiters already read as "a write hold
    /// ended, everybody try again", so at worst a Java waiter tries once more for nothing. A
    /// last read release by a Java or default-policy reader publishes `0`, which may wake a
    /// held-back reader of this client instead of its writer; the writer then finds the lock
    /// free at its next timed attempt, at most a third of the mark's life later.
    ///
    /// **Cost.** Readers of this policy look for marks inside the same script call (no extra
    /// round trip; without marks it is one `TYPE`, about 0.4 µs of Redis time in
    /// `cargo bench --bench lock`), and read the server time only when marks exist; a last read
    /// release checks whether marks exist. A
    /// waiting writer makes one script call per third of the mark's life besides its wake-ups,
    /// plus one when it gives up. Writers are preferred, not queued: writers that follow each
    /// other without a pause hold readers of this policy back for as long as they go on.
    PreferWriters,
}

/// The sorted set of waiting writers' marks: `{name}:ferrisson_writers`.
fn writer_marks(name: &str) -> String {
    format!("{}:ferrisson_writers", names::suffix_base(name))
}

/// The names of a read-write lock (the owner's own come from [`Owner::rw`]).
#[derive(Debug, Clone)]
struct RwNames {
    /// Writer preference only: the waiting writers' marks, `{name}:ferrisson_writers`, and how
    /// long a mark lives without its writer calling again.
    writers: Option<(String, Duration)>,
    name: Arc<str>,
    channel: Arc<str>,
    /// The fencing counter of the lock's cluster slot.
    counter: String,
    /// `{name}`: what every owner's read-hold timeout keys start with.
    base: String,
}

impl RwNames {
    fn new(name: &str, mark: Option<Duration>) -> Self {
        RwNames {
            writers: mark.map(|life| (writer_marks(name), life)),
            name: Arc::from(name),
            channel: names::rwlock_channel(name).into(),
            counter: slots::token_counter(name),
            base: names::suffix_base(name),
        }
    }

    fn repair(
        &self,
        owner: &Owner,
        field: &str,
        holds: u32,
        side: &str,
        lease_ms: u64,
    ) -> ScriptCall {
        ScriptCall::new(&RWLOCK_REPAIR)
            .key(&*self.name)
            .key(&*self.channel)
            .key(&**owner.read_timeouts())
            .arg(field)
            .arg(holds)
            .arg(side)
            .arg(lease_ms)
    }

    fn force_unlock(&self) -> ScriptCall {
        ScriptCall::new(&LOCK_FORCE_UNLOCK)
            .key(&*self.name)
            .key(&*self.channel)
            .arg(WAKE_ALL)
    }
}

#[derive(Debug)]
struct ReadOps(RwNames);

impl LockOps for ReadOps {
    fn family(&self) -> &'static str {
        "rw"
    }

    fn kind(&self) -> &'static str {
        "read"
    }

    fn name(&self) -> &Arc<str> {
        &self.0.name
    }

    fn channel(&self, _owner: &Owner) -> Arc<str> {
        self.0.channel.clone()
    }

    fn renewal(&self, owner: &Owner) -> RenewTarget {
        RenewTarget::ReadHolds {
            key: self.0.name.clone(),
            owner: owner.id().clone(),
            timeouts: owner.read_timeouts().clone(),
        }
    }

    fn acquire(&self, owner: &Owner, lease_ms: u64, want: Want) -> ScriptCall {
        let n = &self.0;
        let id: &str = owner.id();
        ScriptCall::new(&RWLOCK_READ_ACQUIRE)
            .key(&*n.name)
            .key_concat(&names::read_timeouts_pieces(&n.name, id))
            .key(&n.counter)
            .key(n.writers.as_ref().map(|(key, _)| key))
            .arg(id)
            .arg_concat(&names::write_field_pieces(id))
            .arg(lease_ms)
            .arg(want.hold_flag())
            .arg(want.takeover.then_some(TAKEOVER_POLL_MS))
    }

    fn release(&self, owner: &Owner, _lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall {
        let n = &self.0;
        let id: &str = owner.id();
        ScriptCall::new(&RWLOCK_READ_RELEASE)
            .key(&*n.name)
            .key(&*n.channel)
            .key_concat(&names::read_timeouts_pieces(&n.name, id))
            .key_concat(&names::unlock_latch_pieces(&n.name, request.id))
            .key(n.writers.as_ref().map(|(key, _)| key))
            .arg(id)
            .arg(request.latch_ttl_ms)
            .arg(&n.base)
            .arg(request.resend_flag())
    }

    fn repair(&self, owner: &Owner, holds: u32, lease_ms: u64) -> ScriptCall {
        self.0.repair(owner, owner.id(), holds, "read", lease_ms)
    }

    fn force_unlock(&self) -> ScriptCall {
        self.0.force_unlock()
    }
}

#[derive(Debug)]
struct WriteOps(RwNames);

impl LockOps for WriteOps {
    fn family(&self) -> &'static str {
        "rw"
    }

    fn kind(&self) -> &'static str {
        "write"
    }

    fn name(&self) -> &Arc<str> {
        &self.0.name
    }

    fn side(&self) -> Side {
        Side::Write
    }

    fn channel(&self, _owner: &Owner) -> Arc<str> {
        self.0.channel.clone()
    }

    fn renewal(&self, owner: &Owner) -> RenewTarget {
        RenewTarget::HashField {
            key: self.0.name.clone(),
            field: owner.write_field().clone(),
        }
    }

    /// Replies `{3, 0}` when the owner holds read holds but no write hold: an upgrade, which
    /// would wait for itself, is refused.
    ///
    /// With writer preference, a refused caller that waits leaves (or refreshes) its mark.
    fn acquire(&self, owner: &Owner, lease_ms: u64, want: Want) -> ScriptCall {
        let waiting = want.waiting;
        let n = &self.0;
        let id: &str = owner.id();
        let call = ScriptCall::new(&RWLOCK_WRITE_ACQUIRE)
            .key(&*n.name)
            .key(&n.counter)
            .arg_concat(&names::write_field_pieces(id))
            .arg(lease_ms)
            .arg(id)
            .arg(&n.base)
            .arg(want.hold_flag());
        let call = match &n.writers {
            Some((key, life)) => call
                .key(key)
                .arg(flag(waiting))
                .arg(life.as_millis() as u64),
            None if want.takeover => call.arg("0").arg("0"),
            None => call,
        };
        call.arg(want.takeover.then_some(TAKEOVER_POLL_MS))
    }

    /// A waiting writer calls again at least every third of its mark's life, so the mark of a
    /// live writer never runs out (a lost message never lets it, either).
    fn max_nap(&self) -> Option<Duration> {
        self.0.writers.as_ref().map(|(_, life)| *life / 3)
    }

    /// With writer preference, a wait that ends without the lock (given up, failed, or dropped)
    /// takes its mark away: [`leave`](LockOps::leave) runs, in the background when dropped.
    fn queues(&self) -> bool {
        self.0.writers.is_some()
    }

    fn leave(&self, owner: &Owner) -> Option<ScriptCall> {
        let n = &self.0;
        n.writers.as_ref().map(|(key, _)| {
            ScriptCall::new(&RWLOCK_WRITER_LEAVE)
                .key(&*n.name)
                .key(key)
                .key(&*n.channel)
                .arg(&**owner.id())
        })
    }

    fn release(&self, owner: &Owner, lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall {
        let n = &self.0;
        let id: &str = owner.id();
        ScriptCall::new(&RWLOCK_WRITE_RELEASE)
            .key(&*n.name)
            .key(&*n.channel)
            .key_concat(&names::read_timeouts_pieces(&n.name, id))
            .key_concat(&names::unlock_latch_pieces(&n.name, request.id))
            .arg_concat(&names::write_field_pieces(id))
            .arg(lease_ms)
            .arg(request.latch_ttl_ms)
            .arg(id)
            .arg(request.resend_flag())
    }

    fn repair(&self, owner: &Owner, holds: u32, lease_ms: u64) -> ScriptCall {
        self.0
            .repair(owner, owner.write_field(), holds, "write", lease_ms)
    }

    fn field<'a>(&self, owner: &'a Owner) -> &'a str {
        owner.write_field()
    }

    fn force_unlock(&self) -> ScriptCall {
        self.0.force_unlock()
    }
}
