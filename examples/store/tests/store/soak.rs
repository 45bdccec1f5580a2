//! A bounded soak of the `store` binary on loopback: mixed traffic for `SOAK_SECS` seconds
//! (default 300) — catalog reads, 402s, purchases, replays, bad input and slow clients — with
//! the server's RSS and open file descriptors read from `/proc` at the start and the end.
//!
//! ```text
//! cargo test -p x402-store --all-features --test store -- --ignored soak --nocapture
//! ```
//!
//! It stops by itself, and kills the store when it ends (also on failure).

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tower_x402_sandbox::SandboxWallet;
use x402_wire::{PaymentRequired, header};

/// RSS in KiB and open descriptors of process `pid`.
fn resources(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (rss, fds)
}

#[derive(Default)]
struct Tally {
    catalog: AtomicU64,
    challenges: AtomicU64,
    purchases: AtomicU64,
    replays: AtomicU64,
    bad_input: AtomicU64,
    slow_closed: AtomicU64,
    server_errors: AtomicU64,
}

async fn worker(base: String, tally: Arc<Tally>, until: Instant, seed: u64) {
    // Idle connections leave the pool before the server's 2 s keep-alive limit closes them.
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_millis(1000))
        .build()
        .unwrap();
    let products = [
        super::support::RECEIPT,
        super::support::TAX,
        super::support::STAMPS,
    ];
    let mut round = seed;
    while Instant::now() < until {
        round += 1;
        let slug = products[(round % 3) as usize];
        let url = format!("{base}/api/x402/{slug}");
        let check = |status: reqwest::StatusCode| {
            if status.is_server_error() {
                tally.server_errors.fetch_add(1, Ordering::Relaxed);
            }
        };
        match round % 6 {
            0 | 1 => {
                for path in [
                    "/.well-known/x402.json",
                    "/openapi.json",
                    "/llms.txt",
                    "/api/bazaar",
                    "/mcp",
                ] {
                    let response = http
                        .get(format!("{base}{path}"))
                        .header("accept-encoding", "gzip")
                        .send()
                        .await
                        .unwrap();
                    check(response.status());
                    let _ = response.bytes().await;
                    tally.catalog.fetch_add(1, Ordering::Relaxed);
                }
            }
            2 => {
                let response = http.get(&url).send().await.unwrap();
                check(response.status());
                assert_eq!(response.status(), 402);
                tally.challenges.fetch_add(1, Ordering::Relaxed);
            }
            3 => {
                let challenge = http.get(&url).send().await.unwrap();
                let required: PaymentRequired =
                    header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
                let payment =
                    header::encode(&SandboxWallet::random().pay(&required).unwrap()).unwrap();
                for attempt in 0..2 {
                    let response = http
                        .get(&url)
                        .header("payment-signature", payment.clone())
                        .send()
                        .await
                        .unwrap();
                    check(response.status());
                    assert_eq!(response.status(), 200);
                    let _ = response.bytes().await;
                    if attempt == 0 {
                        tally.purchases.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tally.replays.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            4 => {
                for request in [
                    http.get(&url).header("payment-signature", "%%%garbage"),
                    http.get(format!("{base}/api/x402/no-such-product")),
                    http.post(format!("{base}/mcp"))
                        .header("content-type", "application/json")
                        .body("{not json"),
                    http.post(format!("{base}/api/discovery"))
                        .body(vec![b'x'; 100 * 1024]),
                    http.delete(format!("{base}/openapi.json")),
                    http.get(format!("{base}/api/passport/pp_nope")),
                ] {
                    let response = request.send().await.unwrap();
                    check(response.status());
                    assert!(response.status().is_client_error(), "{}", response.status());
                    tally.bad_input.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                // A slow client: half a request line, then silence; the server must close it.
                let address = base.trim_start_matches("http://");
                let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
                stream
                    .write_all(b"GET /llms.txt HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    .await
                    .unwrap();
                let mut buffer = [0u8; 256];
                let closed = tokio::time::timeout(Duration::from_secs(30), async {
                    loop {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                })
                .await;
                assert!(closed.is_ok(), "a slow client was kept open");
                tally.slow_closed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 5-minute soak; run it with --ignored (see the module docs)"]
async fn soak() {
    let seconds: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_store"))
        .env("RUST_LOG", "warn")
        .env("STORE_LISTEN", "127.0.0.1:0")
        .env("STORE_HEADER_READ_TIMEOUT_SECS", "2")
        .env(
            "STORE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("store.db").display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = stdout.next_line().await.unwrap().expect("the store exited");
        if let Some(address) = line.strip_prefix("listening on ") {
            break address.to_owned();
        }
    };
    // Warm up with a few seconds of the same traffic, so the start figures include the database
    // pool grown to its size (its connections stay open) and the caches filled.
    let tally = Arc::new(Tally::default());
    let warm_until = Instant::now() + Duration::from_secs(5);
    let warm: Vec<_> = (0..8)
        .map(|seed| tokio::spawn(worker(base.clone(), tally.clone(), warm_until, seed)))
        .collect();
    for worker in warm {
        worker.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let start = resources(pid);
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..8)
        .map(|seed| tokio::spawn(worker(base.clone(), tally.clone(), until, seed)))
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let elapsed = started.elapsed();
    // Let the server close what the clients left (idle keep-alive connections time out).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let end = resources(pid);
    let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    println!(
        "soak: {:.0} s; catalog reads {}, 402s {}, purchases {}, replays {}, bad input {}, slow clients closed {}, 5xx {}",
        elapsed.as_secs_f64(),
        count(&tally.catalog),
        count(&tally.challenges),
        count(&tally.purchases),
        count(&tally.replays),
        count(&tally.bad_input),
        count(&tally.slow_closed),
        count(&tally.server_errors),
    );
    println!(
        "soak: RSS {} KiB -> {} KiB; open fds {} -> {}",
        start.0, end.0, start.1, end.1
    );
    assert_eq!(count(&tally.server_errors), 0);
    assert!(count(&tally.purchases) > 0 && count(&tally.slow_closed) > 0);
    assert!(
        end.1 <= start.1 + 4,
        "descriptors leaked: {} -> {}",
        start.1,
        end.1
    );
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}
