//! Group commit: operations of one kind that callers send while calls of the kind are on their
//! way to the same server (the same cluster slot), as many as a lane lets out at once, wait, and
//! leave together in one call of the kind's list form when one comes back.
//!
//! Redis's one thread is what many tasks locking different keys run out of first, and it pays a
//! fixed cost for every script call (about 1.3 µs on Redis 7.0, a fifth of a lock cycle's 12.5
//! µs, with TIME another 1 µs a grant; `lua/list_head.lua`). A list pays them once. A lone
//! caller never waits for company: its operation goes out at once, as its own call, and only
//! operations that find their lane's calls all on their way queue, for at most one round trip.
//!
//! Operations of different owners may run in another order than they were queued in (two lists
//! of a lane can be on their way at once). Nothing depends on that order: one owner's
//! operations on one lock follow one another (its hold count's mutex), and a call after an
//! operation given up on waits for it (below).
//!
//! Liveness: a caller on a current-thread runtime never takes a lane's call (nobody may drive
//! its task again once the reply is in, and the lane would stay taken), and a queue whose lane
//! took no list from it for [`QUEUE_PATIENCE`] goes out as one more call of the lane, so no
//! stalled caller holds the others up for longer than that.
//!
//! Each operation keeps its own reply and its own error. One cancelled while it waits is taken
//! out and never reaches Redis; one cancelled after its list was sent leaves the object
//! *unsettled* until the list's reply is in, and every later call on the same object waits for
//! that first (the repair of a cancelled acquire must not overtake the acquire).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};

use super::call::{LuaScript, ScriptCall};
use crate::connection::Connection;

/// How many calls of one lane may be on their way at once before operations queue. Two keep
/// Redis busy while the client reads the other's replies: on workload 4 (64 tasks, a key each;
/// `benches/compare`, 3 interleaved runs) two gave 72,400 cycles/s at the median, one 69,000
/// and four 71,600 (with one, about 18 operations went in a call).
const CALLS_PER_LANE: usize = 2;

/// How long a queue waits for its lane before it goes out as one more call of the lane: lists
/// come back within a round trip or two, so this is reached only when the callers holding the
/// lane's calls are not being run (a future kept but not polled, a runtime blocked in synchronous
/// work). One timer serves a queue: its first operation's.
const QUEUE_PATIENCE: Duration = Duration::from_millis(250);

/// The most operations one list call carries: more wait for the next call (a list runs for
/// about 5 µs an operation, during which Redis serves nobody else).
const MOST_PER_CALL: usize = 64;

/// Whether the caller runs on a multi-thread runtime, whose workers run its task again as
/// soon as its reply is in.
fn on_multi_thread_runtime() -> bool {
    Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Where an operation is: queued, taken into a list (sent, or about to be), taken out of the
/// queue by its caller's cancellation, cancelled by its caller after it was taken, or answered.
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const CANCELLED: u8 = 2;
const ABANDONED: u8 = 3;
const DONE: u8 = 4;

/// The group commit of one executor: its lanes, one per kind and slot, and the operations whose
/// callers gave up on them after they were sent.
pub(super) struct Commit {
    conn: Arc<Connection>,
    cap: Duration,
    sharded: bool,
    /// Lanes are per cluster slot (a script may touch one slot only), one lane otherwise.
    per_slot: bool,
    lanes: Mutex<HashMap<LaneKey, Lane>>,
    unsettled: Arc<Unsettled>,
    /// Where a list is sent from when the caller that passes it on is not on a multi-thread
    /// runtime (the client's thread).
    fallback: Option<Handle>,
}

/// A lane: the script's address and the cluster slot.
type LaneKey = (usize, u16);

#[derive(Default)]
struct Lane {
    /// Calls of this lane on their way.
    in_flight: usize,
    queue: Vec<Queued>,
    /// An operation in the queue carries the lane's patience timer (see [`QUEUE_PATIENCE`]):
    /// the first to queue after the lane's last list was taken, so one timer serves a queue.
    timed: bool,
    /// How many lists were taken from the queue: a timer that finds it moved has nothing to do.
    taken: u64,
}

/// An operation waiting for its lane, and where its reply goes.
struct Queued {
    call: ScriptCall,
    op: Arc<Op>,
    reply: Option<oneshot::Sender<RedisResult<Value>>>,
    unsettled: Arc<Unsettled>,
}

impl Queued {
    /// Hands the operation its reply; the object is settled then.
    fn answer(mut self, result: RedisResult<Value>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(result);
        }
        self.op.done(&self.unsettled);
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        // Never answered (its list was dropped with its runtime, or it was cancelled while
        // queued): its caller, if still there, hears that the outcome is unknown, and the object
        // is settled as far as this client can tell.
        if self.op.state.load(Ordering::Acquire) != DONE {
            self.op.done(&self.unsettled);
        }
    }
}

/// One operation's state, shared by its caller and the lane.
struct Op {
    state: AtomicU8,
    /// Told when the operation is answered.
    landed: Notify,
    /// The object it acts on (its first key).
    object: Box<[u8]>,
}

impl Op {
    fn done(&self, unsettled: &Unsettled) {
        let before = self.state.swap(DONE, Ordering::AcqRel);
        self.landed.notify_waiters();
        if before == ABANDONED {
            unsettled.remove(self);
        }
    }

    async fn landed(&self) {
        loop {
            let landed = self.landed.notified();
            if self.state.load(Ordering::Acquire) == DONE {
                return;
            }
            landed.await;
        }
    }
}

/// Operations sent in a list whose callers gave up on them before the reply came.
#[derive(Default)]
struct Unsettled {
    count: AtomicUsize,
    ops: Mutex<Vec<Arc<Op>>>,
}

impl Unsettled {
    fn ops(&self) -> MutexGuard<'_, Vec<Arc<Op>>> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remove(&self, op: &Op) {
        let mut ops = self.ops();
        if let Some(at) = ops.iter().position(|o| std::ptr::eq(&**o, op)) {
            ops.swap_remove(at);
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// How a call goes out: alone (the lane was idle; the turn passes the lane on when dropped), or
/// in a list, whose reply the caller awaits.
pub(super) enum Entry {
    Alone(Turn),
    Listed(Waiting),
}

impl Commit {
    pub(super) fn new(
        conn: Arc<Connection>,
        cap: Duration,
        sharded: bool,
        fallback: Option<Handle>,
    ) -> Self {
        let per_slot = conn.target().is_cluster();
        Commit {
            conn,
            cap,
            sharded,
            per_slot,
            lanes: Mutex::default(),
            unsettled: Arc::default(),
            fallback,
        }
    }

    fn lanes(&self) -> MutexGuard<'_, HashMap<LaneKey, Lane>> {
        // Every change to a lane is made whole before the lock is let go.
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no operation on `call`'s object that a caller gave up on is still on its way.
    pub(super) async fn settle(&self, call: &ScriptCall) {
        if self.unsettled.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let object = call.first_key();
        let waits: Vec<Arc<Op>> = self
            .unsettled
            .ops()
            .iter()
            .filter(|op| &*op.object == object)
            .cloned()
            .collect();
        for op in waits {
            op.landed().await;
        }
    }

    /// Sends `call` alone when its lane is idle, else queues it for the lane's next list.
    /// `None`: the script has no list form.
    pub(super) fn enter(self: &Arc<Self>, call: &ScriptCall) -> Option<Entry> {
        let key = self.lane(call)?;
        if !on_multi_thread_runtime() {
            return None;
        }
        let mut lanes = self.lanes();
        let lane = lanes.entry(key).or_default();
        if lane.in_flight < CALLS_PER_LANE {
            lane.in_flight += 1;
            return Some(Entry::Alone(Turn {
                commit: self.clone(),
                key,
            }));
        }
        let op = Arc::new(Op {
            state: AtomicU8::new(QUEUED),
            landed: Notify::new(),
            object: call.first_key().into(),
        });
        let (reply, rx) = oneshot::channel();
        lane.queue.push(Queued {
            call: call.clone(),
            op: op.clone(),
            reply: Some(reply),
            unsettled: self.unsettled.clone(),
        });
        let patience = (!std::mem::replace(&mut lane.timed, true))
            .then(|| (Box::pin(tokio::time::sleep(QUEUE_PATIENCE)), lane.taken));
        Some(Entry::Listed(Waiting {
            rx,
            op,
            commit: self.clone(),
            key,
            patience,
            answered: false,
        }))
    }

    /// The lane of `call`: its kind's list form and, on a cluster, its slot.
    fn lane(&self, call: &ScriptCall) -> Option<LaneKey> {
        let list = call.script.listed()?;
        let slot = if self.per_slot {
            crate::slots::key_slot(&String::from_utf8_lossy(call.first_key())) as u16
        } else {
            0
        };
        Some((list as *const LuaScript as usize, slot))
    }

    /// The lane's call came back (or its caller gave up on it): the next list goes, or the lane
    /// is idle.
    fn pass(self: &Arc<Self>, key: LaneKey) {
        let Some(list) = self.take(key) else {
            return;
        };
        let sending = Sending {
            commit: self.clone(),
            key,
            list,
            finished: false,
            on_fallback: false,
        };
        let work = sending.run();
        // A multi-thread runtime's workers drive the list as soon as it is spawned. A
        // current-thread runtime runs only while its owner drives it (`block_on`), which may be
        // never again, and other runtimes' operations wait in the list: those lists go from the
        // client's thread.
        let here = Handle::try_current()
            .ok()
            .filter(|_| on_multi_thread_runtime());
        match here.or_else(|| self.fallback.clone()) {
            Some(runtime) => drop(runtime.spawn(work)),
            // Nowhere to send from: dropped, the list answers its callers that the outcome is
            // unknown (nothing was sent) and frees the lane.
            None => drop(work),
        }
    }

    /// The lane's calls have not come back for [`QUEUE_PATIENCE`] while operations queued (their
    /// callers are not being run): the queue leaves now, as one more call of the lane.
    /// `taken`: the lane's list count when the timer was set; the queue has moved if it changed.
    fn unstick(self: &Arc<Self>, key: LaneKey, taken: u64) {
        {
            let mut lanes = self.lanes();
            let Some(lane) = lanes.get_mut(&key) else {
                return;
            };
            let queued = |q: &Queued| q.op.state.load(Ordering::Acquire) == QUEUED;
            if lane.taken != taken || !lane.queue.iter().any(queued) {
                return;
            }
            lane.in_flight += 1;
        }
        tracing::debug!("a lane's calls took {QUEUE_PATIENCE:?}; its queue goes as one more call");
        self.pass(key);
    }

    /// The lane's next list, or `None` after marking it idle.
    fn take(&self, key: LaneKey) -> Option<Vec<Queued>> {
        let mut lanes = self.lanes();
        let lane = lanes.get_mut(&key)?;
        // The timer's operation is in this list or was cancelled: the next to queue takes it on.
        lane.timed = false;
        lane.taken += 1;
        loop {
            let end = lane.queue.len().min(MOST_PER_CALL);
            let list: Vec<Queued> = lane
                .queue
                .drain(..end)
                .filter(|q| {
                    q.op.state
                        .compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                })
                .collect();
            if !list.is_empty() {
                return Some(list);
            }
            if lane.queue.is_empty() {
                lane.in_flight -= 1;
                if lane.in_flight == 0 {
                    lanes.remove(&key);
                }
                return None;
            }
        }
    }

    /// Sends `list`, answering each operation its own reply.
    async fn send(&self, list: Vec<Queued>) {
        if let [only] = list.as_slice() {
            let result = self.send_one(&only.call).await;
            for queued in list {
                queued.answer(result.clone());
            }
            return;
        }
        let calls: Vec<&ScriptCall> = list.iter().map(|q| &q.call).collect();
        let script = calls[0]
            .script
            .listed()
            .expect("queued calls have a list form");
        let cmd = ScriptCall::list_evalsha(script, &calls, self.sharded);
        // NOSCRIPT: nothing ran, so the whole list goes again.
        let result = self.send_loading(&cmd, script).await;
        match result.map(|replies| split(replies, list.len())) {
            Ok(Ok(replies)) => {
                // A write refused inside the list (READONLY: a sentinel's master was demoted)
                // tells what a refused call alone would: the connection goes to the new master.
                if replies
                    .iter()
                    .any(|r| r.as_ref().is_err_and(|e| self.conn.target().moved_away(e)))
                {
                    self.conn.reopen();
                }
                for (queued, reply) in list.into_iter().zip(replies) {
                    queued.answer(reply);
                }
            }
            Ok(Err(e)) | Err(e) => {
                for queued in list {
                    queued.answer(Err(e.clone()));
                }
            }
        }
    }

    async fn send_one(&self, call: &ScriptCall) -> RedisResult<Value> {
        self.send_loading(&call.evalsha(self.sharded), call.script)
            .await
    }

    /// Sends an EVALSHA of `script`; on NOSCRIPT (the script did not run) sends it again once,
    /// as an EVAL of its source (see [`super::after_noscript`]).
    async fn send_loading(&self, cmd: &redis::Cmd, script: &LuaScript) -> RedisResult<Value> {
        match self.conn.send(cmd, self.cap).await {
            Err(e) if super::is_noscript(&e) => {
                super::after_noscript(&self.conn, self.cap, cmd, script, self.sharded).await
            }
            other => other,
        }
    }
}

/// Splits a list form's reply into the replies of its `n` operations. A reply of another shape
/// is an error for all of them, and their outcome unknown (they may have run).
fn split(replies: Value, n: usize) -> Result<Vec<RedisResult<Value>>, RedisError> {
    let unexpected = |what: &str| -> RedisError {
        std::io::Error::other(format!("a list of {n} script calls answered {what}")).into()
    };
    let Value::Array(items) = replies else {
        return Err(unexpected(&format!("{replies:?}")));
    };
    if items.len() != 2 * n {
        return Err(unexpected(&format!("{} values", items.len())));
    }
    let mut out = Vec::with_capacity(n);
    let mut items = items.into_iter();
    while let (Some(tag), Some(reply)) = (items.next(), items.next()) {
        out.push(match (tag, reply) {
            // Lua's false, which stands for nil here: RESP3 connections read it as a boolean.
            (Value::Int(0), Value::Boolean(false)) => Ok(Value::Nil),
            (Value::Int(0), reply) => Ok(reply),
            (Value::Int(1), Value::BulkString(message)) => Err(server_error(&message)),
            (tag, reply) => return Err(unexpected(&format!("{tag:?} {reply:?}"))),
        });
    }
    Ok(out)
}

/// The error Redis would have answered for `message` (`CODE detail`) had the operation been a
/// call of its own.
fn server_error(message: &[u8]) -> RedisError {
    let mut line = Vec::with_capacity(message.len() + 3);
    line.push(b'-');
    line.extend(
        message
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    line.extend_from_slice(b"\r\n");
    match redis::parse_redis_value(&line) {
        Ok(Value::ServerError(e)) => e.into(),
        _ => RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "script error",
            String::from_utf8_lossy(message).into_owned(),
        )),
    }
}

/// A list on its way, and the lane it holds: it sends the lane's lists until the lane's queue
/// is empty. Dropped before that (its runtime ended), it answers every operation left that the
/// outcome is unknown and frees the lane.
struct Sending {
    commit: Arc<Commit>,
    key: LaneKey,
    /// The next list to send (empty: the next is taken from the queue).
    list: Vec<Queued>,
    finished: bool,
    /// Runs on the client's thread already.
    on_fallback: bool,
}

impl Sending {
    async fn run(mut self) {
        loop {
            if self.list.is_empty() {
                match self.commit.take(self.key) {
                    Some(next) => self.list = next,
                    None => {
                        self.finished = true;
                        return;
                    }
                }
            }
            let list = std::mem::take(&mut self.list);
            self.commit.send(list).await;
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Dropped on its way: the runtime it ran on is ending. The list being sent, if any,
        // went with the future that sent it, and its operations hear that their outcome is
        // unknown. Operations not sent yet go on from the client's thread; if that is gone
        // too, they are dropped unanswered (outcome unknown, nothing sent) and the lane is idle.
        if !self.on_fallback
            && let Some(runtime) = self.commit.fallback.clone()
        {
            let rest = Sending {
                commit: self.commit.clone(),
                key: self.key,
                list: std::mem::take(&mut self.list),
                finished: false,
                on_fallback: true,
            };
            self.finished = true;
            drop(runtime.spawn(rest.run()));
            return;
        }
        drop(std::mem::take(&mut self.list));
        while let Some(list) = self.commit.take(self.key) {
            drop(list);
        }
    }
}

/// The lane of a call sent alone: passed on when the call is answered or given up.
pub(super) struct Turn {
    commit: Arc<Commit>,
    key: LaneKey,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.commit.pass(self.key);
    }
}

/// The reply of an operation sent in a list. Dropped before it is in, the operation is taken out
/// of its lane's queue if it is still there, or else counts as unsettled until it is answered.
pub(super) struct Waiting {
    rx: oneshot::Receiver<RedisResult<Value>>,
    op: Arc<Op>,
    commit: Arc<Commit>,
    key: LaneKey,
    /// The lane's patience timer, when this operation carries it (see [`QUEUE_PATIENCE`]), and
    /// the lane's list count when it was set.
    patience: Option<(Pin<Box<tokio::time::Sleep>>, u64)>,
    /// The reply is in (or the operation left the queue): nothing to settle when dropped.
    answered: bool,
}

impl Future for Waiting {
    type Output = RedisResult<Value>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(reply) = Pin::new(&mut self.rx).poll(cx) {
            self.answered = true;
            return Poll::Ready(reply.unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the task sending this call with others ended before their reply came",
                )
                .into())
            }));
        }
        if let Some((patience, taken)) = self.patience.as_mut()
            && patience.as_mut().poll(cx).is_ready()
        {
            let taken = *taken;
            self.patience = None;
            // Nothing taken since the timer was set: the lane is stuck behind callers that are
            // not being run. Once taken, the reply comes within the list's own time cap.
            self.commit.unstick(self.key, taken);
        }
        Poll::Pending
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if let Some((patience, taken)) = self.patience.take() {
            // The lane's timer goes with this operation: it is left to run for the others.
            let (commit, key) = (self.commit.clone(), self.key);
            let timer = async move {
                patience.await;
                commit.unstick(key, taken);
            };
            if let Some(runtime) = Handle::try_current()
                .ok()
                .or_else(|| self.commit.fallback.clone())
            {
                drop(runtime.spawn(timer));
            }
        }
        let state = &self.op.state;
        if state
            .compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
        let unsettled = &self.commit.unsettled;
        let mut ops = unsettled.ops();
        if state
            .compare_exchange(TAKEN, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            ops.push(self.op.clone());
            unsettled.count.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
