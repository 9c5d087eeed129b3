//! Presence: how a holder whose process died frees its locks in seconds rather than at the end
//! of its lease.
//!
//! Each client keeps a connection of its own subscribed to `ferrisson_presence:{<id>}` (and one
//! beside it for its confirmations), and says in its identity (field `presence_grace_ms`) how
//! long after that channel is found without a subscriber its holds may be taken over. When a
//! process dies on a live machine (`kill -9`, an OOM kill, an abort) the kernel closes its
//! connections at once and Redis drops the subscription with them. A waiter that has waited
//! [`POLL`] asks, in its acquire script, whether the holder is such a client and whether its
//! channel is empty (`lua/presence.lua`): the first to find it empty marks the time in the
//! identity, and the first to find it still empty a grace later takes the hold over. Whoever
//! finds the channel subscribed clears the mark, and so does the client itself, every
//! [`CONFIRM_EVERY`] while it holds anything (`PUBSUB NUMSUB` of its channel, then `HDEL` of
//! the mark, in one round trip: see [`confirm`]).
//!
//! The holder's side: nothing can be taken over before the grace has passed since the last
//! confirmation that found the subscription, since that confirmation cleared every earlier
//! mark; on one server, nor before the grace has passed since the subscribed connection was
//! closed, if that was the first close since (the server had the subscription until it closed
//! the connection, which the client hears within [`doubt::NOTICE`]). So while the client cannot
//! tell that its subscription stands (the connection dropped, or was made anew and not yet
//! confirmed, or a confirmation found no subscriber, a server that is no master or a broken
//! connection, or the sentinels named a new master, or, behind sentinels, a confirmation got
//! no answer) it counts every hold that may be taken over (locks, not
//! permits) lost a grace after the later of those, less the clocks' margin (1% and 2 ms, as
//! for a lease; see [`Doubt`]). A Redis that is paused, or a runtime that is blocked, drops no
//! connection: neither costs a hold. A machine that is lost or cut off sends no FIN, so Redis
//! keeps the subscription (until its `tcp-keepalive`, 300 s by default, gives up on it: far
//! past the lease, which has lost the hold by then) and its holds keep the lease rule.
//!
//! Only on one server (alone, or a sentinel's master): a cluster counts subscribers per node,
//! so there the lease rules. Holds of clients without presence (another library's, a client
//! with identities or presence turned off, one whose ACL user may not subscribe its channel)
//! keep the lease rule too.

pub(crate) mod doubt;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::identity::Own;
use crate::outage::{Outage, Peer};
use crate::script::Executor;
use crate::topology::Target;
pub(crate) use doubt::Doubt;

/// How long after a client's channel is found empty its holds may be taken over, by default.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// A waiter asks whether the holder is gone once it has waited this long, and again this often
/// while the holder's channel has a subscriber.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// How often a client that holds something confirms its presence.
const CONFIRM_EVERY: Duration = Duration::from_millis(500);

/// How often a client that holds nothing confirms it (a hold it takes is safe as long as its
/// connection stays up since the last confirmation; this catches a connection the server
/// closed without the client hearing of it).
const CONFIRM_IDLE: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// When the wait an acquisition belongs to began, when that is before the acquisition (a
    /// RedLock's rounds, each one try on every instance).
    static WAITING_SINCE: Instant;
}

/// Runs `work`, an acquisition that belongs to a wait that began at `since`.
pub(crate) async fn waiting_since<F: Future>(since: Instant, work: F) -> F::Output {
    WAITING_SINCE.scope(since, work).await
}

/// When the wait the acquisition under way belongs to began, if before it (see
/// [`waiting_since`]).
pub(crate) fn waited_since() -> Option<Instant> {
    WAITING_SINCE.try_with(|since| *since).ok()
}

/// How often the presence connection is tried again while the grace lasts (its holds are at
/// stake; then it backs off as every connection does).
const RETRY: Duration = Duration::from_millis(100);

/// The identity's field where the first waiter that found the client's channel empty marks
/// when (read and written by `lua/presence.lua`).
const ABSENT: &str = "absent_ms";

/// The channel whose subscriber says client `id` is alive.
pub(crate) fn channel(id: Uuid) -> String {
    format!("ferrisson_presence:{{{id}}}")
}

/// The presence connections: one subscribed to the client's channel, and one beside it, to
/// the same server, for the confirmations, so that they never wait for the client's command
/// connections to come back.
struct Link {
    /// Kept: the connection lives while both halves do.
    _sink: PubSubSink,
    stream: PubSubStream,
    commands: MultiplexedConnection,
}

impl Link {
    async fn open(
        target: &Target,
        channel: &str,
        response_timeout: Duration,
    ) -> redis::RedisResult<Link> {
        let client = target
            .pubsub_client()
            .await?
            .ok_or_else(|| std::io::Error::other("presence needs one server"))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(None);
        let (pubsub, commands) = futures::future::try_join(
            client.get_async_pubsub(),
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        let (mut sink, stream) = pubsub.split();
        sink.subscribe(channel).await?;
        Ok(Link {
            _sink: sink,
            stream,
            commands,
        })
    }

    /// Resolves when the connection is gone (nothing is ever published on the channel).
    async fn closed(link: &mut Option<Link>) {
        match link {
            None => std::future::pending().await,
            Some(link) => while link.stream.next().await.is_some() {},
        }
    }
}

/// What the presence task needs besides the client's own parts.
pub(crate) struct Setup {
    pub(crate) target: Target,
    pub(crate) id: Uuid,
    /// The identity's key (the confirmations clear marks there).
    pub(crate) identity: String,
    pub(crate) grace: Duration,
    pub(crate) peer: Peer,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

/// A started presence: subscribed and confirmed once; the task keeps it.
pub(crate) struct Started {
    link: Link,
    doubt: Arc<Doubt>,
}

impl Started {
    pub(crate) fn doubt(&self) -> &Arc<Doubt> {
        &self.doubt
    }
}

/// Subscribes the client's channel on a connection of its own and confirms it once, before the
/// client announces its presence (the confirmation's sending is where the first grace counts
/// from). An error leaves the client without presence: its holds keep the lease rule.
async fn start(setup: &Setup) -> Result<Started> {
    let channel = channel(setup.id);
    let link = crate::deadline::capped(
        setup.connection_timeout + setup.response_timeout,
        Link::open(&setup.target, &channel, setup.response_timeout),
    )
    .await
    .map_err(Error::Redis)?;
    let sent = Instant::now();
    match confirm(link.commands.clone(), &setup.identity, &channel).await? {
        0 => Err(Error::unexpected(
            "the presence channel had no subscriber right after it was subscribed",
        )),
        _ => Ok(Started {
            link,
            doubt: Arc::new(Doubt::new(setup.grace, sent)),
        }),
    }
}

/// Starts a client's presence on the client's thread (`thread`),
/// where its connection lives as long as the client, and announces it in the identity. `None`
/// when it could not: the client's holds then keep the lease rule.
pub(crate) async fn start_announced(
    setup: Setup,
    own: &Own,
    executor: &Executor,
    thread: &tokio::runtime::Handle,
) -> Option<(Setup, Started)> {
    let started = thread
        .spawn(async move {
            let started = start(&setup).await;
            started.map(|started| (setup, started))
        })
        .await;
    let refused = match started {
        Ok(Ok((setup, started))) => match own.announce(executor, setup.grace).await {
            Ok(()) => return Some((setup, started)),
            Err(e) => e.to_string(),
        },
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!(
        error = %refused,
        "this client cannot keep its presence (an ACL user needs the channel \
         ferrisson_presence:*): its locks are freed by their leases alone if it dies"
    );
    None
}

/// One confirmation over the presence connections: the subscribers of `channel`, then the
/// identity's mark cleared, in one round trip. The mark is cleared whatever the count: this
/// client is alive either way, and a mark cleared only delays a takeover. Plain commands
/// rather than a script: they cost Redis less, and a replica refuses the `HDEL` (`READONLY`)
/// as it would a script's.
async fn confirm(
    mut commands: MultiplexedConnection,
    identity: &str,
    channel: &str,
) -> Result<i64> {
    let mut pipe = redis::pipe();
    pipe.cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .cmd("HDEL")
        .arg(identity)
        .arg(ABSENT)
        .ignore();
    let (counted,): ((String, i64),) = pipe
        .query_async(&mut commands)
        .await
        .map_err(Error::Redis)?;
    Ok(counted.1)
}

/// What a confirmation's failure says.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// The server answered with an error (a replica's READONLY, a refusal): the presence is
    /// refuted.
    Refused,
    /// The connection broke (reset, closed, refused): the server behind the subscribed
    /// connection may be another by now (a restart, a moved address) without that connection
    /// having heard of it. Refuted too, and the connections are opened again.
    Broken,
    /// No answer in time, or a server still loading its data: a paused or restarting server
    /// takes nothing over meanwhile. Behind sentinels it may be a master that is being
    /// replaced, so there it refutes (see [`keep`]).
    Silent,
}

fn failure(e: &Error) -> Failure {
    match e {
        Error::Redis(e) if e.code() == Some("LOADING") => Failure::Silent,
        Error::Redis(e) if e.code().is_some() => Failure::Refused,
        Error::Redis(e) if e.is_timeout() => Failure::Silent,
        Error::Redis(_) => Failure::Broken,
        Error::PermissionDenied { .. } | Error::WrongType { .. } | Error::UnexpectedReply(_) => {
            Failure::Refused
        }
        _ => Failure::Silent,
    }
}

type Confirming = Pin<Box<dyn Future<Output = (Instant, u64, Result<i64>)> + Send>>;
type Connecting = Pin<Box<dyn Future<Output = redis::RedisResult<Link>> + Send>>;

/// Keeps the presence: reconnects and resubscribes when the connection drops, confirms, and
/// while in doubt past [`Doubt::safe_until`] has `lose` count every hold that may be taken over
/// lost (it answers how many it marked). `holding` says whether the client holds anything;
/// `moved` is notified when the sentinels name a new master.
pub(crate) async fn keep(
    setup: Setup,
    started: Started,
    holding: impl Fn() -> bool + Send + 'static,
    lose: impl Fn() -> usize + Send + 'static,
    moved: Arc<tokio::sync::Notify>,
    mut shutdown: watch::Receiver<()>,
) {
    let setup = Arc::new(setup);
    let channel: Arc<str> = channel(setup.id).into();
    let doubt = started.doubt;
    // On one server a closed connection tells when the absence may have begun; behind
    // sentinels the master may have changed (see `Doubt::closed`).
    let single = setup.target.sentinels().is_none();
    let mut link = Some(started.link);
    let outage = Outage::new("presence", setup.peer.clone());
    // Which connection the last confirmation that found the subscription was sent on; a new
    // connection is in doubt until one is confirmed on it.
    let mut generation = 0u64;
    let mut confirmed_on = Some(0u64);
    // The last confirmation found the channel empty, or a server that is no master.
    let mut refuted = false;
    let mut confirming: Option<Confirming> = None;
    let mut connecting: Option<Connecting> = None;
    let mut last_attempt = Instant::now();
    // Confirmations sent on a connection older than this say nothing (the master moved).
    let mut counts_from = 0u64;
    let mut last_sent = Instant::now();
    let mut reported = false;
    loop {
        let in_doubt = link.is_none() || confirmed_on != Some(generation) || refuted;
        doubt.set_doubt(in_doubt);
        if in_doubt && Instant::now() >= doubt.safe_until() {
            let lost = lose();
            doubt.lost_now();
            if lost > 0 && !reported {
                reported = true;
                tracing::warn!(
                    client = %setup.id,
                    lost,
                    "this client could not confirm its presence within the takeover grace: its \
                     lock holds may be taken over, so they are counted lost"
                );
            }
        } else if !in_doubt {
            reported = false;
        }
        let every = if holding() {
            CONFIRM_EVERY
        } else {
            CONFIRM_IDLE
        };
        // A new connection is confirmed at once, but not more often than RETRY (a confirmation
        // connection that fails at once must not spin the loop).
        let fresh =
            link.is_some() && confirmed_on != Some(generation) && last_sent.elapsed() >= RETRY;
        if confirming.is_none()
            && (fresh || last_sent.elapsed() >= every)
            && let Some(open) = &link
        {
            last_sent = Instant::now();
            let (setup, channel, on) = (setup.clone(), channel.clone(), generation);
            let commands = open.commands.clone();
            confirming = Some(Box::pin(async move {
                let sent = Instant::now();
                (sent, on, confirm(commands, &setup.identity, &channel).await)
            }));
        }
        // Up for the next confirmation (at the cadence of a client that holds something: a
        // hold taken meanwhile is confirmed as often from then on), and in doubt for the
        // deadline (which must be met within its margin: a timer is late by a millisecond or so).
        let mut wake_at = (last_sent + every).min(Instant::now() + CONFIRM_EVERY);
        // Past it, a hold taken is born lost (see `Watchdog::watch`): nothing to wake for.
        if in_doubt && doubt.safe_until() > Instant::now() {
            wake_at = wake_at.min(doubt.safe_until());
        }
        // A new connection is opened beside the loop, which meanwhile keeps the deadline.
        // Within the grace every RETRY (the holds are at stake), then as the backoff allows.
        let pause = match outage.wait() {
            Some(_) if in_doubt && doubt.safe_until() > Instant::now() => {
                Some(RETRY.saturating_sub(last_attempt.elapsed())).filter(|p| !p.is_zero())
            }
            pause => pause,
        };
        if link.is_none() && connecting.is_none() && pause.is_none() {
            last_attempt = Instant::now();
            let (setup, channel) = (setup.clone(), channel.clone());
            connecting = Some(Box::pin(async move {
                crate::deadline::capped(
                    setup.connection_timeout + setup.response_timeout,
                    Link::open(&setup.target, &channel, setup.response_timeout),
                )
                .await
            }));
        }
        if link.is_none()
            && connecting.is_none()
            && let Some(pause) = pause
        {
            wake_at = wake_at.min(Instant::now() + pause);
        }
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = moved.notified() => {
                // The sentinels name a new master: nobody is subscribed there yet, and a
                // confirmation the old one answers from now on says nothing.
                tracing::debug!("the master moved; moving the presence connections");
                doubt.refuted();
                refuted = true;
                link = None;
                confirming = None;
                counts_from = generation + 1;
            }
            () = Link::closed(&mut link) => {
                outage.lost(&"the presence connection was closed");
                doubt.closed(Instant::now(), single);
                link = None;
                confirming = None;
            }
            (sent, on, answer) = async {
                match confirming.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            } => {
                confirming = None;
                let failed = answer.as_ref().err().map(failure);
                match answer {
                    // Sent to a master the sentinels no longer name: says nothing.
                    _ if on < counts_from => {}
                    Ok(n) if n > 0 => {
                        doubt.confirmed(sent);
                        refuted = false;
                        if link.is_some() && on == generation {
                            confirmed_on = Some(on);
                        }
                    }
                    Ok(_) => {
                        tracing::warn!("redis has no subscriber on this client's presence channel; subscribing again");
                        doubt.refuted();
                        refuted = true;
                        link = None;
                    }
                    Err(_) if failed == Some(Failure::Silent) && single => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "this client's presence was not confirmed; connecting again");
                        // A broken connection says nothing of when the subscription ended: a
                        // close of the subscribed connection seen before still counts.
                        if failed != Some(Failure::Broken) {
                            doubt.refuted();
                        }
                        refuted = true;
                        if failed != Some(Failure::Silent) {
                            link = None;
                        }
                    }
                }
            }
            opened = async {
                match connecting.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            } => {
                connecting = None;
                match opened {
                    Ok(new) => {
                        outage.opened();
                        generation += 1;
                        link = Some(new);
                    }
                    Err(e) => {
                        outage.failed(&e);
                    }
                }
            }
            () = tokio::time::sleep_until(wake_at) => {}
        }
    }
}
