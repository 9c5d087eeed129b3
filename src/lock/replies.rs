//! What the lock scripts answer, read strictly: every kind's acquire, release, handover, repair,
//! inspect and force-unlock replies share these shapes, so the holder reads them all alike.

use std::time::Duration;

use redis::Value;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::script::{LOCK_INSPECT, ScriptCall};

/// What an acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Granted with `token`; `fresh` when the owner held nothing on the server before.
    Granted {
        token: u64,
        fresh: bool,
    },
    Busy {
        ttl: Option<Duration>,
    },
    /// (Nested acquisitions only) the owner holds nothing on the server: the hold the
    /// acquisition nests in is gone. Nothing was granted.
    Lost,
    /// A read hold granted under the owner's write hold: no token was drawn (the hold carries
    /// the write hold's); `stamp` is the server's clock (µs) at the grant, which revocation
    /// requests are compared with.
    Under {
        stamp: u64,
    },
    /// Granted, but fewer replicas than wanted acknowledged it in time: it must be undone.
    NotSynced {
        acked: u32,
        wanted: u32,
    },
}

/// What a release script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The owner's last hold went (its waiters were told if that freed the lock).
    Freed,
    /// Holds of the owner remain.
    StillHeld,
    /// (Short form only) the owner has several holds on the server, which the client did not
    /// know of: nothing changed.
    SeveralHolds,
    /// The owner held nothing.
    NotOwner,
    /// (Resends only) the owner holds nothing and no partial release of this request is
    /// recorded: the earlier send released the last hold, or the hold was gone before it.
    Gone,
}

/// What a release that tries to hand the lock to a local waiter answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandedOver {
    /// The owner's last hold went and the waiter now holds the lock with `token`.
    Handed { token: u64 },
    /// Not handed over; the release did what a plain one would (or nothing).
    Released(Released),
    /// The owner has several holds on the server: nothing changed.
    SeveralHolds,
}

/// A lock's state as one owner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inspection {
    pub(crate) locked: bool,
    pub(crate) holds: u32,
    /// Remaining TTL in ms; -1 without TTL, -2 when free.
    pub(crate) pttl: i64,
}

/// Runs an acquire script and parses its reply: an integer (the plain lock's, see
/// [`parse_acquire_int`]) or `{status, value}` (the other kinds', see [`parse_acquire`]).
pub(crate) async fn run_acquire(client: &Core, call: &ScriptCall, name: &str) -> Result<Acquired> {
    let (reply, synced): (Value, _) = client.executor.run_synced(call, name).await?;
    let acquired = parse_acquire_reply(&reply, name)?;
    match (acquired, synced) {
        (Acquired::Granted { .. } | Acquired::Under { .. }, Some((acked, wanted)))
            if acked < wanted =>
        {
            Ok(Acquired::NotSynced { acked, wanted })
        }
        (acquired, _) => Ok(acquired),
    }
}

/// Runs a force-unlock script (replies 1 when a held lock was freed).
pub(crate) async fn run_force_unlock(client: &Core, call: &ScriptCall, name: &str) -> Result<bool> {
    let freed: i64 = client.executor.run(call, name).await?;
    Ok(freed == 1)
}

/// Reads a lock hash and the hold count in `field`.
pub(crate) async fn inspect_field(client: &Core, key: &str, field: &str) -> Result<Inspection> {
    let call = ScriptCall::new(&LOCK_INSPECT).key(key).arg(field);
    let (locked, holds, pttl): (i64, i64, i64) = client.executor.run_read(&call, key).await?;
    Ok(Inspection {
        locked: locked == 1,
        holds: u32::try_from(holds).unwrap_or(0),
        pttl,
    })
}

/// Parses an acquire script's reply, which is one of two shapes and nothing else.
pub(crate) fn parse_acquire_reply(reply: &Value, name: &str) -> Result<Acquired> {
    match reply {
        Value::Int(n) => parse_acquire_int(*n),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(status), Value::Int(value)] => parse_acquire(*status, *value, name),
            _ => Err(Error::unexpected(format!("acquire answered {reply:?}"))),
        },
        other => Err(Error::unexpected(format!("acquire answered {other:?}"))),
    }
}

/// Parses lock_acquire.lua's integer: a token (>= 1) for a fresh grant, 0 for a reentrant one
/// (the hold keeps its first token), `-2 - pttl` when busy.
pub(crate) fn parse_acquire_int(n: i64) -> Result<Acquired> {
    match n {
        1.. => Ok(Acquired::Granted {
            token: n.unsigned_abs(),
            fresh: true,
        }),
        0 => Ok(Acquired::Granted {
            token: 0,
            fresh: false,
        }),
        -1 => Ok(Acquired::Busy { ttl: None }),
        // No overflow: n <= -2 here, so -2 - n >= 0.
        ..=-2 => Ok(Acquired::Busy {
            ttl: Some(Duration::from_millis((-2 - n).unsigned_abs())),
        }),
    }
}

/// Parses `{status, value}` from an acquire script of lock `name`: 1 fresh grant, 2 reentrant
/// grant (value: token), 0 busy (value: pttl), 3 a reader asked for the write side, 4 the hold
/// a nested acquisition nests in is gone, 5 a read hold granted under the owner's write hold
/// (value: the server's clock).
pub(crate) fn parse_acquire(status: i64, value: i64, name: &str) -> Result<Acquired> {
    let token =
        || u64::try_from(value).map_err(|_| Error::unexpected(format!("fencing token {value}")));
    match status {
        1 => Ok(Acquired::Granted {
            token: token()?,
            fresh: true,
        }),
        2 => Ok(Acquired::Granted {
            token: token()?,
            fresh: false,
        }),
        0 => Ok(Acquired::Busy {
            ttl: u64::try_from(value).ok().map(Duration::from_millis),
        }),
        3 => Err(Error::UpgradeNotSupported {
            name: name.to_owned(),
        }),
        4 => Ok(Acquired::Lost),
        5 => Ok(Acquired::Under { stamp: token()? }),
        other => Err(Error::unexpected(format!("acquire status {other}"))),
    }
}

/// Parses lock_handover.lua's integer: a token (>= 1) handed over, 0 freed, -1 not the owner,
/// -2 gone on a resend, -3 several holds (nothing done).
pub(crate) fn parse_handover(reply: &Value) -> Result<HandedOver> {
    match reply {
        Value::Int(n @ 1..) => Ok(HandedOver::Handed {
            token: n.unsigned_abs(),
        }),
        Value::Int(0) => Ok(HandedOver::Released(Released::Freed)),
        Value::Int(-1) => Ok(HandedOver::Released(Released::NotOwner)),
        Value::Int(-2) => Ok(HandedOver::Released(Released::Gone)),
        Value::Int(-3) => Ok(HandedOver::SeveralHolds),
        other => Err(Error::unexpected(format!("handover answered {other:?}"))),
    }
}

/// Parses a release script's reply: 1 the owner's last hold went, 0 holds remain, nil not held,
/// 2 gone on a resend, 3 several holds (short form, nothing changed).
pub(crate) fn parse_release(reply: &Value) -> Result<Released> {
    match reply {
        Value::Nil => Ok(Released::NotOwner),
        Value::Int(1) => Ok(Released::Freed),
        Value::Int(0) => Ok(Released::StillHeld),
        Value::Int(2) => Ok(Released::Gone),
        Value::Int(3) => Ok(Released::SeveralHolds),
        other => Err(Error::unexpected(format!("release answered {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_are_parsed_strictly() {
        assert_eq!(
            parse_acquire(1, 5, "n").unwrap(),
            Acquired::Granted {
                token: 5,
                fresh: true
            }
        );
        assert_eq!(
            parse_acquire(2, 5, "n").unwrap(),
            Acquired::Granted {
                token: 5,
                fresh: false
            }
        );
        assert_eq!(
            parse_acquire(0, 1500, "n").unwrap(),
            Acquired::Busy {
                ttl: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            parse_acquire(0, -1, "n").unwrap(),
            Acquired::Busy { ttl: None }
        );
        assert!(parse_acquire(1, -3, "n").is_err());
        assert!(matches!(
            parse_acquire(3, 0, "n"),
            Err(Error::UpgradeNotSupported { name }) if name == "n"
        ));
        assert!(parse_acquire(9, 0, "n").is_err());
    }

    #[test]
    fn integer_acquire_replies_are_parsed_strictly() {
        assert_eq!(
            parse_acquire_int(7).unwrap(),
            Acquired::Granted {
                token: 7,
                fresh: true
            }
        );
        assert_eq!(
            parse_acquire_int(0).unwrap(),
            Acquired::Granted {
                token: 0,
                fresh: false
            }
        );
        assert_eq!(parse_acquire_int(-1).unwrap(), Acquired::Busy { ttl: None });
        assert_eq!(
            parse_acquire_int(-2).unwrap(),
            Acquired::Busy {
                ttl: Some(Duration::ZERO)
            }
        );
        assert_eq!(
            parse_acquire_int(-1502).unwrap(),
            Acquired::Busy {
                ttl: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            parse_acquire_int(i64::MIN).unwrap(),
            Acquired::Busy {
                ttl: Some(Duration::from_millis(i64::MAX as u64 - 1))
            }
        );
    }

    #[test]
    fn acquire_replies_take_one_of_two_shapes() {
        assert_eq!(
            parse_acquire_reply(&Value::Int(3), "n").unwrap(),
            Acquired::Granted {
                token: 3,
                fresh: true
            }
        );
        let pair = Value::Array(vec![Value::Int(0), Value::Int(-1)]);
        assert_eq!(
            parse_acquire_reply(&pair, "n").unwrap(),
            Acquired::Busy { ttl: None }
        );
        for other in [
            Value::Nil,
            Value::Okay,
            Value::BulkString(b"1".to_vec()),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(3)]),
            Value::Array(vec![Value::Int(1), Value::BulkString(b"2".to_vec())]),
            Value::Array(vec![Value::Nil, Value::Int(2)]),
        ] {
            assert!(
                matches!(
                    parse_acquire_reply(&other, "n"),
                    Err(Error::UnexpectedReply(_))
                ),
                "{other:?}"
            );
        }
    }

    #[test]
    fn handover_replies_are_parsed_strictly() {
        let parse = |n: i64| parse_handover(&Value::Int(n));
        assert_eq!(parse(9).unwrap(), HandedOver::Handed { token: 9 });
        assert_eq!(
            parse(i64::MAX).unwrap(),
            HandedOver::Handed {
                token: i64::MAX as u64
            }
        );
        assert_eq!(parse(0).unwrap(), HandedOver::Released(Released::Freed));
        assert_eq!(parse(-1).unwrap(), HandedOver::Released(Released::NotOwner));
        assert_eq!(parse(-2).unwrap(), HandedOver::Released(Released::Gone));
        assert_eq!(parse(-3).unwrap(), HandedOver::SeveralHolds);
        assert!(parse(-4).is_err());
        assert!(parse(i64::MIN).is_err());
        // The old table shape, or anything else, is no reply of this script.
        let table = Value::Array(vec![Value::Int(3), Value::Int(9)]);
        assert!(parse_handover(&table).is_err());
        assert!(parse_handover(&Value::Nil).is_err());
        assert!(parse_handover(&Value::Okay).is_err());
    }

    #[test]
    fn release_replies_are_parsed_strictly() {
        assert_eq!(parse_release(&Value::Nil).unwrap(), Released::NotOwner);
        assert_eq!(parse_release(&Value::Int(1)).unwrap(), Released::Freed);
        assert_eq!(parse_release(&Value::Int(0)).unwrap(), Released::StillHeld);
        assert_eq!(parse_release(&Value::Int(2)).unwrap(), Released::Gone);
        assert_eq!(
            parse_release(&Value::Int(3)).unwrap(),
            Released::SeveralHolds
        );
        assert!(parse_release(&Value::Int(7)).is_err());
        assert!(parse_release(&Value::Okay).is_err());
    }
}
