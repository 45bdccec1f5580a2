//! `x402-load latency`: what a buyer waits for, and what the whole system spends, per paid
//! request, with a facilitator as far away as a real one: every call to it answered after
//! `--rtt-ms` (50 ms), and `/settle` after `--settle-delay-ms` more (2 s, about Base's block
//! time).
//!
//! Three kinds of process, each a child of this one so that each one's CPU time is its own: the
//! sandbox facilitator (signatures recovered and checked, the ledger moved, each answer delayed),
//! tower-x402's app, and each `--peer` (a binary serving `/paid`, given `--facilitator URL`). The
//! app serves `/exact` (0.01 USDC `exact`, settled after the work), `/exact-first` (settled
//! first, `/settle` alone), `/exact-verify-first` (settled first, `/verify` then `/settle`) and
//! `/channel` (up to 0.01 USDC a request through a payment channel, 0.001 charged). The buyers
//! (`--concurrency` of them, each sending its requests one after another) sign each payment with
//! the sandbox wallet before its request is timed, from sending it to the end of the response
//! body. A channel's deposit is made by each buyer before its case is measured. The CPU columns
//! are each process's time on a CPU over the case (its threads' `schedstat`), divided by its
//! requests.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use tokio::task::JoinSet;
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, SettlementMode, X402Layer};
use tower_x402_benches::PAY_TO;
use tower_x402_channels::{BatchSettlement, ChannelOffer, MemoryChannelStore};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, Network, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired, ResourceInfo,
    UsdcDeployment, header,
};

use crate::child::Announced;
use crate::proc_stat::run_seconds;

/// The options of `x402-load latency`.
#[derive(clap::Args)]
pub(crate) struct Options {
    /// How long the facilitator takes to answer each call, in milliseconds (its distance).
    #[arg(long, value_name = "MS", default_value_t = 50)]
    rtt_ms: u64,
    /// How much longer it takes to answer each `/settle`, in milliseconds (the chain).
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    settle_delay_ms: u64,
    /// Paid requests timed per case.
    #[arg(long, value_name = "N", default_value_t = 100)]
    requests: u32,
    /// Buyers paying at once, each sending its requests one after another.
    #[arg(long, value_name = "N", default_value_t = 10)]
    concurrency: u32,
    /// One more app, `NAME=BINARY [ARG...]`: started with `--facilitator URL`, it prints its
    /// address and serves `GET /paid`.
    #[arg(long = "peer", value_name = "NAME=BINARY")]
    peers: Vec<String>,
    /// Serve one of the benchmark's processes instead (started by the benchmark itself).
    #[arg(long, value_name = "ROLE", hide = true)]
    serve: Option<Role>,
    /// The facilitator's base URL, for `--serve app`.
    #[arg(long, value_name = "URL", hide = true)]
    facilitator: Option<String>,
}

/// A child process's part.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Role {
    Facilitator,
    App,
}

const EXACT: &str = "/exact";
const EXACT_FIRST: &str = "/exact-first";
const EXACT_VERIFY_FIRST: &str = "/exact-verify-first";
const CHANNEL: &str = "/channel";
/// Every route's price: 0.01 USDC (`exact`), or up to it a request (the channel).
const PRICE: u128 = 10_000;
/// What a channel request is charged: 0.001 USDC.
const CHARGE: u128 = 1_000;

pub(crate) async fn run(options: &Options) -> Result<(), String> {
    match options.serve {
        Some(Role::Facilitator) => return serve_facilitator(options).await,
        Some(Role::App) => {
            let url = options.facilitator.as_deref().ok_or("--facilitator URL")?;
            return announce(app(url).await?).await;
        }
        None => {}
    }
    let exe = std::env::current_exe().map_err(|error| error.to_string())?;
    let mut command = Command::new(&exe);
    command.args(["latency", "--serve", "facilitator"]);
    command.args(["--rtt-ms", &options.rtt_ms.to_string()]);
    command.args(["--settle-delay-ms", &options.settle_delay_ms.to_string()]);
    let facilitator = Announced::spawn(command, "the facilitator")?;
    let facilitator_url = format!("http://{}", facilitator.address);
    let mut command = Command::new(&exe);
    command.args([
        "latency",
        "--serve",
        "app",
        "--facilitator",
        &facilitator_url,
    ]);
    let app = Announced::spawn(command, "tower-x402's app")?;
    let base = format!("http://{}", app.address);
    let mut peers = Vec::new();
    for peer in &options.peers {
        let (name, line) = peer
            .split_once('=')
            .ok_or_else(|| format!("NAME=BINARY [ARG...], not {peer}"))?;
        let mut words = line.split_whitespace();
        let mut command = Command::new(words.next().ok_or("no binary")?);
        command
            .args(words)
            .args(["--facilitator", &facilitator_url]);
        peers.push((name.to_owned(), Announced::spawn(command, name)?));
    }

    println!(
        "facilitator {} ms away, /settle {} ms more; {} requests per case, {} buyers at once",
        options.rtt_ms, options.settle_delay_ms, options.requests, options.concurrency
    );
    println!(
        "case\trequests\tmedian ms\tp99 ms\tmax ms\tapp CPU µs\tfacilitator CPU µs\ttotal CPU µs"
    );
    let mut cases = vec![
        (
            "tower-x402 exact, settle after".to_owned(),
            format!("{base}{EXACT}"),
            app.pid(),
        ),
        (
            "tower-x402 exact, settle first".to_owned(),
            format!("{base}{EXACT_FIRST}"),
            app.pid(),
        ),
        (
            "tower-x402 exact, verify then settle first".to_owned(),
            format!("{base}{EXACT_VERIFY_FIRST}"),
            app.pid(),
        ),
    ];
    for (name, peer) in &peers {
        cases.push((
            name.clone(),
            format!("http://{}/paid", peer.address),
            peer.pid(),
        ));
    }
    for (name, url, pid) in &cases {
        let mut buyers = Vec::new();
        for _ in 0..options.concurrency {
            buyers.push(Buyer::Exact(SandboxWallet::random()));
        }
        let measured = measure(options, url, buyers, pid, &facilitator.pid()).await?;
        measured.print(name);
    }
    let mut buyers = Vec::new();
    for _ in 0..options.concurrency {
        buyers.push(Buyer::channel(&format!("{base}{CHANNEL}")).await?);
    }
    let url = format!("{base}{CHANNEL}");
    let measured = measure(options, &url, buyers, &app.pid(), &facilitator.pid()).await?;
    measured.print("tower-x402 channel voucher");
    Ok(())
}

/// A buyer: a wallet paying `exact`, or one holding a channel it has deposited into.
enum Buyer {
    Exact(SandboxWallet),
    Channel {
        wallet: SandboxWallet,
        accept: Box<x402_wire::PaymentRequirements>,
        config: Box<tower_x402_sandbox::batch::ChannelConfig>,
        charged: u128,
    },
}

impl Buyer {
    /// A new buyer with a channel to `url`, deposited into (not timed).
    async fn channel(url: &str) -> Result<Self, String> {
        let http = reqwest::Client::new();
        let wallet = SandboxWallet::random();
        let accept = challenge(&http, url)
            .await?
            .accepts
            .into_iter()
            .next()
            .ok_or("the channel's challenge accepts nothing")?;
        let config = wallet
            .channel_config(&accept, [0; 32])
            .map_err(|e| e.to_string())?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs();
        let deposit = wallet
            .deposit_payment_at(&accept, &config, 1_000 * PRICE, PRICE, now)
            .map_err(|e| e.to_string())?;
        timed(&http, url, &deposit).await?;
        Ok(Self::Channel {
            wallet,
            accept: Box::new(accept),
            config: Box::new(config),
            charged: CHARGE,
        })
    }

    /// The next payment for `url` (whose challenge is `required`).
    fn next(&mut self, required: &PaymentRequired) -> Result<PaymentPayload, String> {
        match self {
            Self::Exact(wallet) => wallet.pay(required).map_err(|e| e.to_string()),
            Self::Channel {
                wallet,
                accept,
                config,
                charged,
            } => {
                let payment = wallet
                    .voucher_payment(accept, config, *charged + PRICE)
                    .map_err(|e| e.to_string())?;
                *charged += CHARGE;
                Ok(payment)
            }
        }
    }
}

/// One case's latencies and CPU per request.
struct Measured {
    latencies: Vec<f64>,
    app_cpu_us: f64,
    facilitator_cpu_us: f64,
}

impl Measured {
    fn print(&self, name: &str) {
        let mut sorted = self.latencies.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1);
            sorted.get(index).copied().unwrap_or(f64::NAN)
        };
        println!(
            "{name}\t{}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.1}",
            sorted.len(),
            at(0.5),
            at(0.99),
            at(1.0),
            self.app_cpu_us,
            self.facilitator_cpu_us,
            self.app_cpu_us + self.facilitator_cpu_us
        );
    }
}

/// `options.requests` paid requests to `url`, shared among `buyers` paying at once; the CPU
/// time of the processes `app` and `facilitator` over them.
async fn measure(
    options: &Options,
    url: &str,
    buyers: Vec<Buyer>,
    app: &str,
    facilitator: &str,
) -> Result<Measured, String> {
    let http = reqwest::Client::new();
    let required = Arc::new(challenge(&http, url).await?);
    let each = options.requests / options.concurrency.max(1);
    let (app_before, facilitator_before) = (run_seconds(app)?, run_seconds(facilitator)?);
    let mut workers = JoinSet::new();
    for mut buyer in buyers {
        let (http, url, required) = (http.clone(), url.to_owned(), Arc::clone(&required));
        workers.spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..each {
                let payment = buyer.next(&required)?;
                latencies.push(timed(&http, &url, &payment).await?);
            }
            Ok::<_, String>(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(joined) = workers.join_next().await {
        latencies.extend(joined.map_err(|e| e.to_string())??);
    }
    let count = latencies.len().max(1) as f64;
    let per_request = |after: f64, before: f64| (after - before) * 1e6 / count;
    Ok(Measured {
        app_cpu_us: per_request(run_seconds(app)?, app_before),
        facilitator_cpu_us: per_request(run_seconds(facilitator)?, facilitator_before),
        latencies,
    })
}

/// The facilitator's process: the sandbox, every payer funded, every answer delayed.
async fn serve_facilitator(options: &Options) -> Result<(), String> {
    let rtt = Duration::from_millis(options.rtt_ms);
    let settle = rtt + Duration::from_millis(options.settle_delay_ms);
    let sandbox = SandboxFacilitator::new()
        .with_starting_balance(AtomicAmount(u128::from(u64::MAX)))
        .with_verify(Step::Answer.after(rtt))
        .with_settle(Step::Answer.after(settle));
    announce(sandbox.router()).await
}

/// Serves `router` on a free loopback port, its address printed first; until killed.
async fn announce(router: Router) -> Result<(), String> {
    use std::io::Write as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("listen: {e}"))?;
    println!("{}", listener.local_addr().map_err(|e| e.to_string())?);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    axum::serve(listener, router)
        .await
        .map_err(|e| format!("serve: {e}"))
}

/// The app: `/exact`, `/exact-first`, `/exact-verify-first` and `/channel` paying through the
/// facilitator at `facilitator_url`.
async fn app(facilitator_url: &str) -> Result<Router, String> {
    let facilitator =
        Arc::new(HttpFacilitator::new(facilitator_url).map_err(|e| format!("facilitator: {e}"))?);
    let exact = |path: &str, mode: SettlementMode| -> Result<Arc<Offer>, String> {
        let price = "0.01".parse().map_err(|_| "price")?;
        Offer::builder(ResourceInfo::new(format!("https://shop.example{path}")))
            .usdc(&UsdcDeployment::BASE, price, PAY_TO)
            .settlement(mode)
            .build()
            .map(Arc::new)
            .map_err(|e| format!("exact offer: {e}"))
    };
    let (after, first) = (
        exact(EXACT, SettlementMode::After)?,
        exact(EXACT_FIRST, SettlementMode::Before)?,
    );
    let verify_first = exact(EXACT_VERIFY_FIRST, SettlementMode::Before)?;
    let payments = BatchSettlement::new(Arc::new(MemoryChannelStore::default()))
        .register(Payments::new(Arc::clone(&facilitator)));
    let terms = ChannelOffer::from_facilitator(&facilitator, &Network::BASE)
        .await
        .map_err(|e| format!("channel offer: {e}"))?;
    let channel = Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/channel"))
            .accept(terms.usdc(&UsdcDeployment::BASE, AtomicAmount(PRICE), PAY_TO))
            .settlement(SettlementMode::After)
            .build()
            .map_err(|e| format!("channel offer: {e}"))?,
    );
    let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
        EXACT => Some(Arc::clone(&after)),
        EXACT_FIRST => Some(Arc::clone(&first)),
        CHANNEL => Some(Arc::clone(&channel)),
        _ => None,
    };
    let verifying = Payments::new(Arc::clone(&facilitator)).verify_before_settling(true);
    Ok(Router::new()
        .route(EXACT, get(|| async { "the report" }))
        .route(EXACT_FIRST, get(|| async { "the report" }))
        .route(
            CHANNEL,
            get(|charge: Charge| async move {
                charge.set(AtomicAmount(CHARGE));
                "the report"
            }),
        )
        .layer(X402Layer::with_payments(payments, pricing))
        .route(
            EXACT_VERIFY_FIRST,
            get(|| async { "the report" }).layer(X402Layer::with_payments(verifying, verify_first)),
        ))
}

/// `router` served on a free loopback port; its base URL.
pub(crate) async fn serve(router: Router) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(format!("http://{address}"))
}

/// The challenge of `url`'s 402.
pub(crate) async fn challenge(
    http: &reqwest::Client,
    url: &str,
) -> Result<PaymentRequired, String> {
    let response = http.get(url).send().await.map_err(|e| e.to_string())?;
    response
        .headers()
        .get("payment-required")
        .ok_or_else(|| format!("{url}: HTTP {} without a challenge", response.status()))
        .and_then(|value| header::decode(value.as_bytes()).map_err(|e| e.to_string()))
}

/// Milliseconds from sending `url` with `payment` to the end of its body; an answer other than
/// 200 is an error.
pub(crate) async fn timed(
    http: &reqwest::Client,
    url: &str,
    payment: &PaymentPayload,
) -> Result<f64, String> {
    let signature = header::encode(payment).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let response = http
        .get(url)
        .header(PAYMENT_SIGNATURE, signature)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_secs_f64() * 1_000.0;
    if status != http::StatusCode::OK {
        return Err(format!(
            "{url}: HTTP {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(elapsed)
}
