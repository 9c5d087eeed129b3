//! What a lock cycle (acquire and release of a free key) costs Redis's one thread, in CPU µs,
//! for the scripts sent alone, for their list forms (group commit) with 8 and 32 cycles to a
//! call, for the bare commands of the Redisson layout with no logic (the floor any script of
//! this layout pays), and for rslock's pattern (`SET NX PX`, then a compare-and-delete
//! script). Rounds are interleaved; the median of 5 is printed. Requests are pipelined 32 deep,
//! as many tasks of one client send them.
//!
//! Run with `cargo bench --bench script_cost`.

#![allow(missing_docs)]

#[path = "../tests/support/server.rs"]
mod server;

use redis::aio::MultiplexedConnection;
use server::RedisServer;

const CYCLES: usize = 16_384;
const ROUNDS: usize = 5;
const OWNER: &str = "c0ffee00-1111-2222-3333-444455556666:7";

const ACQUIRE: &str = concat!(
    include_str!("../lua/clock.lua"),
    include_str!("../lua/lock_acquire.lua")
);
const RELEASE: &str = include_str!("../lua/lock_release.lua");
/// The list forms as the client builds them (src/script/call.rs).
const ACQUIRE_LIST: &str = concat!(
    include_str!("../lua/list_head.lua"),
    include_str!("../lua/lock_acquire.lua"),
    include_str!("../lua/list_tail.lua")
);
const RELEASE_LIST: &str = concat!(
    include_str!("../lua/list_head.lua"),
    include_str!("../lua/lock_release.lua"),
    include_str!("../lua/list_tail.lua")
);

const FLOOR_ACQUIRE: &str = include_str!("lua/floor_acquire.lua");
const FLOOR_RELEASE: &str = include_str!("lua/floor_release.lua");
const COMPARE_AND_DELETE: &str = include_str!("lua/compare_and_delete.lua");

async fn load(conn: &mut MultiplexedConnection, source: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(conn)
        .await
        .unwrap()
}

async fn redis_cpu(conn: &mut MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == "used_cpu_user" || k == "used_cpu_sys")
                .then(|| v.trim().parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

#[derive(Clone, Copy)]
enum Pattern {
    Alone,
    Listed(usize),
    Floor(usize),
    Rslock,
}

struct Shas {
    acquire: String,
    release: String,
    acquire_list: String,
    release_list: String,
    floor_acquire: String,
    floor_release: String,
    compare_and_delete: String,
}

fn lock_keys(key: &str) -> [String; 4] {
    [
        key.to_owned(),
        format!("ferrisson_token:{{{}}}", &key[key.len() - 2..]),
        format!("redisson_lock__channel:{{{key}}}"),
        format!("ferrisson_lock_starving:{{{key}}}"),
    ]
}

/// Redis CPU µs per cycle of `CYCLES` cycles on fresh keys.
async fn run(conn: &mut MultiplexedConnection, shas: &Shas, pattern: Pattern) -> f64 {
    let _: () = redis::cmd("FLUSHALL").query_async(conn).await.unwrap();
    let before = redis_cpu(conn).await;
    let per_call = match pattern {
        Pattern::Alone | Pattern::Rslock => 1,
        Pattern::Listed(k) | Pattern::Floor(k) => k,
    };
    let mut pipe = redis::pipe();
    let mut queued = 0;
    for call in 0..CYCLES / per_call {
        let keys: Vec<String> = (0..per_call)
            .map(|i| format!("bench_cost_{}", call * per_call + i))
            .collect();
        let (mut acquire, mut release) = (redis::cmd("EVALSHA"), redis::cmd("EVALSHA"));
        match pattern {
            Pattern::Alone => {
                let [lock, counter, channel, starving] = lock_keys(&keys[0]);
                acquire.arg(&shas.acquire).arg(2).arg(&lock).arg(counter);
                acquire.arg(OWNER).arg(30_000).arg("0");
                release.arg(&shas.release).arg(3).arg(lock).arg(channel);
                release.arg(starving).arg(OWNER).arg(500);
            }
            Pattern::Listed(k) => {
                acquire.arg(&shas.acquire_list).arg(2 * k);
                release.arg(&shas.release_list).arg(3 * k);
                let all: Vec<[String; 4]> = keys.iter().map(|k| lock_keys(k)).collect();
                for [lock, counter, _, _] in &all {
                    acquire.arg(lock).arg(counter);
                }
                for [lock, _, channel, starving] in &all {
                    release.arg(lock).arg(channel).arg(starving);
                }
                for _ in 0..k {
                    acquire.arg(2).arg(3).arg(OWNER).arg(30_000).arg("0");
                    release.arg(3).arg(2).arg(OWNER).arg(500);
                }
            }
            Pattern::Floor(k) => {
                acquire.arg(&shas.floor_acquire).arg(k).arg(&keys);
                acquire.arg(OWNER).arg(30_000);
                release
                    .arg(&shas.floor_release)
                    .arg(k)
                    .arg(&keys)
                    .arg(OWNER);
            }
            Pattern::Rslock => {
                acquire = redis::cmd("SET");
                acquire
                    .arg(&keys[0])
                    .arg(OWNER)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000);
                release.arg(&shas.compare_and_delete).arg(1).arg(&keys[0]);
                release.arg(OWNER);
            }
        }
        pipe.add_command(acquire).add_command(release);
        queued += 2;
        if queued >= 32 {
            let _: Vec<redis::Value> = pipe.query_async(conn).await.unwrap();
            pipe = redis::pipe();
            queued = 0;
        }
    }
    if queued > 0 {
        let _: Vec<redis::Value> = pipe.query_async(conn).await.unwrap();
    }
    (redis_cpu(conn).await - before) * 1e6 / CYCLES as f64
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = RedisServer::start();
        let mut conn = server.raw().await;
        let shas = Shas {
            acquire: load(&mut conn, ACQUIRE).await,
            release: load(&mut conn, RELEASE).await,
            acquire_list: load(&mut conn, ACQUIRE_LIST).await,
            release_list: load(&mut conn, RELEASE_LIST).await,
            floor_acquire: load(&mut conn, FLOOR_ACQUIRE).await,
            floor_release: load(&mut conn, FLOOR_RELEASE).await,
            compare_and_delete: load(&mut conn, COMPARE_AND_DELETE).await,
        };
        let patterns = [
            ("ferrisson, each operation alone", Pattern::Alone),
            ("ferrisson, list form, 8 cycles a call", Pattern::Listed(8)),
            (
                "ferrisson, list form, 32 cycles a call",
                Pattern::Listed(32),
            ),
            (
                "layout's bare commands, 64 a call (floor)",
                Pattern::Floor(64),
            ),
            ("rslock: SET NX PX + compare-and-delete", Pattern::Rslock),
        ];
        let mut seen = vec![Vec::new(); patterns.len()];
        for _ in 0..ROUNDS {
            for (i, (_, pattern)) in patterns.iter().enumerate() {
                seen[i].push(run(&mut conn, &shas, *pattern).await);
            }
        }
        println!("Redis CPU µs per lock cycle (median of {ROUNDS} interleaved rounds):");
        for ((name, _), mut runs) in patterns.iter().zip(seen) {
            runs.sort_by(f64::total_cmp);
            println!(
                "  {name:44} {:6.2}  (runs {:.2}..{:.2})",
                runs[ROUNDS / 2],
                runs[0],
                runs[ROUNDS - 1]
            );
        }
    });
}
