//! Synchronizers other than the lock family: the count-down latch, the semaphore and the
//! non-reentrant mutex.

mod latch;
mod mutex;
mod semaphore;

pub use latch::RCountDownLatch;
pub use mutex::RMutex;
pub use semaphore::RSemaphore;
