//! The plain RLock's scripts, and the helpers every lock kind shares for reading state,
//! forcing locks open and parsing the acquire and release replies.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use redis::Value;

use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::lock::holder::{Acquired, HandedOver, Inspection, LockOps, Released};
use crate::names;
use crate::script::{
    LOCK_ACQUIRE, LOCK_FORCE_UNLOCK, LOCK_HANDOVER, LOCK_INSPECT, LOCK_RELEASE, LOCK_REPAIR,
    ScriptCall,
};
use crate::watchdog::RenewTarget;

/// The message that wakes one waiter (Redisson's unlock message).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

#[derive(Debug)]
pub(crate) struct PlainOps {
    name: Arc<str>,
    channel: String,
    token_key: String,
}

impl PlainOps {
    pub(crate) fn new(name: &str) -> Self {
        PlainOps {
            name: Arc::from(name),
            channel: names::lock_channel(name),
            token_key: names::token_key(name),
        }
    }
}

impl LockOps for PlainOps {
    fn kind(&self) -> &'static str {
        "lock"
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channel(&self, _owner: &str) -> String {
        self.channel.clone()
    }

    fn renewal(&self, owner: &Arc<str>) -> RenewTarget {
        RenewTarget::HashField {
            key: self.name.clone(),
            field: owner.clone(),
        }
    }

    fn acquire<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        lease_ms: u64,
        _waiting: bool,
    ) -> BoxFuture<'a, Result<Acquired>> {
        let call = ScriptCall::new(&LOCK_ACQUIRE)
            .key(&*self.name)
            .key(&self.token_key)
            .arg(owner)
            .arg(lease_ms);
        run_acquire(client, call, &self.name).boxed()
    }

    fn release<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        lease_ms: u64,
        request_id: &'a str,
        resend: bool,
    ) -> BoxFuture<'a, Result<Released>> {
        let call = ScriptCall::new(&LOCK_RELEASE)
            .key(&*self.name)
            .key(&self.channel)
            .key(names::unlock_latch_key(&self.name, request_id))
            .arg(owner)
            .arg(lease_ms)
            .arg(latch_ttl_ms(client))
            .arg(UNLOCK_MESSAGE)
            .arg(if resend { "1" } else { "0" });
        run_release(client, call, &self.name).boxed()
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn release_to<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        to: &'a str,
        to_lease_ms: u64,
        resend: bool,
    ) -> BoxFuture<'a, Result<HandedOver>> {
        async move {
            // The script counts the channel's subscribers beyond this client's own.
            let own = u8::from(client.hub.is_subscribed(&self.channel));
            let call = ScriptCall::new(&LOCK_HANDOVER)
                .key(&*self.name)
                .key(&self.channel)
                .key(&self.token_key)
                .arg(owner)
                .arg(to)
                .arg(to_lease_ms)
                .arg(own)
                .arg(UNLOCK_MESSAGE)
                .arg(if resend { "1" } else { "0" });
            let (status, value): (i64, i64) = client.executor.run(&call, &self.name).await?;
            parse_handover(status, value)
        }
        .boxed()
    }

    fn repair<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        holds: u32,
        lease_ms: u64,
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            let call = ScriptCall::new(&LOCK_REPAIR)
                .key(&*self.name)
                .key(&self.channel)
                .arg(owner)
                .arg(holds)
                .arg(UNLOCK_MESSAGE)
                .arg(lease_ms);
            run_repair(client, call, &self.name, holds).await
        }
        .boxed()
    }

    fn inspect<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Inspection>> {
        inspect_field(client, &self.name, owner).boxed()
    }

    fn force_unlock<'a>(&'a self, client: &'a ClientInner) -> BoxFuture<'a, Result<bool>> {
        async move {
            let call = ScriptCall::new(&LOCK_FORCE_UNLOCK)
                .key(&*self.name)
                .key(&self.channel)
                .arg(UNLOCK_MESSAGE);
            run_force_unlock(client, call, &self.name).await
        }
        .boxed()
    }
}

pub(crate) fn latch_ttl_ms(client: &ClientInner) -> u64 {
    client.config.unlock_latch_ttl().as_millis() as u64
}

/// Runs an acquire script and parses its `{status, value}` reply.
pub(crate) async fn run_acquire(
    client: &ClientInner,
    call: ScriptCall,
    name: &str,
) -> Result<Acquired> {
    let (status, value): (i64, i64) = client.executor.run(&call, name).await?;
    parse_acquire(status, value)
}

/// Runs a release script and parses its reply.
pub(crate) async fn run_release(
    client: &ClientInner,
    call: ScriptCall,
    name: &str,
) -> Result<Released> {
    let reply: Value = client.executor.run(&call, name).await?;
    parse_release(&reply)
}

/// Runs a repair script (replies 1 when it changed something).
pub(crate) async fn run_repair(
    client: &ClientInner,
    call: ScriptCall,
    name: &str,
    holds: u32,
) -> Result<()> {
    let changed: i64 = client.executor.run(&call, name).await?;
    if changed == 1 {
        tracing::debug!(lock = %name, holds, "hold count repaired");
    }
    Ok(())
}

/// Runs a force-unlock script (replies 1 when a held lock was freed).
pub(crate) async fn run_force_unlock(
    client: &ClientInner,
    call: ScriptCall,
    name: &str,
) -> Result<bool> {
    let freed: i64 = client.executor.run(&call, name).await?;
    Ok(freed == 1)
}

/// Reads a lock hash and the hold count in `field`.
pub(crate) async fn inspect_field(
    client: &ClientInner,
    key: &str,
    field: &str,
) -> Result<Inspection> {
    let call = ScriptCall::new(&LOCK_INSPECT).key(key).arg(field);
    let (locked, holds, pttl): (i64, i64, i64) = client.executor.run(&call, key).await?;
    Ok(Inspection {
        locked: locked == 1,
        holds: u32::try_from(holds).unwrap_or(0),
        pttl,
    })
}

/// Parses `{status, value}` from an acquire script: 1 fresh grant, 2 reentrant grant (value:
/// token), 0 busy (value: pttl).
pub(crate) fn parse_acquire(status: i64, value: i64) -> Result<Acquired> {
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
        other => Err(Error::unexpected(format!("acquire status {other}"))),
    }
}

/// Parses `{status, value}` from the handover script: 3 handed over (value: the waiter's token),
/// 1 freed, 4 several holds (nothing done), 0 not the owner, 2 gone on a resend.
pub(crate) fn parse_handover(status: i64, value: i64) -> Result<HandedOver> {
    match status {
        3 => u64::try_from(value)
            .map(|token| HandedOver::Handed { token })
            .map_err(|_| Error::unexpected(format!("fencing token {value}"))),
        1 => Ok(HandedOver::Released(Released::Freed)),
        4 => Ok(HandedOver::SeveralHolds),
        0 => Ok(HandedOver::Released(Released::NotOwner)),
        2 => Ok(HandedOver::Released(Released::Gone)),
        other => Err(Error::unexpected(format!("handover status {other}"))),
    }
}

/// Parses a release script's reply: 1 the owner's last hold went, 0 holds remain, nil not held.
pub(crate) fn parse_release(reply: &Value) -> Result<Released> {
    match reply {
        Value::Nil => Ok(Released::NotOwner),
        Value::Int(1) => Ok(Released::Freed),
        Value::Int(0) => Ok(Released::StillHeld),
        Value::Int(2) => Ok(Released::Gone),
        other => Err(Error::unexpected(format!("release answered {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_are_parsed_strictly() {
        assert_eq!(
            parse_acquire(1, 5).unwrap(),
            Acquired::Granted {
                token: 5,
                fresh: true
            }
        );
        assert_eq!(
            parse_acquire(2, 5).unwrap(),
            Acquired::Granted {
                token: 5,
                fresh: false
            }
        );
        assert_eq!(
            parse_acquire(0, 1500).unwrap(),
            Acquired::Busy {
                ttl: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(parse_acquire(0, -1).unwrap(), Acquired::Busy { ttl: None });
        assert!(parse_acquire(1, -3).is_err());
        assert!(parse_acquire(9, 0).is_err());
    }

    #[test]
    fn handover_replies_are_parsed_strictly() {
        assert_eq!(
            parse_handover(3, 9).unwrap(),
            HandedOver::Handed { token: 9 }
        );
        assert_eq!(
            parse_handover(1, 0).unwrap(),
            HandedOver::Released(Released::Freed)
        );
        assert_eq!(parse_handover(4, 2).unwrap(), HandedOver::SeveralHolds);
        assert_eq!(
            parse_handover(0, 0).unwrap(),
            HandedOver::Released(Released::NotOwner)
        );
        assert_eq!(
            parse_handover(2, 0).unwrap(),
            HandedOver::Released(Released::Gone)
        );
        assert!(parse_handover(3, -1).is_err());
        assert!(parse_handover(5, 0).is_err());
    }

    #[test]
    fn release_replies_are_parsed_strictly() {
        assert_eq!(parse_release(&Value::Nil).unwrap(), Released::NotOwner);
        assert_eq!(parse_release(&Value::Int(1)).unwrap(), Released::Freed);
        assert_eq!(parse_release(&Value::Int(0)).unwrap(), Released::StillHeld);
        assert_eq!(parse_release(&Value::Int(2)).unwrap(), Released::Gone);
        assert!(parse_release(&Value::Int(7)).is_err());
        assert!(parse_release(&Value::Okay).is_err());
    }
}
