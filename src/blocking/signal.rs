//! Ending a process on SIGINT or SIGTERM with its holds given back, for synchronous code: the
//! blocking twins of [`ferrisson::Client::close_on_signal`](crate::Client::close_on_signal)
//! and [`on_signal`](crate::Client::on_signal).

use std::time::Duration;

use super::{Blocker, Client, ClientBuilder};
use crate::error::Result;
use crate::signal::Signal;

impl ClientBuilder {
    /// How long the process's first SIGTERM or SIGINT lets this client's holds finish their
    /// work before they are given back; zero gives them back at once.
    ///
    /// Default is 25 s; at most a day. See
    /// [`ferrisson::ClientBuilder::drain_grace`](crate::ClientBuilder::drain_grace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .drain_grace(std::time::Duration::from_secs(7)) // `docker stop` kills after 10 s
    ///     .build()?;
    /// client.close_on_signal()?;
    /// # Ok(()) }
    /// ```
    pub fn drain_grace(self, grace: Duration) -> Self {
        self.with(|b| b.drain_grace(grace))
    }
}

impl Client {
    /// On SIGINT (Ctrl-C) or SIGTERM, drains this client, gives back what it still holds,
    /// then ends the process with exit status 130 or 143. During the drain new acquisitions
    /// fail with [`Error::Draining`](crate::Error::Draining) while the work under way (a
    /// [`with_lock`](crate::blocking::RLock::with_lock) closure, a thread with a guard) keeps
    /// its leases until it gives them back, or until the
    /// [drain grace](ClientBuilder::drain_grace) runs out (25 s by default); a second signal
    /// gives everything back at once. The threads holding guards need not do anything (a
    /// thread asleep in `std::thread::sleep` with a guard is fine: its hold is given back when
    /// the grace runs out). See
    /// [`ferrisson::Client::close_on_signal`](crate::Client::close_on_signal) for what is given
    /// back, how long it may take (at most twice the response timeout after the drain) and
    /// what it changes in the process.
    ///
    /// Does not block: it may be called anywhere, in async code too.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when the listener cannot be started; nothing is
    /// installed then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// fn main() -> ferrisson::Result<()> {
    ///     let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
    ///     client.close_on_signal()?; // SIGTERM from here on lets the export finish (25 s at most)
    ///     client.get_lock("nightly-export").with_lock(|_token| {
    ///         std::thread::sleep(std::time::Duration::from_secs(20)); // the export
    ///     })
    /// }
    /// ```
    pub fn close_on_signal(&self) -> Result<()> {
        self.as_async().close_on_signal()
    }

    /// As [`close_on_signal`](Self::close_on_signal), but the process goes on: the returned
    /// [`OnSignal`] tells when the signal came, the drain ended and the holds were given back,
    /// for a program that runs its own shutdown. See
    /// [`ferrisson::Client::on_signal`](crate::Client::on_signal).
    ///
    /// # Errors
    ///
    /// As [`close_on_signal`](Self::close_on_signal).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let stop = client.on_signal()?;
    /// let guard = client.get_lock("nightly-export").lock()?;
    /// for chunk in 0..100 {
    ///     if let Some(signal) = stop.received() {
    ///         eprintln!("{signal} after {chunk} chunks: the lock is back, stopping");
    ///         std::process::exit(signal.exit_code());
    ///     }
    ///     // ... export chunk `chunk` ...
    /// }
    /// guard.unlock()
    /// # }
    /// ```
    pub fn on_signal(&self) -> Result<OnSignal> {
        Ok(OnSignal {
            signal: self.as_async().on_signal()?,
            blocker: Blocker::of(&self.as_async().inner),
        })
    }
}

/// Tells when the process got SIGINT or SIGTERM, drained, and gave back the holds of the client
/// it came from. From [`Client::on_signal`]; the blocking twin of
/// [`ferrisson::OnSignal`](crate::OnSignal).
///
/// While one lives, a signal leaves the process running for the program's own shutdown; a
/// second signal ends it.
#[derive(Debug)]
#[must_use = "while it lives, a signal leaves the process running: check or wait for it"]
pub struct OnSignal {
    signal: crate::OnSignal,
    blocker: Blocker,
}

impl OnSignal {
    /// The signal, once it came, the drain ended and the holds were given back; `None` before.
    /// Does not block.
    pub fn received(&self) -> Option<Signal> {
        self.signal.received()
    }

    /// Blocks until the signal came, the drain ended and the holds were given back.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let stop = client.on_signal()?;
    /// std::thread::spawn(move || -> ferrisson::Result<()> {
    ///     let signal = stop.wait()?;
    ///     eprintln!("{signal}: cleaning up");
    ///     std::process::exit(signal.exit_code());
    /// });
    /// # Ok(()) }
    /// ```
    pub fn wait(self) -> Result<Signal> {
        let OnSignal { signal, blocker } = self;
        blocker.run(signal)
    }

    /// Blocks at most `timeout` for the signal; `None` when it did not come meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<Signal>> {
        let signal = &mut self.signal;
        self.blocker
            .run(async { tokio::time::timeout(timeout, signal).await.ok() })
    }
}
