//! Unit tests of the error mapping.

use super::*;

#[test]
fn error_is_send_sync_static() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Error>();
}

#[test]
fn wrongtype_names_the_key_from_the_script_detail() {
    let err =
        redis::make_extension_error("WRONGTYPE".into(), Some("key orders holds a string".into()));
    match Error::from_redis(err, "fallback") {
        Error::WrongType { key } => assert_eq!(key, "orders"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn wrongtype_from_a_plain_command_names_the_given_key() {
    let err = redis::make_extension_error(
        "WRONGTYPE".into(),
        Some("Operation against a key holding the wrong kind of value".into()),
    );
    assert!(matches!(Error::from_redis(err, "k"), Error::WrongType { key } if key == "k"));
}

#[test]
fn acl_refusals_become_permission_denied_with_redis_reason() {
    let direct = redis::make_extension_error(
        "NOPERM".into(),
        Some("this user has no permissions to run the 'evalsha' command".into()),
    );
    let in_script_70 = redis::make_extension_error(
        "ERR".into(),
        Some("The user executing the script can't run this command or subcommand script: ab, on @user_script:1.".into()),
    );
    let in_script_72 = redis::make_extension_error(
        "ERR".into(),
        Some("ACL failure in script: User u has no permissions to run the 'time' command script: ab, on @user_script:4.".into()),
    );
    for (err, needle) in [
        (direct, "'evalsha'"),
        (in_script_70, "can't run this command"),
        (in_script_72, "'time'"),
    ] {
        match Error::from_redis_request(err, "k", || "EVALSHA x".into()) {
            Error::PermissionDenied { what, reason } => {
                assert_eq!(what, "EVALSHA x");
                assert!(reason.contains(needle), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let other = redis::make_extension_error("ERR".into(), Some("something else".into()));
    assert!(matches!(
        Error::from_redis_request(other, "k", || unreachable!()),
        Error::Redis(_)
    ));
}

/// A server's error line, as the redis crate reads it off the wire.
fn reply(line: &str) -> RedisError {
    match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
        Ok(redis::Value::ServerError(e)) => e.into(),
        other => panic!("{line}: {other:?}"),
    }
}

/// The texts were read from Redis 6.2.14, Redis 7.0.15 and Valkey 8.1.8 (a script calling
/// HGET on a string, or a command its user may not run, on a master or on a replica), and
/// from a group commit's list, where the script catches the error itself.
#[test]
fn a_script_s_failing_command_reads_alike_on_every_server() {
    let wrongtype = [
        "WRONGTYPE Operation against a key holding the wrong kind of value script: ad66cc4f88e9dd25832b3745b99614303d7ee94f, on @user_script:1.",
        "ERR Error running script (call to f_ad66cc4f88e9dd25832b3745b99614303d7ee94f): @user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
    ];
    for line in wrongtype {
        assert!(
            matches!(Error::from_redis(reply(line), "k"), Error::WrongType { key } if key == "k"),
            "{line}"
        );
    }
    let readonly = [
        "READONLY You can't write against a read only replica. script: ee5bed0f6963e93a14eebfb64f07c299c1b4313f, on @user_script:1.",
        "ERR Error running script (call to f_ee5bed0f6963e93a14eebfb64f07c299c1b4313f): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.",
        "@user_script: 1: -READONLY You can't write against a read only replica.",
        "READONLY You can't write against a read only replica.",
    ];
    for line in readonly {
        let err = command_error(reply(line));
        assert_eq!(err.code(), Some("READONLY"), "{line}");
        assert_eq!(
            err.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        );
    }
    let refused = [
        "ERR The user executing the script can't run this command or subcommand script: 1a8c67671c988614eb0c618efa73283c54565629, on @user_script:1.",
        "ERR Error running script (call to f_1a8c67671c988614eb0c618efa73283c54565629): @user_script:1: @user_script: 1: The user executing the script can't run this command or subcommand",
        "@user_script: 1: The user executing the script can't access at least one of the keys mentioned in the command arguments",
        "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments",
        "ERR ACL failure in script: User u has no permissions to run the 'time' command script: 1a8c67671c988614eb0c618efa73283c54565629, on @user_script:1.",
        "ERR ACL failure in script: No permissions to access a key",
        "NOPERM this user has no permissions to run the 'time' command or its subcommand",
        "NOPERM User u has no permissions to run the 'time' command",
        "NOPERM No permissions to access a key",
    ];
    for line in refused {
        let err = reply(line);
        assert!(permission_refusal(&err).is_some(), "{line}");
        assert!(
            matches!(
                Error::from_redis_request(err, "k", || "x".into()),
                Error::PermissionDenied { .. }
            ),
            "{line}"
        );
    }
    // Other script errors stay what they were, whatever the server.
    for line in [
        "ERR Error running script (call to f_4f59): @user_script:1: @user_script: 1: Unknown Redis command called from Lua script",
        "ERR Error running script (call to f_4f59): @user_script:3: user_script:3: attempt to compare nil with number",
        "ERR Unknown command called from script script: 4f59, on @user_script:1.",
        "ERR something else",
    ] {
        let err = Error::from_redis(reply(line), "k");
        assert!(
            matches!(&err, Error::Redis(e) if e.code() == Some("ERR")),
            "{line}: {err:?}"
        );
        assert!(permission_refusal(&reply(line)).is_none(), "{line}");
    }
}

#[test]
fn timeouts_are_unknown_outcomes_refusals_are_not() {
    let timeout = Error::Redis(std::io::Error::new(std::io::ErrorKind::TimedOut, "t").into());
    assert!(timeout.outcome_unknown());
    let refused =
        Error::Redis(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "r").into());
    assert!(!refused.outcome_unknown());
    assert!(!refused.connection_dropped());
    let reset = Error::Redis(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "r").into());
    assert!(reset.outcome_unknown() && reset.connection_dropped());
}

#[test]
fn a_self_wait_names_both_places_and_how_to_nest() {
    let err = Error::SelfWait {
        name: "inventory".into(),
        held_at: "src/orders.rs:10:22".into(),
        called_at: "src/orders.rs:12:20".into(),
    };
    let shown = err.to_string();
    for part in [
        "`inventory`",
        "src/orders.rs:10:22",
        "src/orders.rs:12:20",
        "with_lock",
        "guard.scope(..)",
        "guard.reenter()",
        "releases its read hold first",
    ] {
        assert!(shown.contains(part), "{part} in {shown}");
    }
    assert!(std::error::Error::source(&err).is_none());
}

#[test]
fn draining_names_the_signal_and_what_still_runs() {
    let shown = Error::Draining {
        signal: crate::Signal::Terminate,
    }
    .to_string();
    assert!(shown.contains("SIGTERM"), "{shown}");
    assert!(shown.contains("no new locks"), "{shown}");
}
