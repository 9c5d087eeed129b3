//! Synchronizers other than locks: the count-down latch and the semaphore.

mod latch;
mod semaphore;

pub use latch::RCountDownLatch;
pub use semaphore::RSemaphore;
