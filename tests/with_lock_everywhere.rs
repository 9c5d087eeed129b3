//! `with_lock` and its bounded twin `try_with_lock_for` (`with_permits` / `with_permit` and their
//! `try_…_for` for the semaphores) on every object, async: the plain, fair and fenced locks,
//! both sides of a read-write lock, the mutex, MultiLock, RedLock and both semaphores.
//!
//! Each test drives every kind at once through one table ([`Kind`], [`Object`]): granted work
//! runs and leaves the object free; a wait that runs out is `Ok(None)` and the work never ran;
//! the wait never cuts work that outlasts it; a hold forced open stops the work with
//! `LockLost` (`PermitLost`); a release failing after the work finished keeps the output.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrisson::{Client, Error, LockGuard, MultiLock, PermitGuard, RLock, RSemaphore, RedLock};
use futures::future::join_all;
use support::warnings::warnings;
use support::{RedisServer, builder, within};
use tokio::sync::Barrier;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Plain,
    Fair,
    Read,
    Write,
    Fenced,
    Mutex,
    Multi,
    Red,
    Semaphore,
    Permits,
}

const ALL: [Kind; 10] = [
    Kind::Plain,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
    Kind::Fenced,
    Kind::Mutex,
    Kind::Multi,
    Kind::Red,
    Kind::Semaphore,
    Kind::Permits,
];

/// Every kind whose hold can be lost (an `RSemaphore`'s permits cannot).
fn losable() -> impl Iterator<Item = Kind> {
    ALL.into_iter().filter(|k| *k != Kind::Semaphore)
}

/// One object of `kind` named `name` on `client`: a lock, a combinator or a semaphore (with
/// exactly one permit).
#[derive(Clone)]
struct Object {
    kind: Kind,
    client: Client,
    name: String,
    /// The server's URL, for raw checks.
    url: String,
}

impl Object {
    async fn new(kind: Kind, client: &Client, url: &str, test: &str) -> Object {
        let name = format!("wle:{test}:{kind:?}");
        match kind {
            Kind::Semaphore => assert!(
                client
                    .get_semaphore(&name)
                    .try_set_permits(1)
                    .await
                    .unwrap()
            ),
            Kind::Permits => {
                let semaphore = client.get_permit_expirable_semaphore(&name);
                assert!(semaphore.try_set_permits(1).await.unwrap());
            }
            _ => {}
        }
        Object {
            kind,
            client: client.clone(),
            name,
            url: url.to_owned(),
        }
    }

    /// The lock of an `RLock` kind, on `client`.
    fn rlock_on(&self, client: &Client) -> RLock {
        match self.kind {
            Kind::Plain => client.get_lock(&self.name),
            Kind::Fair => client.get_fair_lock(&self.name),
            Kind::Read => client.get_read_write_lock(&self.name).read_lock(),
            Kind::Write => client.get_read_write_lock(&self.name).write_lock(),
            other => panic!("{other:?} is no RLock kind"),
        }
    }

    /// The Redis keys of its locks (a combinator's parts), by name.
    fn parts(&self) -> Vec<String> {
        match self.kind {
            Kind::Multi => vec![format!("{}:a", self.name), format!("{}:b", self.name)],
            Kind::Red => (1..=3).map(|i| format!("{}:{i}", self.name)).collect(),
            _ => vec![self.name.clone()],
        }
    }

    fn multi(&self) -> MultiLock {
        MultiLock::new(self.parts().iter().map(|p| self.client.get_lock(p)))
    }

    /// A RedLock over three lock names of one server (three "instances" for the quorum math).
    fn redlock(&self) -> RedLock {
        RedLock::new(self.parts().iter().map(|p| self.client.get_lock(p)))
            .instance_timeout(Duration::from_millis(250))
    }

    /// `with_lock` (`with_permits(1, ..)`, `with_permit`), the work given the tokens.
    async fn with_lock<T, Fut>(&self, work: impl FnOnce(Vec<u64>) -> Fut) -> ferrisson::Result<T>
    where
        Fut: Future<Output = T>,
    {
        let (client, name) = (&self.client, self.name.as_str());
        match self.kind {
            Kind::Plain | Kind::Fair | Kind::Read | Kind::Write => {
                self.rlock_on(client).with_lock(|t| work(vec![t])).await
            }
            Kind::Fenced => {
                client
                    .get_fenced_lock(name)
                    .with_lock(|t| work(vec![t]))
                    .await
            }
            Kind::Mutex => client.get_mutex(name).with_lock(|t| work(vec![t])).await,
            Kind::Multi => self.multi().with_lock(work).await,
            Kind::Red => self.redlock().with_lock(work).await,
            Kind::Semaphore => {
                let semaphore = client.get_semaphore(name);
                semaphore.with_permits(1, || work(Vec::new())).await
            }
            Kind::Permits => {
                let semaphore = client.get_permit_expirable_semaphore(name);
                semaphore.with_permit(|_id, t| work(vec![t])).await
            }
        }
    }

    /// `try_with_lock_for` (`try_with_permits_for(1, ..)`, `try_with_permit_for`).
    async fn try_with_lock_for<T, Fut>(
        &self,
        wait: Duration,
        work: impl FnOnce(Vec<u64>) -> Fut,
    ) -> ferrisson::Result<Option<T>>
    where
        Fut: Future<Output = T>,
    {
        let (client, name) = (&self.client, self.name.as_str());
        match self.kind {
            Kind::Plain | Kind::Fair | Kind::Read | Kind::Write => {
                let lock = self.rlock_on(client);
                lock.try_with_lock_for(wait, |t| work(vec![t])).await
            }
            Kind::Fenced => {
                let lock = client.get_fenced_lock(name);
                lock.try_with_lock_for(wait, |t| work(vec![t])).await
            }
            Kind::Mutex => {
                let mutex = client.get_mutex(name);
                mutex.try_with_lock_for(wait, |t| work(vec![t])).await
            }
            Kind::Multi => self.multi().try_with_lock_for(wait, work).await,
            Kind::Red => self.redlock().try_with_lock_for(wait, work).await,
            Kind::Semaphore => {
                let semaphore = client.get_semaphore(name);
                let work = || work(Vec::new());
                semaphore.try_with_permits_for(1, wait, work).await
            }
            Kind::Permits => {
                let semaphore = client.get_permit_expirable_semaphore(name);
                let work = |_id, t| work(vec![t]);
                semaphore.try_with_permit_for(wait, work).await
            }
        }
    }

    /// Another client takes it (a writer for both sides of a read-write lock; a part of a
    /// MultiLock, two of a RedLock's three; the one permit), and keeps it until released.
    async fn hold_elsewhere(&self, other: &Client) -> Holding {
        let name = self.name.as_str();
        match self.kind {
            Kind::Plain | Kind::Fair => {
                Holding::Locks(vec![self.rlock_on(other).lock().await.unwrap()])
            }
            Kind::Read | Kind::Write => {
                let writer = other.get_read_write_lock(name).write_lock();
                Holding::Locks(vec![writer.lock().await.unwrap()])
            }
            Kind::Fenced => Holding::Locks(vec![other.get_fenced_lock(name).lock().await.unwrap()]),
            Kind::Mutex => Holding::Locks(vec![other.get_mutex(name).lock().await.unwrap()]),
            Kind::Multi | Kind::Red => {
                let mut guards = Vec::new();
                for part in self.parts().iter().skip(1) {
                    guards.push(other.get_lock(part).lock().await.unwrap());
                }
                Holding::Locks(guards)
            }
            Kind::Semaphore => {
                let semaphore = other.get_semaphore(name);
                semaphore.acquire(1).await.unwrap();
                Holding::Permits(semaphore)
            }
            Kind::Permits => {
                let semaphore = other.get_permit_expirable_semaphore(name);
                Holding::Permit(semaphore.acquire().await.unwrap())
            }
        }
    }

    /// Whether nothing holds it: no lock key left, the one permit free.
    async fn is_free(&self) -> bool {
        match self.kind {
            Kind::Semaphore => {
                let semaphore = self.client.get_semaphore(&self.name);
                semaphore.available_permits().await.unwrap() == 1
            }
            Kind::Permits => {
                let semaphore = self.client.get_permit_expirable_semaphore(&self.name);
                semaphore.available_permits().await.unwrap() == 1
            }
            _ => {
                let mut raw = redis::Client::open(self.url.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                let held: usize = redis::cmd("EXISTS")
                    .arg(self.parts())
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                held == 0
            }
        }
    }

    /// How many tokens its work is given.
    fn tokens(&self) -> usize {
        match self.kind {
            Kind::Semaphore => 0,
            Kind::Multi | Kind::Red => self.parts().len(),
            _ => 1,
        }
    }

    /// Whether `e` is the answer of a hold lost while its work ran.
    fn lost_answer(&self, e: &Error) -> bool {
        match (self.kind, e) {
            (Kind::Permits, Error::PermitLost { name, held, .. }) => {
                *name == self.name && *held == 1
            }
            (_, Error::LockLost { name }) => self.parts().contains(name),
            _ => false,
        }
    }
}

/// A client of `server` (watchdog lease 600 ms: a forced-open hold is seen lost within about
/// 200 ms).
async fn client(server: &RedisServer) -> Client {
    builder(server)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap()
}

/// What another client holds, given back at the end of a test.
enum Holding {
    Locks(Vec<LockGuard>),
    Permits(RSemaphore),
    Permit(PermitGuard),
}

impl Holding {
    async fn release(self) {
        match self {
            Holding::Locks(guards) => {
                for guard in guards {
                    guard.unlock().await.unwrap();
                }
            }
            Holding::Permits(semaphore) => semaphore.release(1).await.unwrap(),
            Holding::Permit(guard) => guard.release().await.unwrap(),
        }
    }
}

/// Runs `check` for every kind at once, each in a task of its own (so every future is `Send`).
async fn for_each<F, Fut>(kinds: impl IntoIterator<Item = Kind>, check: F)
where
    F: Fn(Kind) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = kinds.into_iter().map(|k| tokio::spawn(check(k))).collect();
    for (i, done) in join_all(tasks).await.into_iter().enumerate() {
        if let Err(e) = done {
            eprintln!("kind #{i} failed");
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_work_runs_gets_its_tokens_and_leaves_the_object_free() {
    let server = RedisServer::start();
    let (client, url) = (client(&server).await, server.url());
    for_each(ALL, |kind| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let object = Object::new(kind, &client, &url, "granted").await;
            let (out, tokens) = object
                .with_lock(|tokens| async move { ("with_lock", tokens) })
                .await
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(out, "with_lock");
            assert_eq!(tokens.len(), object.tokens(), "{kind:?}");
            assert!(tokens.iter().all(|t| *t > 0), "{kind:?}: {tokens:?}");
            assert!(object.is_free().await, "{kind:?} is free after with_lock");
            if kind == Kind::Fenced {
                let last = client.get_fenced_lock(&object.name).token().await.unwrap();
                assert_eq!(
                    last,
                    Some(tokens[0]),
                    "the fenced lock's work has its token"
                );
            }
            for wait in [Duration::from_secs(1), Duration::ZERO] {
                let out = object
                    .try_with_lock_for(wait, |_| async { "bounded" })
                    .await
                    .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
                assert_eq!(out, Some("bounded"), "{kind:?}, wait {wait:?}");
                assert!(
                    object.is_free().await,
                    "{kind:?} is free after try_with_lock_for"
                );
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_is_none_and_the_work_never_runs() {
    let server = RedisServer::start();
    let (client, other) = (client(&server).await, support::client(&server).await);
    let url = server.url();
    for_each(ALL, |kind| {
        let (client, other, url) = (client.clone(), other.clone(), url.clone());
        async move {
            let object = Object::new(kind, &client, &url, "busy").await;
            let holding = object.hold_elsewhere(&other).await;
            let ran = Arc::new(AtomicBool::new(false));
            let started = Instant::now();
            let work = |_| {
                let ran = ran.clone();
                async move { ran.store(true, Ordering::SeqCst) }
            };
            let answer = object
                .try_with_lock_for(Duration::from_millis(200), work)
                .await;
            let waited = started.elapsed();
            assert!(
                matches!(answer, Ok(None)),
                "{kind:?}: {:?}",
                answer.map(|_| "ran")
            );
            assert!(!ran.load(Ordering::SeqCst), "{kind:?}: the work never ran");
            // A RedLock gives up early when its next random pause (at most 100 ms) would pass
            // the deadline.
            assert!(
                waited >= Duration::from_millis(90) && waited < Duration::from_secs(2),
                "{kind:?} waited {waited:?} for a 200 ms budget"
            );
            holding.release().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_budget_never_cuts_work_that_outlasts_it() {
    let server = RedisServer::start();
    let (client, url) = (client(&server).await, server.url());
    for_each(ALL, |kind| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let object = Object::new(kind, &client, &url, "long").await;
            let inside = object.clone();
            let started = Instant::now();
            let answer = object
                .try_with_lock_for(Duration::from_millis(100), |_| async move {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    // Past the wait budget, still held.
                    let held = !inside.is_free().await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    held
                })
                .await
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(
                answer,
                Some(true),
                "{kind:?}: the work ran to its end, held"
            );
            assert!(started.elapsed() >= Duration::from_millis(500), "{kind:?}");
            assert!(object.is_free().await, "{kind:?}");
        }
    })
    .await;
}

/// Forces every hold open (`FLUSHALL`) while the work runs, for `with_lock` or its bounded twin.
async fn a_forced_open_hold_stops_the_work(bounded: bool) {
    let server = RedisServer::start();
    let client = client(&server).await;
    let kinds: Vec<Kind> = losable().collect();
    let started = Arc::new(Barrier::new(kinds.len() + 1));
    let test = if bounded { "lost-bounded" } else { "lost" };
    let mut tasks = Vec::new();
    for kind in kinds {
        let object = Object::new(kind, &client, &server.url(), test).await;
        let started = started.clone();
        tasks.push(tokio::spawn(async move {
            let finished = Arc::new(AtomicBool::new(false));
            let work = {
                let finished = finished.clone();
                |_| async move {
                    started.wait().await;
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    finished.store(true, Ordering::SeqCst);
                }
            };
            let begun = Instant::now();
            let answer = match bounded {
                true => object
                    .try_with_lock_for(Duration::from_secs(1), work)
                    .await
                    .map(|ran| ran.expect("granted")),
                false => object.with_lock(work).await,
            };
            let e = answer.expect_err("the work was stopped");
            assert!(object.lost_answer(&e), "{kind:?}: {e}");
            assert!(
                !finished.load(Ordering::SeqCst),
                "{kind:?}: the work was stopped"
            );
            assert!(begun.elapsed() < Duration::from_secs(4), "{kind:?}");
        }));
    }
    within(Duration::from_secs(10), "every work starts", started.wait()).await;
    let mut raw = server.raw().await;
    let () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
    for done in within(Duration::from_secs(10), "every answer", join_all(tasks)).await {
        done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_work_when_the_hold_is_lost() {
    a_forced_open_hold_stops_the_work(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_with_lock_for_stops_the_work_when_the_hold_is_lost() {
    a_forced_open_hold_stops_the_work(true).await;
}

/// Pauses Redis (SIGSTOP) once every work has finished its part, before any returns: every
/// release then times out, and every answer is the work's output all the same.
async fn a_release_failing_after_the_work_keeps_the_output(bounded: bool) {
    warnings();
    let server = Arc::new(RedisServer::start());
    let client = client(&server).await;
    let test = if bounded { "late-bounded" } else { "late" };
    let (done, paused) = (
        Arc::new(Barrier::new(ALL.len())),
        Arc::new(Barrier::new(ALL.len())),
    );
    let mut tasks = Vec::new();
    for kind in ALL {
        let object = Object::new(kind, &client, &server.url(), test).await;
        let (server, done, paused) = (server.clone(), done.clone(), paused.clone());
        tasks.push(tokio::spawn(async move {
            let work = |_| async move {
                if done.wait().await.is_leader() {
                    server.pause();
                }
                paused.wait().await;
                "written"
            };
            let answer = match bounded {
                true => object
                    .try_with_lock_for(Duration::from_secs(1), work)
                    .await
                    .map(|ran| ran.expect("granted")),
                false => object.with_lock(work).await,
            };
            assert_eq!(
                answer.unwrap_or_else(|e| panic!("{kind:?}: the output, not {e}")),
                "written"
            );
            object
        }));
    }
    let answers = within(Duration::from_secs(10), "every answer", join_all(tasks)).await;
    server.resume();
    for answer in answers {
        let object = answer.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let part = &object.parts()[0];
        let warned = warnings().lock().unwrap().iter().any(|(message, name)| {
            name.contains(part.as_str()) && message.contains("ran to its end")
        });
        assert!(warned, "{:?}: the failed release is logged", object.kind);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_keeps_the_output_when_the_release_fails() {
    a_release_failing_after_the_work_keeps_the_output(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_with_lock_for_keeps_the_output_when_the_release_fails() {
    a_release_failing_after_the_work_keeps_the_output(true).await;
}

/// A combinator's work runs inside every part's scope: taking a part again there is one more
/// hold of it, granted at once with its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_combinators_work_nests_in_every_part() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for kind in [Kind::Multi, Kind::Red] {
        let object = Object::new(kind, &client, &server.url(), "nested").await;
        let parts = object.parts();
        let nested = object
            .try_with_lock_for(Duration::from_secs(1), |tokens| {
                let client = client.clone();
                async move {
                    let mut again = Vec::new();
                    for part in &parts {
                        let lock = client.get_lock(part);
                        let guard = lock.try_lock().await.unwrap().expect("nested: at once");
                        again.push(guard.fencing_token());
                        guard.unlock().await.unwrap();
                    }
                    (tokens, again)
                }
            })
            .await
            .unwrap()
            .expect("granted");
        assert_eq!(nested.0, nested.1, "{kind:?}: each part's own token");
        assert!(object.is_free().await, "{kind:?}");
    }
}

/// Dropped while its work runs (a `timeout` around it), every kind gives its hold back in the
/// background: the object is free soon after, long before any lease would run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_while_the_work_runs_the_hold_is_given_back() {
    let server = RedisServer::start();
    let (client, url) = (client(&server).await, server.url());
    for_each(ALL, |kind| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let object = Object::new(kind, &client, &url, "dropped").await;
            let ran_out = tokio::time::timeout(
                Duration::from_millis(300),
                object.with_lock(|_| tokio::time::sleep(Duration::from_secs(30))),
            )
            .await;
            assert!(ran_out.is_err(), "{kind:?}: cut by the timeout");
            let freed = support::eventually(Duration::from_secs(5), || object.is_free()).await;
            assert!(freed, "{kind:?} is given back");
        }
    })
    .await;
}

/// Input the acquire refuses (no permits, too many, no locks) is an error, and the work never
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_input_never_runs_the_work() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_semaphore("wle:refused");
    let ran = AtomicBool::new(false);
    let run = || async { ran.store(true, Ordering::SeqCst) };
    for n in [0, u64::MAX] {
        let answer = semaphore.with_permits(n, run).await;
        assert!(matches!(answer, Err(Error::InvalidArgument(_))), "{n}");
        let answer = semaphore.try_with_permits_for(n, Duration::ZERO, run).await;
        assert!(matches!(answer, Err(Error::InvalidArgument(_))), "{n}");
    }
    let none = MultiLock::new(Vec::<RLock>::new());
    let answer = none.try_with_lock_for(Duration::ZERO, |_| run()).await;
    assert!(matches!(answer, Err(Error::InvalidArgument(_))));
    let answer = RedLock::new(Vec::<RLock>::new()).with_lock(|_| run()).await;
    assert!(matches!(answer, Err(Error::InvalidArgument(_))));
    let answer = client
        .get_lock("")
        .try_with_lock_for(Duration::ZERO, |_| run())
        .await;
    assert!(matches!(answer, Err(Error::InvalidArgument(_))));
    assert!(!ran.load(Ordering::SeqCst));
}
