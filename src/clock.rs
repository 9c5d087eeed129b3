//! Telling a paused Tokio clock (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`)
//! from a slow server.
//!
//! The client's timeouts run on the clock of the runtime that awaits them. A paused clock
//! jumps ahead to the next timer whenever the runtime has nothing to run, and a runtime waiting
//! for a reply from Redis has nothing to run: every timeout fires at once, and would read as
//! "Redis did not answer". Each timeout that fires, and each command before it is sent, asks
//! [`paused`] first, so the caller hears what is really wrong ([`Error::PausedClock`]).
//!
//! Only the calling runtime's clock matters: the client's own thread runs its own runtime,
//! whose clock nobody pauses.
//!
//! [`Error::PausedClock`]: crate::Error::PausedClock

use std::time::Instant;

use redis::RedisError;

/// Whether the current runtime's clock is paused: it reads the same twice, and still once real
/// time has moved on. A running Tokio clock reads the real clock (shifted by however long it
/// was paused before, if it was), so it moves as soon as that does; two reads that happen to
/// fall within one tick of a coarse real clock are told apart by waiting for its next tick.
/// Costs one more read of the clock when it runs.
pub(crate) fn paused() -> bool {
    let first = tokio::time::Instant::now();
    if tokio::time::Instant::now() != first {
        return false;
    }
    let real = Instant::now();
    // The real clock ticks within microseconds at worst; the bound only guards against a
    // clock that never moves.
    for _ in 0..1_000_000 {
        if Instant::now() != real {
            return tokio::time::Instant::now() == first;
        }
        std::hint::spin_loop();
    }
    false
}

/// The marker inside the I/O error that stands for a paused clock in the redis crate's error
/// type, which is what the connection layer returns; [`Error::from_redis`] turns it into
/// [`Error::PausedClock`].
///
/// [`Error::from_redis`]: crate::Error
/// [`Error::PausedClock`]: crate::Error::PausedClock
#[derive(Debug)]
pub(crate) struct PausedClock;

impl std::fmt::Display for PausedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the Tokio clock is paused")
    }
}

impl std::error::Error for PausedClock {}

/// The redis crate's error that stands for a paused clock.
pub(crate) fn error() -> RedisError {
    std::io::Error::other(PausedClock).into()
}

/// Whether `err` stands for a paused clock (see [`error`]).
pub(crate) fn is_paused(err: &RedisError) -> bool {
    let Some(source) = std::error::Error::source(err) else {
        return false;
    };
    // The redis crate keeps the I/O error behind an `Arc`, which is the source it shows.
    let io = source.downcast_ref::<std::io::Error>().or_else(|| {
        source
            .downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
    });
    io.and_then(std::io::Error::get_ref)
        .is_some_and(|e| e.is::<PausedClock>())
}

/// `err`, a timeout, unless the timeout fired because the clock is paused.
pub(crate) fn timed_out(err: RedisError) -> RedisError {
    if err.is_timeout() && paused() {
        error()
    } else {
        err
    }
}

/// What a wait whose budget ran out before Redis answered any of its attempts answers: a
/// timeout (or the paused clock that made it run out).
pub(crate) fn no_answer_in_time() -> crate::Error {
    if paused() {
        return crate::Error::PausedClock;
    }
    crate::Error::Redis(
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer from redis within the wait budget",
        )
        .into(),
    )
}

/// What a wait whose budget ran out answers: `Ok(None)` (not had in time), unless the budget
/// ran out because the clock is paused.
pub(crate) fn out_of_time<T>() -> crate::Result<Option<T>> {
    if paused() {
        Err(crate::Error::PausedClock)
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_running_clock_is_not_paused() {
        assert!(!paused());
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_is_paused_before_and_after_it_jumps() {
        assert!(paused());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await; // jumps ahead at once
        assert!(paused());
    }

    #[tokio::test]
    async fn a_clock_paused_then_resumed_runs_again_behind_the_real_one() {
        tokio::time::pause();
        assert!(paused());
        std::thread::sleep(std::time::Duration::from_millis(20));
        tokio::time::resume();
        assert!(!paused());
    }

    #[test]
    fn outside_a_runtime_the_clock_runs() {
        assert!(!paused());
    }

    #[test]
    fn the_marker_survives_the_redis_error() {
        assert!(is_paused(&error()));
        let other: RedisError =
            std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply").into();
        assert!(!is_paused(&other));
    }
}
