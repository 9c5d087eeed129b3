//! A read-write lock: readers share a document, a writer waits for them and then works alone;
//! the writer also reads (a read nested in the write hold's scope is the writer's own) and
//! downgrades to a reader.
//!
//! Run with `cargo run --example read_write` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::time::Duration;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let client = ferrisson::Client::connect(&url).await?;

    let mut readers = Vec::new();
    for i in 0..3 {
        let doc = client.get_read_write_lock("doc:readme");
        readers.push(tokio::spawn(async move {
            let guard = doc.read_lock().lock().await?;
            println!("reader {i} reads (token {})", guard.fencing_token());
            tokio::time::sleep(Duration::from_millis(100)).await;
            println!("reader {i} done");
            guard.unlock().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;

    let doc = client.get_read_write_lock("doc:readme");
    println!("writer asks while 3 readers are in");
    let write = doc.write_lock().lock().await?;
    println!("writer writes alone (token {})", write.fencing_token());
    // The writer may read too: a read nested in the write hold's scope is the writer's own.
    let read = write.scope(doc.read_lock().lock()).await?;
    write.unlock().await?; // ... and is now a plain reader: others may read again
    let other = client.get_read_write_lock("doc:readme");
    let shared = other
        .read_lock()
        .try_lock()
        .await?
        .expect("downgraded to a read lock");
    println!("downgraded: another reader got in beside the former writer");
    shared.unlock().await?;
    read.unlock().await?;

    match doc.read_lock().lock().await {
        Ok(r) => {
            // A write nested in a read hold's scope: refused at once, it would wait for itself.
            let refused = r.scope(doc.write_lock().try_lock()).await;
            println!(
                "a reader asking to write: {}",
                refused
                    .map(|_| "granted?!".to_string())
                    .unwrap_or_else(|e| e.to_string())
            );
            r.unlock().await?;
        }
        Err(e) => return Err(e),
    }
    for r in readers {
        r.await.expect("reader task")?;
    }
    println!("free again: {}", !doc.read_lock().is_locked().await?);
    Ok(())
}
