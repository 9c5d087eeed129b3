//! The script table and the calls' encoding, without a server.

use super::*;

#[test]
fn every_script_opens_with_its_contract() {
    for script in ALL {
        assert!(
            script.text().starts_with("-- "),
            "{} lacks its header",
            script.name
        );
        assert!(
            script.text().contains("KEYS["),
            "{} documents no keys",
            script.name
        );
        assert!(
            script.text().contains("Repl"),
            "{} documents no reply",
            script.name
        );
        assert_eq!(script.sha().len(), 40);
    }
}

#[test]
fn sharded_variants_publish_with_spublish_only() {
    for script in ALL {
        let publishes = script.text().matches("call('publish',").count();
        // Every publish is written the one way the sharded variant rewrites.
        assert_eq!(
            script.text().matches("'publish'").count(),
            publishes,
            "{} publishes in another form",
            script.name
        );
        let (sharded, sha) = script.sharded();
        assert!(!sharded.contains("'publish'"), "{}", script.name);
        assert!(!sharded.contains("'numsub'"), "{}", script.name);
        assert_eq!(sharded.matches("call('spublish',").count(), publishes);
        assert_eq!(sha.len(), 40);
    }
}

#[test]
fn evalsha_puts_keys_before_args() {
    let call = ScriptCall::new(&LOCK_ACQUIRE)
        .key("k1")
        .key("k2")
        .arg("owner")
        .arg(30_000u64);
    let packed = String::from_utf8(call.evalsha(false).get_packed_command()).unwrap();
    let parts: Vec<&str> = packed
        .split("\r\n")
        .filter(|p| !p.starts_with(['*', '$']))
        .collect();
    assert_eq!(
        parts[..6],
        ["EVALSHA", LOCK_ACQUIRE.sha(), "2", "k1", "k2", "owner"]
    );
    assert_eq!(parts[6], "30000");
}

#[test]
fn parts_keep_their_bounds_and_keys_go_first_whatever_the_order_given() {
    let call = ScriptCall::new(&LOCK_RELEASE)
        .arg("a1")
        .key("k1")
        .arg(&["a2", "a3"][..])
        .key_concat(&["pre:", "{", "name", "}", ":id"])
        .arg(7u64)
        .arg("")
        .key(String::from("k3"));
    let packed = String::from_utf8(call.evalsha(true).get_packed_command()).unwrap();
    let parts: Vec<&str> = packed.split("\r\n").collect();
    // *<count>, then $<len> and the bytes of every part: an empty part is `$0` and "".
    let values: Vec<&str> = parts[1..]
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| c[1])
        .collect();
    assert_eq!(parts[0], "*11");
    assert_eq!(
        values,
        [
            "EVALSHA",
            LOCK_RELEASE.sha_for(true),
            "3",
            "k1",
            "pre:{name}:id",
            "k3",
            "a1",
            "a2",
            "a3",
            "7",
            ""
        ]
    );
    assert_eq!(
        call.describe(),
        "script lock_release (EVALSHA) with keys [k1, pre:{name}:id, k3]"
    );
}

#[test]
fn timeouts_become_io_timeouts() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let err = rt
        .block_on(capped(
            Duration::from_millis(1),
            std::future::pending::<Result<(), RedisError>>(),
        ))
        .unwrap_err();
    assert!(err.is_timeout());
}

#[test]
fn every_script_that_reads_server_time_defines_it_once() {
    for script in ALL {
        let uses = script.text().matches("server_time()").count();
        let defines = script
            .text()
            .matches("local function server_time()")
            .count();
        assert!(
            uses == 0 || (defines == 1 && uses > defines),
            "{}: server_time() used {uses} times, defined {defines} times",
            script.name
        );
    }
    // The list forms define it in their head, reading the clock once a list.
    for script in ALL.iter().filter_map(|s| s.listed()) {
        assert!(
            script
                .text()
                .starts_with(include_str!("../../lua/list_head.lua"))
        );
    }
}
