//! Synchronizers other than locks: the count-down latch.

mod latch;

pub use latch::RCountDownLatch;
