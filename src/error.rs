//! The one error type of the crate.

use redis::RedisError;

/// Everything that can go wrong in ferrisson.
///
/// Contention is never an error: `try_lock` and `try_lock_for` answer `Ok(None)` when the lock
/// stays taken.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) {
/// use ferrisson::Error;
///
/// match client.get_lock("orders").try_lock().await {
///     Ok(Some(guard)) => { let _ = guard.unlock().await; }
///     Ok(None) => println!("somebody else holds it"),
///     Err(Error::WrongType { key, .. }) => println!("{key} is not a lock"),
///     Err(other) => println!("failed: {other}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request to Redis failed: the server could not be reached, did not answer in time, or
    /// answered with an error. The message says which (the redis crate's error, shown in full;
    /// it is not repeated as [`source`](std::error::Error::source)).
    ///
    /// A command that timed out may still have run; ferrisson repairs what it can (see the crate
    /// docs, "Faults").
    #[error("redis request failed: {0}")]
    Redis(RedisError),

    /// [`Client::connect`](crate::Client::connect) or
    /// [`ClientBuilder::build`](crate::ClientBuilder::build) could not open a connection to
    /// `address` within the connection timeout: refused, a name that does not resolve, a
    /// password missing or refused, a database index the server does not have, a server that
    /// does not answer. The message says which in one line, and what to do where there is
    /// something to do (a server that requires a password: put it in the URL).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() {
    /// match ferrisson::Client::connect("redis://127.0.0.1:6379").await {
    ///     Ok(client) => drop(client),
    ///     // "cannot connect to redis at 127.0.0.1:6379: the server requires a password
    ///     // (NOAUTH); put it in the URL: redis://:PASSWORD@host:port, ..."
    ///     Err(ferrisson::Error::Connect { address, reason }) => eprintln!("{address}: {reason}"),
    ///     Err(other) => eprintln!("{other}"),
    /// }
    /// # }
    /// ```
    #[error("cannot connect to redis at {address}: {reason}")]
    Connect {
        /// Where the client tried to connect (host and port, never credentials).
        address: String,
        /// Why, in one line: Redis' or the system's reason, or what to do about it.
        reason: String,
    },

    /// The client was closed ([`Client::close`](crate::Client::close)): it takes on no new
    /// acquire or wait. Releases, renewals and reads still work.
    #[error("the client was closed; build a new one to take locks again")]
    Closed,

    /// The calling runtime's Tokio clock is paused (`tokio::time::pause`, or
    /// `#[tokio::test(start_paused = true)]`). The client's timeouts run on the clock of the
    /// runtime that awaits them, and a paused clock jumps to the next timer whenever the
    /// runtime waits for Redis: every timeout would fire at once. So a client is not built
    /// there, and a call made there after the clock was paused fails with this (a call that was
    /// already on its way may have reached Redis, as after a timeout; the client repairs it as
    /// it does then). Connecting before pausing is not enough.
    ///
    /// What works: make the client's calls on a runtime whose clock runs, and await them from
    /// the paused one. The client's own thread, which renews leases and wakes waiters, is never
    /// paused.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// // The body of a `#[tokio::test(start_paused = true)]`: the calls to Redis run on a
    /// // second runtime, in real time, and the test awaits them on its paused one.
    /// let real_time = tokio::runtime::Runtime::new().unwrap();
    /// let connect = ferrisson::Client::connect("redis://127.0.0.1:6379");
    /// let client = real_time.spawn(connect).await.unwrap()?;
    /// let lock = client.get_lock("job");
    /// let guard = real_time.spawn(async move { lock.lock().await }).await.unwrap()?;
    /// tokio::time::sleep(std::time::Duration::from_secs(3600)).await; // paused: no wait
    /// real_time.spawn(guard.unlock()).await.unwrap()?;
    /// real_time.shutdown_background(); // a runtime may not be dropped in async code
    /// # Ok(()) }
    /// ```
    #[error(
        "the Tokio clock is paused (tokio::time::pause or #[tokio::test(start_paused = true)]): ferrisson's timeouts need real time, and on a paused clock they fire at once; connecting before pausing is not enough: make ferrisson's calls on a runtime whose clock runs (see Error::PausedClock)"
    )]
    PausedClock,

    /// A client was made, or a call made, outside a Tokio runtime.
    #[error(
        "ferrisson needs a Tokio runtime: create and use the client inside one (e.g. in an async fn run by #[tokio::main])"
    )]
    NoRuntime,

    /// A [`blocking`](crate::blocking) call was made from async code: inside an `async fn` or
    /// a task (its poll), or inside a `block_on`'s future (the body of `#[tokio::main]` or
    /// `#[tokio::test]`). Blocking there would stall the runtime's other tasks, or deadlock a
    /// current-thread runtime, so nothing was done. Use the async API there (the same client:
    /// [`blocking::Client::as_async`](crate::blocking::Client::as_async)), or make the call where
    /// a thread may block: inside `tokio::task::spawn_blocking` or `tokio::task::block_in_place`,
    /// or on a thread of your own (see [where it may be
    /// called](crate::blocking#where-it-may-be-called-threads-that-may-block)).
    #[error(
        "a ferrisson::blocking call was made from async code (a task, or a block_on's future), where it would block the runtime's thread: use the async API there, or make the call inside spawn_blocking or block_in_place, or on a std::thread"
    )]
    InsideRuntime,

    /// The hold this guard stood for is gone: its lease expired, or the key was deleted or taken
    /// over. Whatever the guard protected may have been touched by somebody else.
    #[error("the lease on lock `{name}` was lost")]
    LockLost {
        /// The lock's name.
        name: String,
    },

    /// Permits a [`PermitGuard`](crate::PermitGuard) stood for are gone: their lease expired
    /// (and the semaphore took them back), or they were released elsewhere. Nothing was given
    /// back twice: a permit is returned to the semaphore once.
    #[error("{lost} of {held} permit(s) on semaphore `{name}` were lost")]
    PermitLost {
        /// The semaphore's name.
        name: String,
        /// How many of the guard's permits were gone.
        lost: usize,
        /// How many permits the guard held.
        held: usize,
    },

    /// [`release_by_id`](crate::RPermitExpirableSemaphore::release_by_id) named a permit the
    /// semaphore does not have out: never taken, released already, or expired.
    #[error("semaphore `{name}` has no permit `{id}` out")]
    UnknownPermit {
        /// The semaphore's name.
        name: String,
        /// The permit id given.
        id: String,
    },

    /// A read holder asked for the write side of the same read-write lock. Waiting would wait
    /// for itself for ever, so it is refused at once (Redisson would hang); release the read
    /// holds first.
    #[error(
        "lock `{name}`: the owner holds read holds, and a read hold cannot be upgraded to the write hold"
    )]
    UpgradeNotSupported {
        /// The lock's name.
        name: String,
    },

    /// With [`ClientBuilder::fail_on_self_wait`](crate::ClientBuilder::fail_on_self_wait): an
    /// acquisition made outside every scope of the lock, for a lock its own task (outside any
    /// task: its own thread) holds, which it would wait for, for ever while that hold is
    /// renewed. Refused at once, before anything was sent: nest instead (inside
    /// [`RLock::with_lock`](crate::RLock::with_lock)'s work or
    /// [`guard.scope(..)`](crate::LockGuard::scope), or take
    /// [`guard.reenter()`](crate::LockGuard::reenter)); a reader that wants the write side
    /// releases its read hold first. See the guide's
    /// [wait for your own hold](crate::guide::semantics#a-wait-for-your-own-hold).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .fail_on_self_wait(true)
    ///     .build()
    ///     .await?;
    /// let lock = client.get_lock("inventory");
    /// let guard = lock.lock().await?;
    /// match lock.lock().await {
    ///     // "lock `inventory`: the acquisition at src/main.rs:12:20 would wait for ever for a
    ///     // hold its own task or thread keeps, taken at src/main.rs:10:22; ..."
    ///     Err(ferrisson::Error::SelfWait { held_at, called_at, .. }) => {
    ///         eprintln!("taken at {held_at}, asked again at {called_at}");
    ///     }
    ///     other => drop(other),
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[error(
        "lock `{name}`: the acquisition at {called_at} would wait for ever for a hold its own task or thread keeps, taken at {held_at}; every acquisition is an owner of its own: to nest, run the work inside `with_lock` or `guard.scope(..)`, or take `guard.reenter()` (a reader that wants to write releases its read hold first)"
    )]
    SelfWait {
        /// The lock's name.
        name: String,
        /// Where the hold it would wait for was taken: `file:line:column` of the acquiring
        /// call (e.g. `src/orders.rs:42:27`).
        held_at: String,
        /// Where the refused acquisition was called, `file:line:column`.
        called_at: String,
    },

    /// Some parts of a [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock) failed to
    /// release (or to acquire); one error per failed part. The other parts were handled all the
    /// same.
    #[error("{} part(s) failed: {}", errors.len(), join(errors))]
    Multiple {
        /// One error per failed part.
        errors: Vec<Error>,
    },

    /// One part of a [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock) failed:
    /// which lock, on which server, and why. [`Error::Multiple`] lists one per failed part.
    #[error("lock `{name}` on {address}: {error}")]
    Part {
        /// The part's lock name.
        name: String,
        /// The server the part's client talks to (host and port, never credentials; the seed
        /// nodes of a cluster, the sentinels' master name).
        address: String,
        /// What went wrong with that part.
        error: Box<Error>,
    },

    /// A [`RedLock`](crate::RedLock) could not reach a majority of its instances: fewer than
    /// `needed` of `total` answered (the others failed or did not answer in time); `failures`
    /// says which and why.
    #[error(
        "only {answered} of {total} redis instances answered; a quorum needs {needed}: {}",
        join(failures)
    )]
    QuorumNotReached {
        /// Instances that answered (granted or refused).
        answered: usize,
        /// The majority: `total / 2 + 1`.
        needed: usize,
        /// Instances of the RedLock.
        total: usize,
        /// One [`Error::Part`] per instance that did not answer: its lock, its server, and its
        /// error (a timeout when it did not answer within the instance timeout).
        failures: Vec<Error>,
    },

    /// With [`ClientBuilder::sync_replicas`](crate::ClientBuilder::sync_replicas): fewer
    /// replicas than wanted acknowledged a grant in time, so the grant was undone (the lock is
    /// not held).
    #[error("only {acked} of {wanted} replica(s) acknowledged the grant in time; it was undone")]
    ReplicasNotSynced {
        /// Replicas that acknowledged the grant.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },

    /// An argument was refused before anything was sent to Redis.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A key that ferrisson needs holds data of another kind. The lock was not changed; a
    /// fencing counter may have moved up (to the server clock), which costs no guarantee.
    #[error("key `{key}` holds data of another type")]
    WrongType {
        /// The key that holds the foreign value.
        key: String,
    },

    /// The client configuration was refused by [`ClientBuilder::build`](crate::ClientBuilder::build).
    #[error("invalid client configuration: {0}")]
    Config(String),

    /// Redis refused a request for lack of permission: the ACL user the client logged in as may
    /// not run that command, touch one of its keys or use that channel. `what` names the request
    /// (a script with its keys, `SCRIPT LOAD`, `GET key`, `SUBSCRIBE channel`), `reason` is
    /// Redis' own message. The README section "Running under a Redis ACL user" has the rule a
    /// client needs.
    ///
    /// A refused command never ran, but Redis refuses a command inside a script only when the
    /// script reaches it and keeps what the script wrote before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) {
    /// use ferrisson::Error;
    ///
    /// match client.get_lock("app:orders").lock().await {
    ///     Ok(guard) => { let _ = guard.unlock().await; }
    ///     Err(Error::PermissionDenied { what, reason }) => {
    ///         eprintln!("the Redis user lacks a permission for {what}: {reason}");
    ///     }
    ///     Err(other) => eprintln!("failed: {other}"),
    /// }
    /// # }
    /// ```
    #[error("redis refused {what}: {reason}")]
    PermissionDenied {
        /// The refused request.
        what: String,
        /// Redis' reason: which command, or that a key or a channel was not permitted.
        reason: String,
    },

    /// Redis answered something ferrisson's scripts never return (a foreign or corrupted script
    /// cache, or a proxy in the way).
    #[error("unexpected reply from redis: {0}")]
    UnexpectedReply(String),

    /// The process got SIGTERM or SIGINT and drains (see
    /// [`Client::close_on_signal`](crate::Client::close_on_signal)): the client takes on no new
    /// acquisition, while the holds it has keep their leases until their work gives them back
    /// or the drain grace runs out. Nothing was sent to Redis. A server answers the request
    /// it could not take as unavailable (an HTTP 503, say), for it to be retried elsewhere.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) {
    /// match client.get_lock("orders:42").lock().await {
    ///     Ok(guard) => { let _ = guard.unlock().await; }
    ///     Err(ferrisson::Error::Draining { signal }) => eprintln!("{signal}: not taking work"),
    ///     Err(other) => eprintln!("failed: {other}"),
    /// }
    /// # }
    /// ```
    #[error(
        "the process is shutting down on {signal}: it takes no new locks (the holds it has finish their work within the drain grace)"
    )]
    Draining {
        /// The signal that started the drain.
        signal: crate::signal::Signal,
    },

    /// [`RedLockGuard::unlock`](crate::RedLockGuard::unlock): the lock is released on a
    /// majority of its instances, so it is free (another RedLock acquisition over the same
    /// instances can win it now), but some instances failed to release their part: down,
    /// unreachable, or too slow. The caller may go on as after a clean unlock; each failed
    /// part frees itself when its lease runs out, or is released in the background if its
    /// instance comes back meanwhile. When fewer than a majority released, `unlock` fails
    /// with [`Error::Multiple`] instead: the lock may stay taken until those leases run out.
    #[error(
        "the RedLock is released on a majority of its instances ({released} of the {granted} that held it), so others can take it now; {} instance(s) failed to release their part, which frees itself when its lease runs out: {}",
        failures.len(),
        join(failures)
    )]
    ReleasedOnMajority {
        /// Instances that released.
        released: usize,
        /// Instances that held the lock (granted it at the acquisition).
        granted: usize,
        /// One [`Error::Part`] per instance that failed: its lock, its server, and its error.
        failures: Vec<Error>,
    },
}

fn join(errors: &[Error]) -> String {
    let shown: Vec<String> = errors.iter().map(Error::to_string).collect();
    shown.join("; ")
}

/// Redis' message when `err` is a refusal for lack of permission: `NOPERM` from a command the
/// client sent, or the error a script stops with when Redis refuses one of its commands (Redis
/// 7.0: `ERR The user executing the script can't ...`; 7.2 and newer, and Valkey: `ERR ACL
/// failure in script: ...`; Redis 6.2 the 7.0 words inside its wrapping, see [`command_error`]).
/// A pipeline's refusal is the first one of its commands'.
pub(crate) fn permission_refusal(err: &RedisError) -> Option<String> {
    let first = first_failure(err.clone());
    // A pipeline of one command keeps its reply's text only in its item.
    let first = match first.clone().into_server_errors() {
        Some(items) if first.detail().is_none() && !items.is_empty() => {
            RedisError::from(items[0].1.clone())
        }
        _ => first,
    };
    let err = command_error(first);
    let detail = err.detail().map(str::to_owned);
    let refused = match err.code() {
        Some("NOPERM") => true,
        Some("ERR") => detail.as_deref().is_some_and(|d| {
            d.starts_with("The user executing the script can't")
                || d.starts_with("ACL failure in script")
        }),
        _ => false,
    };
    refused.then(|| detail.unwrap_or_else(|| err.to_string()))
}

/// The error a command a script ran answered, as the command alone would have answered it,
/// whichever server ran the script; any other error as it is.
///
/// Redis 7 and Valkey answer the command's own code (`WRONGTYPE Operation against ... script:
/// <sha>, on @user_script:1.`). Redis 6.2 wraps it: `ERR Error running script (call to
/// f_<sha>): @user_script:1: WRONGTYPE Operation against ...`, and once more for what Redis
/// itself refused inside the script (an ACL refusal, `READONLY`, an unknown command):
/// `... @user_script:1: @user_script: 1: -READONLY You can't write ...`, or, refused by ACL, with
/// no code at all (`... @user_script: 1: The user executing the script can't ...`, which 7.0
/// answers as `ERR The user executing ...`). Inside a group commit's list, where the script
/// catches the error itself, 6.2's message starts at the inner `@user_script: 1: `. Without
/// this a key of another type, a refusal or a demoted master would read as a plain `ERR` on
/// 6.2 only.
pub(crate) fn command_error(err: RedisError) -> RedisError {
    let (Some(code), Some(detail)) = (err.code(), err.detail()) else {
        return err;
    };
    let text = format!("{code} {detail}");
    let mut rest = text.as_str();
    if let Some(after) = rest.strip_prefix("ERR Error running script (call to ") {
        match after.split_once("): ") {
            Some((_, inner)) => rest = inner,
            None => return err,
        }
    }
    loop {
        let stripped = strip_script_place(rest).unwrap_or(rest);
        let stripped = stripped.strip_prefix('-').unwrap_or(stripped);
        if stripped.len() == rest.len() {
            break;
        }
        rest = stripped;
    }
    if rest.len() == text.len() {
        return err;
    }
    let has_code = rest
        .split(' ')
        .next()
        .is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_uppercase()));
    let line = if has_code {
        format!("-{rest}\r\n")
    } else {
        format!("-ERR {rest}\r\n")
    };
    match redis::parse_redis_value(line.as_bytes()) {
        Ok(redis::Value::ServerError(inner)) => inner.into(),
        _ => err,
    }
}

/// `rest` after a leading `@user_script:<line>: ` or `@user_script: <line>: `, if it has one.
fn strip_script_place(rest: &str) -> Option<&str> {
    let after = rest.strip_prefix("@user_script:")?;
    let after = after.trim_start_matches(' ');
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0).then_some(())?;
    after[digits..].strip_prefix(": ")
}

/// The first failure of a pipeline's (the redis crate lists every failed command, the same
/// error as often as there were commands); any other error as it is.
pub(crate) fn first_failure(err: RedisError) -> RedisError {
    match err.clone().into_server_errors() {
        Some(items) if items.len() > 1 => RedisError::from(items[0].1.clone()),
        _ => err,
    }
}

/// The server's error code of `err`, or of the first failed command of a pipeline.
fn code_of(err: &RedisError) -> Option<String> {
    let first = first_failure(err.clone());
    first.code().map(str::to_owned)
}

/// What [`Error::Connect`] says about `err`: one line, what to do where there is something to
/// do.
pub(crate) fn connect_reason(err: &RedisError) -> String {
    const NOAUTH: &str = "the server requires a password (NOAUTH); put it in the URL: \
         redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL user";
    const WRONGPASS: &str = "the server refused the user name or password in the URL \
         (WRONGPASS): a wrong password or user, a disabled user, or a server without a password";
    let code = code_of(err);
    // Some of the redis crate's errors carry the server's reply only in their text (a
    // cluster's, the sentinels'), some only their own kind.
    let text = first_failure(err.clone()).to_string();
    if code.as_deref() == Some("NOAUTH") || text.contains("NOAUTH") {
        NOAUTH.to_owned()
    } else if code.as_deref() == Some("WRONGPASS")
        || text.contains("WRONGPASS")
        || err.kind() == redis::ErrorKind::AuthenticationFailed
    {
        WRONGPASS.to_owned()
    } else {
        text
    }
}

/// Whether `err` is the server asking for a password, or refusing the one given.
pub(crate) fn auth_refused(err: &RedisError) -> bool {
    matches!(code_of(err).as_deref(), Some("NOAUTH" | "WRONGPASS"))
        || err.kind() == redis::ErrorKind::AuthenticationFailed
}

/// `Result` with ferrisson's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Maps a Redis error of the request `what` names: a refusal for lack of permission becomes
    /// [`Error::PermissionDenied`], the rest as [`from_redis`](Self::from_redis).
    pub(crate) fn from_redis_request(
        err: RedisError,
        key: &str,
        what: impl FnOnce() -> String,
    ) -> Self {
        match permission_refusal(&err) {
            Some(reason) => Error::PermissionDenied {
                what: what(),
                reason,
            },
            None => Error::from_redis(err, key),
        }
    }

    /// Maps a Redis error, naming `key` when Redis says the key holds another type.
    pub(crate) fn from_redis(err: RedisError, key: &str) -> Self {
        if crate::clock::is_paused(&err) {
            return Error::PausedClock;
        }
        let err = command_error(first_failure(err));
        if err.code() == Some("WRONGTYPE") {
            let key = err
                .detail()
                .and_then(|d| d.strip_prefix("key "))
                .and_then(|d| d.split(" holds").next())
                .unwrap_or(key)
                .to_owned();
            return Error::WrongType { key };
        }
        Error::Redis(err)
    }

    /// True when a command may have run on the server although no reply came back.
    pub(crate) fn outcome_unknown(&self) -> bool {
        match self {
            Error::Redis(e) => e.is_io_error() && !e.is_connection_refusal(),
            _ => false,
        }
    }

    /// True when the connection went away, so resending on a fresh one is worth a try.
    pub(crate) fn connection_dropped(&self) -> bool {
        matches!(self, Error::Redis(e) if e.is_connection_dropped() && !e.is_connection_refusal())
    }

    pub(crate) fn unexpected(what: impl std::fmt::Display) -> Self {
        Error::UnexpectedReply(what.to_string())
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
