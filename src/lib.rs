#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
mod client;
mod clock;
mod combinator;
mod config;
mod connection;
mod core;
mod deadline;
mod drain;
mod error;
pub mod guide;
mod identity;
pub mod inspect;
mod lease;
mod link;
mod live;
mod lock;
mod map;
mod names;
mod observe;
mod outage;
mod owner;
mod pending;
mod presence;
mod pubsub;
mod revoke;
mod runtime;
mod script;
mod signal;
mod slots;
mod sync;
mod topology;
mod urls;
mod watchdog;

pub use client::Client;
pub use combinator::{MultiGuard, MultiLock, RedLock, RedLockGuard};
pub use config::ClientBuilder;
pub use error::{Error, Result};
pub use identity::{ClientIdentity, HoldSite, SelfWaitSite};
pub use lock::{LockGuard, RFairLock, RFencedLock, RLock, RReadWriteLock, RwPolicy};
pub use signal::{OnSignal, Signal};
pub use sync::{PermitGuard, RCountDownLatch, RMutex, RPermitExpirableSemaphore, RSemaphore};
