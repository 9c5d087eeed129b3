//! The blocking `with_lock` and `try_with_lock_for` (`with_permits` / `with_permit` and their
//! `try_…_for` for the semaphores) on every object of `ferrisson::blocking`: the plain, fair
//! and fenced locks, both sides of a read-write lock, the mutex, MultiLock, RedLock and both
//! semaphores.
//!
//! Each test drives every kind at once, one thread each, through one table ([`Kind`],
//! [`Object`]): granted work runs and leaves the object free; a wait that runs out is
//! `Ok(None)` and the work never ran; the wait never cuts work that outlasts it; synchronous
//! work runs to its end even when its hold is lost meanwhile, and its output stands; so it does
//! when the release fails after the work.

mod support;

use support::warnings::warnings;

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrisson::blocking::{Client, LockGuard, MultiLock, PermitGuard, RLock, RSemaphore, RedLock};
use support::RedisServer;

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

/// A blocking client of `server` (watchdog lease 600 ms: a forced-open hold is seen lost within
/// about 200 ms).
fn client(server: &RedisServer) -> Client {
    Client::builder()
        .url(server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
        .build()
        .expect("a blocking client connects")
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
    fn new(kind: Kind, client: &Client, server: &RedisServer, test: &str) -> Object {
        let name = format!("bwl:{test}:{kind:?}");
        match kind {
            Kind::Semaphore => assert!(client.get_semaphore(&name).try_set_permits(1).unwrap()),
            Kind::Permits => {
                let semaphore = client.get_permit_expirable_semaphore(&name);
                assert!(semaphore.try_set_permits(1).unwrap());
            }
            _ => {}
        }
        Object {
            kind,
            client: client.clone(),
            name,
            url: server.url(),
        }
    }

    fn rlock_on(&self, client: &Client) -> RLock {
        match self.kind {
            Kind::Plain => client.get_lock(&self.name),
            Kind::Fair => client.get_fair_lock(&self.name),
            Kind::Read => client.get_read_write_lock(&self.name).read_lock(),
            Kind::Write => client.get_read_write_lock(&self.name).write_lock(),
            other => panic!("{other:?} is no RLock kind"),
        }
    }

    /// The Redis keys of its locks (a combinator's parts).
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

    /// A RedLock over three lock names of one server.
    fn redlock(&self) -> RedLock {
        RedLock::new(self.parts().iter().map(|p| self.client.get_lock(p)))
            .instance_timeout(Duration::from_millis(250))
    }

    /// `with_lock` (`with_permits(1, ..)`, `with_permit`), the work given the tokens.
    fn with_lock<T>(&self, work: impl FnOnce(Vec<u64>) -> T) -> ferrisson::Result<T> {
        let (client, name) = (&self.client, self.name.as_str());
        match self.kind {
            Kind::Plain | Kind::Fair | Kind::Read | Kind::Write => {
                self.rlock_on(client).with_lock(|t| work(vec![t]))
            }
            Kind::Fenced => client.get_fenced_lock(name).with_lock(|t| work(vec![t])),
            Kind::Mutex => client.get_mutex(name).with_lock(|t| work(vec![t])),
            Kind::Multi => self.multi().with_lock(work),
            Kind::Red => self.redlock().with_lock(work),
            Kind::Semaphore => client
                .get_semaphore(name)
                .with_permits(1, || work(Vec::new())),
            Kind::Permits => client
                .get_permit_expirable_semaphore(name)
                .with_permit(|_id, t| work(vec![t])),
        }
    }

    /// `try_with_lock_for` (`try_with_permits_for(1, ..)`, `try_with_permit_for`).
    fn try_with_lock_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(Vec<u64>) -> T,
    ) -> ferrisson::Result<Option<T>> {
        let (client, name) = (&self.client, self.name.as_str());
        match self.kind {
            Kind::Plain | Kind::Fair | Kind::Read | Kind::Write => self
                .rlock_on(client)
                .try_with_lock_for(wait, |t| work(vec![t])),
            Kind::Fenced => client
                .get_fenced_lock(name)
                .try_with_lock_for(wait, |t| work(vec![t])),
            Kind::Mutex => client
                .get_mutex(name)
                .try_with_lock_for(wait, |t| work(vec![t])),
            Kind::Multi => self.multi().try_with_lock_for(wait, work),
            Kind::Red => self.redlock().try_with_lock_for(wait, work),
            Kind::Semaphore => client
                .get_semaphore(name)
                .try_with_permits_for(1, wait, || work(Vec::new())),
            Kind::Permits => client
                .get_permit_expirable_semaphore(name)
                .try_with_permit_for(wait, |_id, t| work(vec![t])),
        }
    }

    /// Another client takes it (a writer for both sides of a read-write lock; a part of a
    /// MultiLock, two of a RedLock's three; the one permit), and keeps it until released.
    fn hold_elsewhere(&self, other: &Client) -> Holding {
        let name = self.name.as_str();
        match self.kind {
            Kind::Plain | Kind::Fair => Holding::Locks(vec![self.rlock_on(other).lock().unwrap()]),
            Kind::Read | Kind::Write => {
                let writer = other.get_read_write_lock(name).write_lock();
                Holding::Locks(vec![writer.lock().unwrap()])
            }
            Kind::Fenced => Holding::Locks(vec![other.get_fenced_lock(name).lock().unwrap()]),
            Kind::Mutex => Holding::Locks(vec![other.get_mutex(name).lock().unwrap()]),
            Kind::Multi | Kind::Red => Holding::Locks(
                self.parts()
                    .iter()
                    .skip(1)
                    .map(|part| other.get_lock(part).lock().unwrap())
                    .collect(),
            ),
            Kind::Semaphore => {
                let semaphore = other.get_semaphore(name);
                semaphore.acquire(1).unwrap();
                Holding::Permits(semaphore)
            }
            Kind::Permits => {
                let semaphore = other.get_permit_expirable_semaphore(name);
                Holding::Permit(semaphore.acquire().unwrap())
            }
        }
    }

    /// Whether nothing holds it: no lock key left, the one permit free.
    fn is_free(&self) -> bool {
        match self.kind {
            Kind::Semaphore => {
                let semaphore = self.client.get_semaphore(&self.name);
                semaphore.available_permits().unwrap() == 1
            }
            Kind::Permits => {
                let semaphore = self.client.get_permit_expirable_semaphore(&self.name);
                semaphore.available_permits().unwrap() == 1
            }
            _ => {
                let mut raw = redis::Client::open(self.url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let held: usize = redis::cmd("EXISTS")
                    .arg(self.parts())
                    .query(&mut raw)
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

    /// Whether a WARN naming it (a part of it) said `what`.
    fn warned(&self, what: &str) -> bool {
        let part = &self.parts()[0];
        warnings()
            .lock()
            .unwrap()
            .iter()
            .any(|(message, name)| name.contains(part.as_str()) && message.contains(what))
    }
}

/// What another client holds, given back at the end of a test.
enum Holding {
    Locks(Vec<LockGuard>),
    Permits(RSemaphore),
    Permit(PermitGuard),
}

impl Holding {
    fn release(self) {
        match self {
            Holding::Locks(guards) => guards.into_iter().for_each(|g| g.unlock().unwrap()),
            Holding::Permits(semaphore) => semaphore.release(1).unwrap(),
            Holding::Permit(guard) => guard.release().unwrap(),
        }
    }
}

/// Runs `check` for every kind at once, a thread each.
fn for_each(kinds: impl IntoIterator<Item = Kind>, check: impl Fn(Kind) + Sync) {
    std::thread::scope(|s| {
        let check = &check;
        let threads: Vec<_> = kinds
            .into_iter()
            .map(|kind| s.spawn(move || check(kind)))
            .collect();
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
        }
    });
}

#[test]
fn granted_work_runs_gets_its_tokens_and_leaves_the_object_free() {
    let server = RedisServer::start();
    let client = client(&server);
    for_each(ALL, |kind| {
        let object = Object::new(kind, &client, &server, "granted");
        let (out, tokens) = object
            .with_lock(|tokens| ("with_lock", tokens))
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(out, "with_lock");
        assert_eq!(tokens.len(), object.tokens(), "{kind:?}");
        assert!(tokens.iter().all(|t| *t > 0), "{kind:?}: {tokens:?}");
        assert!(object.is_free(), "{kind:?} is free after with_lock");
        if kind == Kind::Fenced {
            let last = client.get_fenced_lock(&object.name).token().unwrap();
            assert_eq!(
                last,
                Some(tokens[0]),
                "the fenced lock's work has its token"
            );
        }
        for wait in [Duration::from_secs(1), Duration::ZERO] {
            let out = object
                .try_with_lock_for(wait, |_| "bounded")
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(out, Some("bounded"), "{kind:?}, wait {wait:?}");
            assert!(object.is_free(), "{kind:?} is free after try_with_lock_for");
        }
    });
}

#[test]
fn a_wait_that_runs_out_is_none_and_the_work_never_runs() {
    let server = RedisServer::start();
    let (client, other) = (client(&server), client(&server));
    for_each(ALL, |kind| {
        let object = Object::new(kind, &client, &server, "busy");
        let holding = object.hold_elsewhere(&other);
        let ran = AtomicBool::new(false);
        let started = Instant::now();
        let answer = object.try_with_lock_for(Duration::from_millis(200), |_| {
            ran.store(true, Ordering::SeqCst);
        });
        let waited = started.elapsed();
        assert!(matches!(answer, Ok(None)), "{kind:?}: {answer:?}");
        assert!(!ran.load(Ordering::SeqCst), "{kind:?}: the work never ran");
        // A RedLock gives up early when its next random pause (at most 100 ms) would pass the
        // deadline.
        assert!(
            waited >= Duration::from_millis(90) && waited < Duration::from_secs(2),
            "{kind:?} waited {waited:?} for a 200 ms budget"
        );
        holding.release();
    });
}

#[test]
fn the_wait_budget_never_cuts_work_that_outlasts_it() {
    let server = RedisServer::start();
    let client = client(&server);
    for_each(ALL, |kind| {
        let object = Object::new(kind, &client, &server, "long");
        let started = Instant::now();
        let answer = object
            .try_with_lock_for(Duration::from_millis(100), |_| {
                std::thread::sleep(Duration::from_millis(250));
                // Past the wait budget, still held (checked from another thread: this one is
                // inside the hold's scope).
                let held = std::thread::scope(|s| s.spawn(|| !object.is_free()).join().unwrap());
                std::thread::sleep(Duration::from_millis(250));
                held
            })
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(
            answer,
            Some(true),
            "{kind:?}: the work ran to its end, held"
        );
        assert!(started.elapsed() >= Duration::from_millis(500), "{kind:?}");
        assert!(object.is_free(), "{kind:?}");
    });
}

/// Synchronous work cannot be stopped: forced open (`FLUSHALL`) while it runs, it still runs to
/// its end, its output is the answer, and a WARN says the hold was lost meanwhile.
fn a_hold_lost_meanwhile_keeps_the_output(bounded: bool) {
    warnings();
    let server = RedisServer::start();
    let client = client(&server);
    let kinds: Vec<Kind> = ALL.into_iter().filter(|k| *k != Kind::Semaphore).collect();
    let test = if bounded { "lost-bounded" } else { "lost" };
    let objects: Vec<Object> = kinds
        .iter()
        .map(|kind| Object::new(*kind, &client, &server, test))
        .collect();
    let (started, forced) = (Barrier::new(kinds.len() + 1), Barrier::new(kinds.len() + 1));
    std::thread::scope(|s| {
        let threads: Vec<_> = objects
            .iter()
            .map(|object| {
                let (started, forced) = (&started, &forced);
                s.spawn(move || {
                    let work = |_| {
                        started.wait();
                        forced.wait();
                        // Long enough for a renewal to find the hold gone.
                        std::thread::sleep(Duration::from_millis(800));
                        "written"
                    };
                    let answer = match bounded {
                        true => object
                            .try_with_lock_for(Duration::from_secs(1), work)
                            .map(|ran| ran.expect("granted")),
                        false => object.with_lock(work),
                    };
                    let kind = object.kind;
                    assert_eq!(
                        answer.unwrap_or_else(|e| panic!("{kind:?}: {e}")),
                        "written"
                    );
                    assert!(
                        object.warned("lost while the work"),
                        "{kind:?}: the loss is logged"
                    );
                })
            })
            .collect();
        started.wait();
        let mut raw = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let () = redis::cmd("FLUSHALL").query(&mut raw).unwrap();
        forced.wait();
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
        }
    });
}

#[test]
fn with_lock_keeps_the_output_when_the_hold_is_lost_meanwhile() {
    a_hold_lost_meanwhile_keeps_the_output(false);
}

#[test]
fn try_with_lock_for_keeps_the_output_when_the_hold_is_lost_meanwhile() {
    a_hold_lost_meanwhile_keeps_the_output(true);
}

/// Pauses Redis (SIGSTOP) once every work has finished its part, before any returns: every
/// release then times out, and every answer is the work's output all the same.
fn a_release_failing_after_the_work_keeps_the_output(bounded: bool) {
    warnings();
    let server = RedisServer::start();
    let client = client(&server);
    let test = if bounded { "late-bounded" } else { "late" };
    let objects: Vec<Object> = ALL
        .iter()
        .map(|kind| Object::new(*kind, &client, &server, test))
        .collect();
    let (done, paused) = (Barrier::new(ALL.len()), Barrier::new(ALL.len()));
    let server = &server;
    for_each(ALL, |kind| {
        let object = objects.iter().find(|o| o.kind == kind).unwrap();
        let work = |_| {
            if done.wait().is_leader() {
                server.pause();
            }
            paused.wait();
            "written"
        };
        let answer = match bounded {
            true => object
                .try_with_lock_for(Duration::from_secs(1), work)
                .map(|ran| ran.expect("granted")),
            false => object.with_lock(work),
        };
        assert_eq!(
            answer.unwrap_or_else(|e| panic!("{kind:?}: the output, not {e}")),
            "written"
        );
    });
    server.resume();
    for object in &objects {
        assert!(
            object.warned("ran to its end"),
            "{:?}: the failed release is logged",
            object.kind
        );
    }
}

#[test]
fn with_lock_keeps_the_output_when_the_release_fails() {
    a_release_failing_after_the_work_keeps_the_output(false);
}

#[test]
fn try_with_lock_for_keeps_the_output_when_the_release_fails() {
    a_release_failing_after_the_work_keeps_the_output(true);
}

/// A combinator's closure runs inside every part's scope, on the calling thread: taking a part
/// again there is one more hold of it, granted at once with its token.
#[test]
fn a_combinators_work_nests_in_every_part() {
    let server = RedisServer::start();
    let client = client(&server);
    for kind in [Kind::Multi, Kind::Red] {
        let object = Object::new(kind, &client, &server, "nested");
        let parts = object.parts();
        let (tokens, again) = object
            .try_with_lock_for(Duration::from_secs(1), |tokens| {
                let again: Vec<u64> = parts
                    .iter()
                    .map(|part| {
                        let guard = client.get_lock(part).try_lock().unwrap();
                        let guard = guard.expect("nested: at once");
                        let token = guard.fencing_token();
                        guard.unlock().unwrap();
                        token
                    })
                    .collect();
                (tokens, again)
            })
            .unwrap()
            .expect("granted");
        assert_eq!(tokens, again, "{kind:?}: each part's own token");
        assert!(object.is_free(), "{kind:?}");
    }
}

/// Input the acquire refuses (no permits, too many, no locks) and a call from async code are
/// errors, and the closure never runs.
#[test]
fn refused_input_never_runs_the_work() {
    let server = RedisServer::start();
    let client = client(&server);
    let semaphore = client.get_semaphore("bwl:refused");
    let ran = AtomicBool::new(false);
    let run = || ran.store(true, Ordering::SeqCst);
    for n in [0, u64::MAX] {
        let answer = semaphore.with_permits(n, run);
        assert!(
            matches!(answer, Err(ferrisson::Error::InvalidArgument(_))),
            "{n}"
        );
        let answer = semaphore.try_with_permits_for(n, Duration::ZERO, run);
        assert!(
            matches!(answer, Err(ferrisson::Error::InvalidArgument(_))),
            "{n}"
        );
    }
    let none = MultiLock::new(Vec::<RLock>::new());
    let answer = none.try_with_lock_for(Duration::ZERO, |_| run());
    assert!(matches!(answer, Err(ferrisson::Error::InvalidArgument(_))));
    let answer = RedLock::new(Vec::<RLock>::new()).with_lock(|_| run());
    assert!(matches!(answer, Err(ferrisson::Error::InvalidArgument(_))));
    let inside = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { client.get_mutex("bwl:refused").with_lock(|_| run()) });
    assert!(matches!(inside, Err(ferrisson::Error::InsideRuntime)));
    assert!(!ran.load(Ordering::SeqCst));
}
