//! The command line: where Redis is (shared by every command), and the commands.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Credentials: in the URL (redis://USER:PASSWORD@host:port), or from the environment as
FERRISSON_USERNAME and FERRISSON_PASSWORD (used for every URL that carries none; they keep
the password out of `ps` and the shell's history).

Identity: the tool's client records itself as `ferrisson-cli` (a `ferrisson_client:*` key
while it runs), so it shows in `clients`; --no-identity (or FERRISSON_NO_IDENTITY=1) writes
none, for an ACL user that may not write those keys.

Exit codes:
  0  done (inspect: the object is free, or nothing is under the name)
  1  inspect: the object is held; force-unlock: nothing was held (or it was released while
     you decided)
  2  usage error: a bad option, name or URL; watch: no terminal, or the terminal failed
  3  cannot connect, or Redis answered an error
  4  the name is not of a kind the command handles (force-unlock on a semaphore, say)
  5  force-unlock declined, no terminal to ask on (pass --yes), or the holders changed while
     you decided (nothing unlocked: run it again)";

/// Look into ferrisson's (and Redisson's) locks in Redis: who holds what, who waits, which
/// clients are alive; free a stuck lock.
#[derive(Debug, Parser)]
#[command(name = "ferrisson", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) server: Server,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where Redis is: one server, a Cluster or a master watched by Sentinel.
#[derive(Debug, Args)]
pub(crate) struct Server {
    /// The server: redis://[USER:PASSWORD@]HOST[:PORT][/DB], rediss://... (TLS, with the
    /// `tls` feature) or unix:///PATH
    #[arg(
        long,
        global = true,
        env = "FERRISSON_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub(crate) url: String,
    /// A node of a Redis Cluster, HOST:PORT or a URL (repeat for more seeds); instead of --url
    #[arg(long, global = true, value_name = "SEED")]
    pub(crate) cluster: Vec<String>,
    /// A sentinel, HOST:PORT or a URL (repeat for more), with --master; instead of --url
    #[arg(long, global = true, value_name = "ADDR")]
    pub(crate) sentinel: Vec<String>,
    /// The name of the master the sentinels watch
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) master: Option<String>,
    /// Seconds to wait for a connection, and for each reply
    #[arg(long, global = true, value_name = "SECS", default_value = "5", value_parser = seconds)]
    pub(crate) timeout: Duration,
    /// Record no identity of the tool's own client (no `ferrisson_client:*` key): for an ACL
    /// user without write access to those keys; the tool then does not show in `clients`
    // Falsey parsing: `FERRISSON_NO_IDENTITY=0` (or `false`, `no`, empty) leaves it off, and
    // anything else turns it on, as a shell user expects of a `=1` switch.
    #[arg(
        long,
        global = true,
        env = "FERRISSON_NO_IDENTITY",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub(crate) no_identity: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show one object: its kind, holders (with the client each belongs to), lease left,
    /// waiters, fair queue, revocation requests, permits or count
    Inspect {
        /// The object's name
        #[arg(value_parser = name)]
        name: String,
        /// Read it as this kind, rather than finding the kind from its keys
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// Print the snapshot as JSON, holders with their client's identity
        #[arg(long)]
        json: bool,
    },
    /// One line per object whose name matches PATTERN: name, kind, holders, lease, waiters
    List {
        /// A glob as SCAN's MATCH takes it (*, ?, [a-z]), matched against object names
        #[arg(default_value = "*")]
        pattern: String,
        /// Print the snapshots as JSON
        #[arg(long)]
        json: bool,
    },
    /// The live ferrisson clients (id, app, host, pid, version, age), what each holds and
    /// where it took it, and its waits for a hold of its own
    Clients {
        /// Print them as JSON
        #[arg(long)]
        json: bool,
    },
    /// A full-screen table of the objects matching PATTERN and the live clients, refreshed
    /// like top; q, Esc or Ctrl-C quits (so do SIGINT, SIGTERM, SIGHUP and SIGQUIT), giving
    /// the terminal back
    Watch {
        /// A glob matched against object names, as for `list`
        #[arg(default_value = "*")]
        pattern: String,
        /// Seconds between refreshes
        #[arg(long, value_name = "SECS", default_value = "1", value_parser = seconds)]
        interval: Duration,
    },
    /// Free a lock or read-write lock whoever holds it, after saying who does and asking
    ///
    /// It reads the object, says who holds it, asks (unless --yes), then reads it again: if
    /// the holders (their owners, a read-write lock's mode) or the kind changed meanwhile, it
    /// unlocks nothing and exits 5, showing the new holders. A window of milliseconds remains
    /// between that second read and the unlock, which the library does unconditionally; a
    /// holder that took the lock within it is told by its guard's `lost()` like any forced
    /// holder.
    #[command(name = "force-unlock")]
    ForceUnlock {
        /// The lock's name
        #[arg(value_parser = name)]
        name: String,
        /// Do not ask: needed when stdin is not a terminal
        #[arg(long, short)]
        yes: bool,
    },
}

/// The kinds `inspect --kind` reads a name as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    /// RLock (and RMutex)
    Lock,
    /// RFairLock
    Fair,
    /// RFencedLock
    Fenced,
    /// RReadWriteLock
    Rwlock,
    /// RSemaphore
    Semaphore,
    /// RPermitExpirableSemaphore
    Permits,
    /// RCountDownLatch
    Latch,
}

/// A non-empty object name (the library checks the rest).
fn name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the name is empty".into());
    }
    Ok(text.to_owned())
}

/// Seconds, fractions allowed: at least 10 ms, at most a day.
fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is no number of seconds"))?;
    if !(0.01..=86_400.0).contains(&secs) {
        return Err(format!("{text} s is out of range (0.01 to 86400)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn seconds_are_checked() {
        assert_eq!(seconds("0.2"), Ok(Duration::from_millis(200)));
        assert!(seconds("0").is_err());
        assert!(seconds("NaN").is_err());
        assert!(seconds("soon").is_err());
        assert!(name("").is_err());
    }
}
