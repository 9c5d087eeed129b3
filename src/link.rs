//! The pub/sub hub's connection: a plain RESP2 pub/sub connection to one server, or a RESP3
//! cluster connection whose subscriptions go to the node serving each channel's slot, sharded
//! (`SSUBSCRIBE`, what Redisson 3.22+ uses on Redis 7 clusters) or classic.

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use crate::topology::Target;

/// What the connection brought.
#[derive(Debug)]
pub(crate) enum Event {
    /// A message on a channel.
    Message { channel: String, payload: Vec<u8> },
    /// The server ended a subscription by itself (a sharded channel whose slot moved, or whose
    /// node was demoted): subscribe again if it is still wanted.
    Dropped(String),
    /// The connection was cut and came back by itself with its subscriptions: messages may
    /// have been missed meanwhile.
    Resumed,
    /// The connection is gone.
    Lost,
}

pub(crate) enum Link {
    Plain(PubSubSink, PubSubStream),
    Cluster {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
        sharded: bool,
    },
}

impl Link {
    /// Opens a connection to `target`; on a cluster, `sharded` chooses SSUBSCRIBE.
    pub(crate) async fn open(target: &Target, sharded: bool) -> RedisResult<Link> {
        if let Some(cluster) = target.cluster() {
            let (tx, pushes) = mpsc::unbounded_channel();
            let conn = cluster.pubsub_client(tx)?.get_async_connection().await?;
            return Ok(Link::Cluster {
                conn,
                pushes,
                sharded,
            });
        }
        match target.pubsub_client().await? {
            Some(client) => {
                let (sink, stream) = client.get_async_pubsub().await?.split();
                Ok(Link::Plain(sink, stream))
            }
            None => Err(std::io::Error::other("no pub/sub server").into()),
        }
    }

    pub(crate) async fn subscribe(&mut self, names: &[String]) -> RedisResult<()> {
        match self {
            Link::Plain(sink, _) => sink.subscribe(names).await,
            Link::Cluster {
                conn,
                sharded: true,
                ..
            } => {
                // One SSUBSCRIBE per channel: channels of different slots may live on
                // different nodes, and one command must not span slots.
                for name in names {
                    conn.ssubscribe(name).await?;
                }
                Ok(())
            }
            Link::Cluster { conn, .. } => conn.subscribe(names).await,
        }
    }

    pub(crate) async fn unsubscribe(&mut self, names: &[String]) -> RedisResult<()> {
        match self {
            Link::Plain(sink, _) => sink.unsubscribe(names).await,
            Link::Cluster {
                conn,
                sharded: true,
                ..
            } => {
                for name in names {
                    conn.sunsubscribe(name).await?;
                }
                Ok(())
            }
            Link::Cluster { conn, .. } => conn.unsubscribe(names).await,
        }
    }

    /// The next event; pends for ever without a connection.
    pub(crate) async fn next(link: &mut Option<Link>) -> Event {
        match link {
            None => std::future::pending().await,
            Some(Link::Plain(_, stream)) => match stream.next().await {
                Some(message) => Event::Message {
                    channel: message.get_channel_name().to_owned(),
                    payload: message.get_payload_bytes().to_vec(),
                },
                None => Event::Lost,
            },
            Some(Link::Cluster { pushes, .. }) => loop {
                let Some(push) = pushes.recv().await else {
                    return Event::Lost;
                };
                match push.kind {
                    PushKind::Message | PushKind::SMessage => {
                        if let [channel, payload, ..] = push.data.as_slice()
                            && let (Some(channel), Some(payload)) = (text(channel), bytes(payload))
                        {
                            return Event::Message {
                                channel,
                                payload: payload.to_vec(),
                            };
                        }
                    }
                    PushKind::SUnsubscribe => {
                        if let Some(channel) = push.data.first().and_then(text) {
                            return Event::Dropped(channel);
                        }
                    }
                    PushKind::Disconnection => return Event::Resumed,
                    _ => {}
                }
            },
        }
    }
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    bytes(value).map(|b| String::from_utf8_lossy(b).into_owned())
}
