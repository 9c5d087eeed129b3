//! ferrisson's metrics in Prometheus' text format: installs `metrics-exporter-prometheus` as the
//! recorder, builds a client, takes a few locks (one contended until it times out, one handed
//! over), a semaphore permit and a permit-expirable permit, then prints what a scrape would
//! get. Uses `REDIS_URL` when set, otherwise starts a temporary redis-server of its own.
//!
//! Run with `cargo run --example prometheus --features metrics`.
//!
//! A service would serve the same text over HTTP instead: with the exporter's `http-listener`
//! feature, `PrometheusBuilder::new().with_http_listener(([0, 0, 0, 0], 9000)).install()` from
//! inside the Tokio runtime, then scrape `http://host:9000/metrics`.

#[path = "../tests/support/server.rs"]
mod server;

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    // Install the recorder before building the client: the client describes its metrics (help
    // text, units) to the recorder installed when it is built.
    let prometheus = PrometheusBuilder::new()
        // Histograms with buckets (Prometheus can aggregate them across processes), in seconds.
        .set_buckets_for_metric(
            Matcher::Prefix("ferrisson_".into()),
            &[0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 60.0],
        )
        .expect("buckets are given")
        .install_recorder()
        .expect("no other recorder is installed");

    let (_server, url) = server::env_or_temporary();
    let client = ferrisson::Client::connect(&url).await?;

    // Two grants of one lock, the second handed over to a waiter of the same client.
    let lock = client.get_lock("example:orders");
    let guard = lock.lock().await?;
    let waiter = client.get_lock("example:orders");
    let waiting = tokio::spawn(async move { waiter.lock().await });
    // Long enough for the waiter to line up, short of the 50 ms after which it would also ask
    // once more as a starving waiter (and a release meeting that request hands nothing over).
    tokio::time::sleep(Duration::from_millis(20)).await;
    guard.unlock().await?;
    let handed = waiting.await.expect("the waiter does not panic")?;

    // A contender that gives up after 100 ms: one `timed_out` acquire.
    let impatient = client.get_lock("example:orders");
    let gave_up = impatient
        .try_lock_for(Duration::from_millis(100), None)
        .await?;
    assert!(gave_up.is_none());
    handed.unlock().await?;

    // A semaphore permit and an expirable permit.
    let api = client.get_semaphore("example:partner-api");
    api.try_set_permits(2).await?;
    api.acquire(1).await?;
    api.release(1).await?;
    let gpus = client.get_permit_expirable_semaphore("example:gpu");
    gpus.try_set_permits(1).await?;
    gpus.acquire().await?.release().await?;

    // What a scrape of /metrics would return.
    let text = prometheus.render();
    for line in text.lines().filter(|l| l.contains("ferrisson_")) {
        println!("{line}");
    }
    for expected in [
        "ferrisson_acquire_total{kind=\"lock\",outcome=\"granted\"} 2",
        "ferrisson_acquire_total{kind=\"lock\",outcome=\"timed_out\"} 1",
        "ferrisson_handovers_total{kind=\"lock\"} 1",
        "ferrisson_leases_held{kind=\"lock\"} 0",
        "ferrisson_acquire_total{kind=\"permit\",outcome=\"granted\"} 1",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    Ok(())
}
