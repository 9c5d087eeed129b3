//! Contenders on several clients looping on one lock while servers fail, and the checks their
//! record must pass: no token handed out twice, tokens rising in grant order, and (where every
//! grant reached every replica) no two released holds overlapping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::Client;

/// One grant a contender saw.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    /// When the grant's reply reached the contender.
    pub at: Instant,
    pub token: u64,
    /// When the contender began to give it back.
    pub end: Instant,
    /// Whether the unlock said the hold was still there and is now given back.
    pub released: bool,
}

/// Tasks looping lock, a short hold, unlock, each on its own handle of one lock name.
pub struct Chaos {
    grants: Arc<Mutex<Vec<Grant>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Chaos {
    /// `per_client` contenders on each of `clients`, all on lock `name`.
    pub fn start(clients: &[Client], name: &str, per_client: usize) -> Chaos {
        let grants: Arc<Mutex<Vec<Grant>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for client in clients {
            for _ in 0..per_client {
                let lock = client.get_lock(name);
                let (grants, stop) = (grants.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let guard = match lock.try_lock_for(Duration::from_millis(300), None).await
                        {
                            Ok(Some(guard)) => guard,
                            Ok(None) => continue,
                            // The server is away, or refused (too few replicas): again soon.
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                        };
                        let at = Instant::now();
                        let token = guard.fencing_token();
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let end = Instant::now();
                        let released = guard.unlock().await.is_ok();
                        grants.lock().unwrap().push(Grant {
                            at,
                            token,
                            end,
                            released,
                        });
                    }
                }));
            }
        }
        Chaos {
            grants,
            stop,
            tasks,
        }
    }

    /// Grants seen so far.
    pub fn grants(&self) -> usize {
        self.grants.lock().unwrap().len()
    }

    /// Waits until `more` grants were seen after `since` (at most `within`); panics otherwise.
    pub async fn wait_grants_after(&self, since: Instant, more: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let after = self
                .grants
                .lock()
                .unwrap()
                .iter()
                .filter(|g| g.at > since)
                .count();
            if after >= more {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {after} grants within {within:?} after the fault"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every contender; returns every grant, in grant order.
    pub async fn stop(self) -> Vec<Grant> {
        self.stop.store(true, Ordering::Relaxed);
        super::join_within(Duration::from_secs(20), self.tasks, "contenders stop").await;
        let mut grants = self.grants.lock().unwrap().clone();
        grants.sort_by_key(|g| g.at);
        grants
    }
}

/// No token was handed out twice, and tokens rose in grant order: a grant's reply reaches its
/// contender before the contender gives it back, so a later grant of the lock answered later
/// (a hold that vanished in a failover too: its reply came from the master before it died).
pub fn assert_tokens_unique_and_rising(grants: &[Grant]) {
    for pair in grants.windows(2) {
        assert!(
            pair[0].token < pair[1].token,
            "token {} granted after token {}: {:?} then {:?}",
            pair[1].token,
            pair[0].token,
            pair[0],
            pair[1]
        );
    }
}

/// No two holds whose unlock found them still there overlapped.
pub fn assert_released_holds_never_overlap(grants: &[Grant]) {
    let released: Vec<&Grant> = grants.iter().filter(|g| g.released).collect();
    for pair in released.windows(2) {
        assert!(
            pair[0].end <= pair[1].at,
            "released holds overlap: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
}

/// How many grants came before `before` and after `after`; panics unless both sides have some.
pub fn grants_on_both_sides(grants: &[Grant], before: Instant, after: Instant) -> (usize, usize) {
    let early = grants.iter().filter(|g| g.at < before).count();
    let late = grants.iter().filter(|g| g.at > after).count();
    assert!(
        early > 0 && late > 0,
        "grants before the fault: {early}, after: {late}"
    );
    (early, late)
}

/// One hold of every kind with a token, on names `<prefix>:<kind>` (one slot when `prefix` is a
/// hash tag such as `{lost}`), each with the client's watchdog lease.
pub struct EveryKind {
    pub locks: Vec<(&'static str, ferrisson::LockGuard)>,
    pub permit: ferrisson::PermitGuard,
}

impl EveryKind {
    /// Takes one hold of each kind (setting the semaphore to one permit first).
    pub async fn hold(client: &Client, prefix: &str) -> EveryKind {
        let name = |kind: &str| format!("{prefix}:{kind}");
        let mut locks = Vec::new();
        locks.push((
            "plain",
            client.get_lock(&name("plain")).lock().await.unwrap(),
        ));
        let fenced = client.get_fenced_lock(&name("fenced"));
        locks.push(("fenced", fenced.lock_and_get_token().await.unwrap().1));
        let fair = client.get_fair_lock(&name("fair"));
        locks.push(("fair", fair.lock().await.unwrap()));
        let read = client.get_read_write_lock(&name("read")).read_lock();
        locks.push(("read", read.lock().await.unwrap()));
        let write = client.get_read_write_lock(&name("write")).write_lock();
        locks.push(("write", write.lock().await.unwrap()));
        locks.push((
            "mutex",
            client.get_mutex(&name("mutex")).lock().await.unwrap(),
        ));
        let permits = client.get_permit_expirable_semaphore(&name("permits"));
        assert!(permits.try_set_permits(1).await.unwrap(), "permits set");
        let permit = permits.acquire().await.unwrap();
        EveryKind { locks, permit }
    }

    /// The highest token of all the holds.
    pub fn highest(&self) -> u64 {
        self.locks
            .iter()
            .map(|(_, g)| g.fencing_token())
            .chain([self.permit.fencing_token()])
            .max()
            .unwrap()
    }

    /// Asserts every hold is known lost by `by`.
    pub async fn assert_lost_by(&self, by: Instant) {
        let left = || by.saturating_duration_since(Instant::now());
        for (kind, guard) in &self.locks {
            tokio::time::timeout(left(), guard.lost())
                .await
                .unwrap_or_else(|_| panic!("{kind}: the vanished hold is not known lost in time"));
        }
        tokio::time::timeout(left(), self.permit.lost())
            .await
            .expect("permit: the vanished permit is not known lost in time");
    }

    /// Holds every kind again (the server forgot the first holds) and asserts each new token is
    /// above every token of `self`; gives everything back.
    pub async fn assert_next_tokens_above(self, client: &Client, prefix: &str) {
        let highest = self.highest();
        let EveryKind { locks, permit } = self;
        drop(permit);
        drop(locks);
        let next = EveryKind::hold(client, prefix).await;
        for (kind, guard) in &next.locks {
            assert!(
                guard.fencing_token() > highest,
                "{kind}: token {} after the fault, not above {highest}",
                guard.fencing_token()
            );
        }
        assert!(
            next.permit.fencing_token() > highest,
            "permit: token {} after the fault, not above {highest}",
            next.permit.fencing_token()
        );
        for (_, guard) in next.locks {
            guard.unlock().await.unwrap();
        }
        next.permit.release().await.unwrap();
    }
}
