//! A lock handle driven from a task of its own: another owner than the test's task, with the
//! same methods, so a test can set two contenders of one client against each other.
#![allow(unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ferrisson::{LockGuard, RLock, RReadWriteLock, Result};
use tokio::sync::{mpsc, oneshot};

type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// `lock` used by one task of its own, for as long as this value lives: every call runs there,
/// one after the other (each acquisition an owner of its own, as everywhere).
#[derive(Debug, Clone)]
pub struct Elsewhere {
    lock: RLock,
    jobs: mpsc::UnboundedSender<Job>,
}

impl Elsewhere {
    pub fn new(lock: RLock) -> Self {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                job().await;
            }
        });
        Elsewhere { lock, jobs }
    }

    /// `lock` used by the same task as this one.
    pub fn same_task(&self, lock: RLock) -> Self {
        Elsewhere {
            lock,
            jobs: self.jobs.clone(),
        }
    }

    /// Both sides of `rw`, used by one task of their own.
    pub fn rw(rw: &RReadWriteLock) -> (Self, Self) {
        let read = Elsewhere::new(rw.read_lock());
        let write = read.same_task(rw.write_lock());
        (read, write)
    }

    /// Runs `f` on the handle in the task.
    pub async fn run<T, F, Fut>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(RLock) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let lock = self.lock.clone();
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let _ = tx.send(f(lock).await);
            })
        });
        self.jobs.send(job).expect("the task lives");
        rx.await.expect("the job ran")
    }

    pub fn handle(&self) -> &RLock {
        &self.lock
    }

    pub fn name(&self) -> &str {
        self.lock.name()
    }

    pub async fn lock(&self) -> Result<LockGuard> {
        self.run(|l| async move { l.lock().await }).await
    }

    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.run(move |l| async move { l.lock_with_lease(lease).await })
            .await
    }

    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.run(|l| async move { l.try_lock().await }).await
    }

    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.run(move |l| async move { l.try_lock_for(wait, lease).await })
            .await
    }

    pub async fn is_held(&self) -> Result<bool> {
        self.run(|l| async move { l.is_held().await }).await
    }

    pub async fn hold_count(&self) -> Result<u32> {
        self.run(|l| async move { l.hold_count().await }).await
    }

    pub async fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked().await
    }

    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.lock.remaining_ttl().await
    }

    pub async fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock().await
    }
}
