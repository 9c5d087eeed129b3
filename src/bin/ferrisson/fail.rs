//! Exit codes (listed in `--help` and the guide), and failures: one line on stderr that says
//! what went wrong and what to do.

use ferrisson::Error;

/// How the process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// Done; `inspect`: free, or nothing under the name.
    Done = 0,
    /// `inspect`: held; `force-unlock`: nothing was held.
    Held = 1,
    /// A bad option, name or URL; `watch` without a usable terminal.
    Usage = 2,
    /// No connection, or Redis answered an error.
    Redis = 3,
    /// The name is of a kind the command does not handle.
    WrongKind = 4,
    /// `force-unlock` declined, no terminal to ask on, or the holders changed meanwhile.
    Declined = 5,
}

impl Code {
    /// `force-unlock`: nothing was held (the code `inspect` gives a held object).
    pub(crate) const NOTHING_HELD: Code = Code::Held;
    /// `watch`: no terminal, or the terminal failed under it. With the usage errors: the
    /// command cannot run where it was started (no terminal is checked before connecting),
    /// and 3 means the server.
    pub(crate) const TERMINAL: Code = Code::Usage;

    pub(crate) fn exit(self) -> std::process::ExitCode {
        std::process::ExitCode::from(self as u8)
    }
}

/// A command that could not do its work.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: Code,
    /// One line: what happened, then what to do.
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let (code, advice) = match &e {
            Error::InvalidArgument(_) => (Code::Usage, "check the name"),
            Error::Config(_) => (
                Code::Usage,
                "check --url (or FERRISSON_URL), --cluster and --sentinel/--master",
            ),
            Error::WrongType { .. } => (
                Code::WrongKind,
                "it is no object of that kind; `ferrisson inspect NAME` without --kind says what \
                 it is",
            ),
            Error::Connect { .. } => (
                Code::Redis,
                "is the server up and reachable? point --url (or FERRISSON_URL), --cluster or \
                 --sentinel/--master at it",
            ),
            // The tool's identity is written when it connects: an operator's user that may
            // only read identities gets this before any command runs.
            Error::PermissionDenied { what, .. } if what.contains("client_identity") => (
                Code::Redis,
                "the ACL user may not write the tool's identity (`ferrisson_client:*`): pass \
                 --no-identity (or set FERRISSON_NO_IDENTITY=1)",
            ),
            Error::PermissionDenied { what, .. } if what.contains("ferrisson_client:") => (
                Code::Redis,
                "the ACL user may not read client identities: `list`, `clients` and `watch` \
                 need ~ferrisson_client:* (read-only %R~ is enough on Redis 7)",
            ),
            Error::PermissionDenied { .. } => (
                Code::Redis,
                "the ACL user lacks a permission: `list`, `clients` and `watch` need +scan \
                 besides the README's rule (see the guide's ACL page)",
            ),
            _ => (Code::Redis, "is the server healthy? try again"),
        };
        Failure::new(code, format!("{e}; {advice}"))
    }
}
