//! The store's resident memory under mixed traffic: `x402-load memory --store BINARY`.
//!
//! Starts the store binary as a child process on a fresh SQLite file — in demo mode (the
//! in-process sandbox facilitator, whose stand-in chain keeps every settlement in memory) or,
//! with `--stub-facilitator`, paying through the stub facilitator over loopback HTTP as a live
//! store pays through a real one — then sends batches of mixed requests — catalog reads, unpaid requests answered
//! 402, purchases signed by sandbox wallets, and replays of earlier purchases — and prints the
//! store's RSS (`VmRSS`) before the first request and after each batch.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::HeaderValue;
use tower_x402_sandbox::SandboxWallet;
use x402_wire::{PaymentRequired, header};

use tower_x402_benches::PAY_TO;

use crate::child::{self, Running};
use crate::proc_stat;

/// Where the request counts stop for a reading, by default.
const CHECKPOINTS: [u64; 6] = [1_000, 10_000, 50_000, 100_000, 150_000, 200_000];
/// Purchases one sandbox wallet makes before the next wallet takes over (each starts with
/// 1,000 USDC; the dearest product costs 199).
const PURCHASES_PER_WALLET: u64 = 5;
/// Catalog reads, in turn.
const READS: [&str; 6] = [
    "/api/bazaar",
    "/.well-known/x402.json",
    "/.well-known/x402",
    "/llms.txt",
    "/openapi.json",
    "/",
];

/// `x402-load memory`'s options.
#[derive(clap::Args)]
pub(crate) struct Options {
    /// The store binary to start.
    #[arg(long, value_name = "BINARY")]
    store: std::path::PathBuf,
    /// Requests in all.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    requests: u64,
    /// Requests in flight at once.
    #[arg(long, value_name = "C", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    concurrency: u64,
    /// Pay through the stub facilitator (a child process) instead of the in-process sandbox.
    #[arg(long)]
    stub_facilitator: bool,
}

/// What the traffic so far has done.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    reads: AtomicU64,
    challenges: AtomicU64,
    purchases: AtomicU64,
    replays: AtomicU64,
    /// Answers other than the one the request's kind expects (200, or 402 when unpaid).
    unexpected: AtomicU64,
}

/// Shared by the workers: the SKUs, the wallets' turn and recent purchases to replay.
struct Traffic {
    http: reqwest::Client,
    base: String,
    skus: Vec<String>,
    tally: Tally,
    wallet: Mutex<(SandboxWallet, u64)>,
    recent: Mutex<VecDeque<(String, HeaderValue)>>,
}

pub(crate) async fn run(options: &Options) -> Result<(), String> {
    let scratch = std::env::temp_dir().join(format!("x402-memory-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|error| error.to_string())?;
    let address = free_address()?;
    let stub = if options.stub_facilitator {
        Some(child::start_stub()?)
    } else {
        None
    };
    let mut command = Command::new(&options.store);
    if let Some(stub) = &stub {
        command
            .env("STORE_FACILITATOR_URL", format!("http://{}", stub.address))
            .env("STORE_PAY_TO", PAY_TO);
    }
    command
        .env("STORE_LISTEN", address.to_string())
        .env("STORE_BASE_URL", format!("http://{address}"))
        .env(
            "STORE_DATABASE_URL",
            format!("sqlite://{}", scratch.join("store.db").display()),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let store = Running::spawn(&mut command, &options.store.display().to_string())?;
    let pid = store.pid();
    let http = reqwest::Client::new();
    let base = format!("http://{address}");
    wait_until_up(&http, &base).await?;
    let traffic = Arc::new(Traffic {
        skus: skus(&http, &base).await?,
        http,
        base,
        tally: Tally::default(),
        wallet: Mutex::new((SandboxWallet::random(), 0)),
        recent: Mutex::new(VecDeque::new()),
    });
    println!(
        "store {} at {address} (process {pid}), paying through {}, {} SKUs, {} concurrent clients",
        options.store.display(),
        stub.as_ref().map_or_else(
            || "the in-process sandbox".to_owned(),
            |stub| format!("the stub facilitator at {}", stub.address)
        ),
        traffic.skus.len(),
        options.concurrency
    );
    println!("\n| requests | RSS MB | reads | 402s | purchases | replays | unexpected | seconds |");
    println!("|---|---|---|---|---|---|---|---|");
    let started = Instant::now();
    print_row(&traffic.tally, &pid, started)?;
    for checkpoint in CHECKPOINTS
        .into_iter()
        .filter(|&c| c < options.requests)
        .chain([options.requests])
    {
        let workers: Vec<_> = (0..options.concurrency)
            .map(|_| tokio::spawn(work(Arc::clone(&traffic), checkpoint)))
            .collect();
        for worker in workers {
            worker.await.map_err(|error| error.to_string())??;
        }
        print_row(&traffic.tally, &pid, started)?;
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&scratch);
    let unexpected = traffic.tally.unexpected.load(Ordering::Relaxed);
    if unexpected > 0 {
        return Err(format!("{unexpected} answers were not the expected status"));
    }
    Ok(())
}

fn print_row(tally: &Tally, pid: &str, started: Instant) -> Result<(), String> {
    let count = |n: &AtomicU64| n.load(Ordering::Relaxed);
    println!(
        "| {} | {:.1} | {} | {} | {} | {} | {} | {:.0} |",
        count(&tally.sent),
        proc_stat::rss_kib(pid)? as f64 / 1024.0,
        count(&tally.reads),
        count(&tally.challenges),
        count(&tally.purchases),
        count(&tally.replays),
        count(&tally.unexpected),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Sends requests until `until` have been sent in all; per 20 requests: 8 catalog reads, 6
/// unpaid requests, 3 purchases and 3 replays.
async fn work(traffic: Arc<Traffic>, until: u64) -> Result<(), String> {
    loop {
        let n = traffic.tally.sent.fetch_add(1, Ordering::Relaxed);
        if n >= until {
            traffic.tally.sent.fetch_sub(1, Ordering::Relaxed);
            return Ok(());
        }
        let sku = &traffic.skus[(n / 20) as usize % traffic.skus.len()];
        let ok = match n % 20 {
            0..8 => {
                traffic.tally.reads.fetch_add(1, Ordering::Relaxed);
                let path = READS[(n / 20) as usize % READS.len()];
                get(&traffic, path, None).await? == 200
            }
            8..14 => {
                traffic.tally.challenges.fetch_add(1, Ordering::Relaxed);
                get(&traffic, sku, None).await? == 402
            }
            14..17 => {
                traffic.tally.purchases.fetch_add(1, Ordering::Relaxed);
                purchase(&traffic, sku).await?
            }
            _ => {
                traffic.tally.replays.fetch_add(1, Ordering::Relaxed);
                let earlier = traffic
                    .recent
                    .lock()
                    .ok()
                    .and_then(|recent| recent.get(n as usize % recent.len().max(1)).cloned());
                match earlier {
                    Some((path, payment)) => get(&traffic, &path, Some(&payment)).await? == 200,
                    None => get(&traffic, sku, None).await? == 402,
                }
            }
        };
        if !ok && traffic.tally.unexpected.fetch_add(1, Ordering::Relaxed) < 5 {
            eprintln!(
                "unexpected answer to request {n} (kind {} of 20) for {sku}",
                n % 20
            );
        }
    }
}

/// Asks for `path`'s challenge, pays it from the wallet whose turn it is, and keeps the payment
/// to replay later. Counts as one request (the challenge is not counted).
async fn purchase(traffic: &Traffic, path: &str) -> Result<bool, String> {
    let url = format!("{}{path}", traffic.base);
    let answer = traffic
        .http
        .get(&url)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let required: PaymentRequired = answer
        .headers()
        .get("payment-required")
        .ok_or_else(|| format!("{url}: no PAYMENT-REQUIRED"))
        .and_then(|value| header::decode(value.as_bytes()).map_err(|e| e.to_string()))?;
    let payload = {
        let mut turn = traffic.wallet.lock().map_err(|e| e.to_string())?;
        if turn.1 == PURCHASES_PER_WALLET {
            *turn = (SandboxWallet::random(), 0);
        }
        turn.1 += 1;
        turn.0.pay(&required).map_err(|e| e.to_string())?
    };
    let payment = header::encode(&payload).map_err(|e| e.to_string())?;
    let paid = get(traffic, path, Some(&payment)).await? == 200;
    if paid && let Ok(mut recent) = traffic.recent.lock() {
        // Replays pick among the last 1,000 purchases.
        if recent.len() == 1_000 {
            recent.pop_front();
        }
        recent.push_back((path.to_owned(), payment));
    }
    Ok(paid)
}

async fn get(traffic: &Traffic, path: &str, payment: Option<&HeaderValue>) -> Result<u16, String> {
    let mut request = traffic.http.get(format!("{}{path}", traffic.base));
    if let Some(payment) = payment {
        request = request.header("payment-signature", payment.clone());
    }
    let answer = request.send().await.map_err(|e| format!("{path}: {e}"))?;
    let status = answer.status().as_u16();
    // Read the whole body, as a client would.
    answer.bytes().await.map_err(|e| format!("{path}: {e}"))?;
    Ok(status)
}

/// The paths of the store's paid routes, from its x402 discovery document.
async fn skus(http: &reqwest::Client, base: &str) -> Result<Vec<String>, String> {
    let document: serde_json::Value = http
        .get(format!("{base}/.well-known/x402.json"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let paths: Vec<String> = document["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|resource| resource["resource"].as_str())
        .filter_map(|url| url.strip_prefix(base).map(str::to_owned))
        .filter(|path| path.starts_with("/api/x402/"))
        .collect();
    if paths.is_empty() {
        return Err(format!(
            "no paid routes in {base}/.well-known/x402.json: {document}"
        ));
    }
    Ok(paths)
}

async fn wait_until_up(http: &reqwest::Client, base: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(answer) = http.get(format!("{base}/llms.txt")).send().await
            && answer.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the store at {base} did not answer within 30 s"))
}

fn free_address() -> Result<SocketAddr, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("finding a free port: {error}"))
}
