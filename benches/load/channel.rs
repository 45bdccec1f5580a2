//! Load paid with `batch-settlement` vouchers: the `/channel` route an app serves, the channels a
//! buyer opens and the vouchers it signs before a wrk run, and the check that the run was paid.
//!
//! `run.sh --peers` measures it as `paid_channel`, a case of tower-x402's app in a process of its
//! own (`x402-load app`) beside `paid` and the peers' `paid`; `x402-load channel` runs it alone,
//! everything but wrk in this process over loopback HTTP.
//!
//! Before each wrk run (its warm-up too: a voucher is spent once) the buyer opens one channel per
//! wrk connection with a real deposit through the app and its facilitator (`/verify` and
//! `/settle`), then signs vouchers for each channel with the sandbox wallet (k256), the n-th
//! with the ceiling `(n + 1) * 0.01 USDC` (the route charges its full price, so every ceiling is
//! known in advance), one `PAYMENT-SIGNATURE` value a line in a file per channel (about 1.5 kB a
//! voucher). wrk runs one thread per connection and `channel.lua` walks that thread's file,
//! taking the next voucher when an answer arrives, so the vouchers of a channel arrive in order
//! on one connection (its `response` callback makes wrk read every answer's headers into Lua:
//! work of the client, not of the measured app). A run passes only if every answer was 200 and
//! the app's channel store charged, over all channels, one price per request wrk counted (and at
//! most one more per connection, in flight when wrk stopped).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::routing::get;
use http::StatusCode;
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, SettlementMode, X402Layer};
use tower_x402_benches::PAY_TO;
use tower_x402_channels::{BatchSettlement, ChannelOffer, ChannelStore, MemoryChannelStore};
use tower_x402_sandbox::batch::ChannelConfig;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{AtomicAmount, Network, PaymentRequirements, ResourceInfo, UsdcDeployment, header};

use crate::latency::{challenge, serve, timed};
use crate::{proc_stat, wrk};

/// The options of `x402-load channel`.
#[derive(clap::Args)]
pub(crate) struct Options {
    /// Seconds wrk measures each case for.
    #[arg(long, value_name = "S", default_value_t = 3)]
    seconds: u64,
    /// Connections, one channel and one wrk thread each.
    #[arg(long, value_name = "C", default_value_t = 4)]
    connections: u32,
    /// Vouchers signed per channel before the run: more than one connection sends in
    /// `--seconds` (a thread that runs out sends unpaid requests and fails the run).
    #[arg(long, value_name = "N", default_value_t = 8_000)]
    vouchers: u32,
}

/// The route paid with vouchers.
pub(crate) const CHANNEL: &str = "/channel";
/// `GET /channel/charged/{id}`: the channel's cumulative charge in the app's store (decimal).
const CHARGED: &str = "/channel/charged/{id}";
/// The route's price, charged in full: 0.01 USDC.
const PRICE: u128 = 10_000;

/// `/channel` paying through `facilitator` with channels in a memory store, and
/// `/channel/charged/{id}` reading that store.
pub(crate) async fn routes(facilitator: &Arc<HttpFacilitator>) -> Result<Router, String> {
    let store = Arc::new(MemoryChannelStore::default());
    let payments =
        BatchSettlement::new(Arc::clone(&store)).register(Payments::new(Arc::clone(facilitator)));
    let terms = ChannelOffer::from_facilitator(facilitator, &Network::BASE)
        .await
        .map_err(|e| format!("channel offer: {e}"))?;
    let channel = Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/channel"))
            .accept(terms.usdc(&UsdcDeployment::BASE, AtomicAmount(PRICE), PAY_TO))
            .settlement(SettlementMode::After)
            .build()
            .map_err(|e| format!("channel offer: {e}"))?,
    );
    let pricing = move |parts: &http::request::Parts| {
        (parts.uri.path() == CHANNEL).then(|| Arc::clone(&channel))
    };
    let paid = Router::new()
        .route(
            CHANNEL,
            get(|charge: Charge| async move {
                charge.set(AtomicAmount(PRICE));
                "the report"
            }),
        )
        .layer(X402Layer::with_payments(payments, pricing));
    let charged = Router::new().route(CHARGED, get(charged)).with_state(store);
    Ok(paid.merge(charged))
}

async fn charged(
    State(store): State<Arc<MemoryChannelStore>>,
    UrlPath(id): UrlPath<String>,
) -> Result<String, (StatusCode, String)> {
    match store.load(&id).await {
        Ok(Some(channel)) => Ok(channel.charged.to_string()),
        Ok(None) => Err((StatusCode::NOT_FOUND, format!("no channel {id}"))),
        Err(error) => Err((StatusCode::SERVICE_UNAVAILABLE, error.to_string())),
    }
}

/// Channels opened for one wrk run and the script paying with their vouchers.
pub(crate) struct Channels {
    ids: Vec<String>,
    vouchers: u32,
    /// wrk's Lua script.
    pub(crate) script: PathBuf,
    /// Signing time and bytes written, for the log.
    pub(crate) summary: String,
}

impl Channels {
    /// Opens `connections` channels on the app at `base` with a deposit each (covering
    /// `vouchers` more requests), then signs `vouchers` vouchers per channel into files under
    /// `dir` (created) and writes wrk's script there.
    pub(crate) async fn open(
        http: &reqwest::Client,
        base: &str,
        connections: u32,
        vouchers: u32,
        dir: &Path,
    ) -> Result<Self, String> {
        let url = format!("{base}{CHANNEL}");
        let accept = challenge(http, &url)
            .await?
            .accepts
            .into_iter()
            .next()
            .ok_or("the channel's challenge accepts nothing")?;
        let wallet = SandboxWallet::random();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs();
        let mut ids = Vec::new();
        let mut configs = Vec::new();
        for connection in 1..=connections {
            let mut salt = [0; 32];
            salt[28..].copy_from_slice(&connection.to_be_bytes());
            let config = wallet
                .channel_config(&accept, salt)
                .map_err(|e| e.to_string())?;
            ids.push(
                SandboxWallet::channel_id(&config, &accept.network).map_err(|e| e.to_string())?,
            );
            // The deposit request is served and charged too: the first voucher's base is one price.
            let deposit = wallet
                .deposit_payment_at(
                    &accept,
                    &config,
                    (u128::from(vouchers) + 1) * PRICE,
                    PRICE,
                    now,
                )
                .map_err(|e| e.to_string())?;
            timed(http, &url, &deposit).await?;
            configs.push(config);
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let files = dir.join("vouchers-");
        let signing = Instant::now();
        let bytes =
            tokio::task::block_in_place(|| sign_all(&wallet, &accept, &configs, vouchers, &files))?;
        let script = dir.join("channel.lua");
        std::fs::write(
            &script,
            format!(
                "FILES = \"{}\"\nPATH = \"{CHANNEL}\"\n{}",
                files.display(),
                include_str!("channel.lua")
            ),
        )
        .map_err(|e| format!("{}: {e}", script.display()))?;
        let summary = format!(
            "{connections} channels deposited; {} vouchers signed and written in {:.1} s ({:.1} MB)",
            u64::from(connections) * u64::from(vouchers),
            signing.elapsed().as_secs_f64(),
            bytes as f64 / 1e6
        );
        Ok(Self {
            ids,
            vouchers,
            script,
            summary,
        })
    }

    /// Every voucher wrk counted was charged once, none twice: the channels' charges at the app
    /// at `base`, less the deposits' requests, are the `requests` answered plus at most one in
    /// flight per connection; and no channel spent all its vouchers (its later requests went
    /// unpaid). Returns what the store charged.
    pub(crate) async fn check_charged(
        &self,
        http: &reqwest::Client,
        base: &str,
        requests: u64,
    ) -> Result<u128, String> {
        let mut charged = 0;
        for id in &self.ids {
            let url = format!("{base}{}", CHARGED.replace("{id}", id));
            let answer = http
                .get(&url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| format!("{url}: {e}"))?;
            let text = answer.text().await.map_err(|e| format!("{url}: {e}"))?;
            let total: u128 = text
                .parse()
                .map_err(|_| format!("{url} answered {text:?}, not an amount"))?;
            let vouchers = (total / PRICE).saturating_sub(1);
            if vouchers == u128::from(self.vouchers) {
                return Err(format!(
                    "channel {id} ran out of its {} vouchers: sign more or measure fewer seconds",
                    self.vouchers
                ));
            }
            charged += vouchers;
        }
        let requests = u128::from(requests);
        let connections = self.ids.len() as u128;
        if charged < requests || charged > requests + connections {
            return Err(format!(
                "{requests} voucher requests answered, {charged} charged by the channel store"
            ));
        }
        Ok(charged)
    }
}

/// Signs `vouchers` vouchers for each channel of `configs`, one file each (`files` then the
/// channel's 1-based number and `.txt`), on every core; the bytes written.
fn sign_all(
    wallet: &SandboxWallet,
    accept: &PaymentRequirements,
    configs: &[ChannelConfig],
    vouchers: u32,
    files: &Path,
) -> Result<usize, String> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let per_core = configs.len().div_ceil(cores).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = configs
            .chunks(per_core)
            .enumerate()
            .map(|(chunk, configs)| {
                scope.spawn(move || {
                    let mut bytes = 0;
                    for (offset, config) in configs.iter().enumerate() {
                        let number = chunk * per_core + offset + 1;
                        let path = format!("{}{number}.txt", files.display());
                        bytes += sign_channel(wallet, accept, config, vouchers, &path)?;
                    }
                    Ok::<_, String>(bytes)
                })
            })
            .collect();
        workers.into_iter().try_fold(0, |total, worker| {
            Ok(total + worker.join().map_err(|_| "a signing thread panicked")??)
        })
    })
}

/// One channel's vouchers, one `PAYMENT-SIGNATURE` value a line, into `path`; the bytes written.
fn sign_channel(
    wallet: &SandboxWallet,
    accept: &PaymentRequirements,
    config: &ChannelConfig,
    vouchers: u32,
    path: &str,
) -> Result<usize, String> {
    let mut file =
        std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?);
    let mut bytes = 0;
    for n in 1..=u128::from(vouchers) {
        let payment = wallet
            .voucher_payment(accept, config, (n + 1) * PRICE)
            .map_err(|e| e.to_string())?;
        let line = header::encode(&payment).map_err(|e| e.to_string())?;
        bytes += line.len() + 1;
        writeln!(file, "{}", line.to_str().map_err(|e| e.to_string())?)
            .map_err(|e| format!("{path}: {e}"))?;
    }
    file.flush().map_err(|e| format!("{path}: {e}"))?;
    Ok(bytes)
}

/// `x402-load channel`: the sandbox facilitator, the app (`/bare` and `/channel`) and the buyer
/// in this process, wrk against the bare route, then against vouchers.
pub(crate) async fn run(options: &Options) -> Result<(), String> {
    let facilitator_url = serve(SandboxFacilitator::new().router()).await?;
    let facilitator =
        Arc::new(HttpFacilitator::new(&facilitator_url).map_err(|e| format!("facilitator: {e}"))?);
    let app = Router::new()
        .route("/bare", get(|| async { "the report" }))
        .merge(routes(&facilitator).await?);
    let base = serve(app).await?;
    let http = reqwest::Client::new();
    let scratch = std::env::temp_dir().join(format!("x402-load-channel-{}", std::process::id()));
    let channels = Channels::open(
        &http,
        &base,
        options.connections,
        options.vouchers,
        &scratch,
    )
    .await?;
    println!("{} through the sandbox facilitator", channels.summary);

    let (c, seconds) = (options.connections, options.seconds);
    println!(
        "wrk -t{c} -c{c} -d{seconds}s, no warm-up (a voucher is spent once)\ncase\trequests\treq/s\tp50 us\tp99 us\tnon-2xx\tapp CPU us/req"
    );
    for (case, path, script) in [
        ("bare", "/bare", None),
        ("paid_channel", CHANNEL, Some(channels.script.as_path())),
    ] {
        let target = format!("{base}{path}");
        let cpu_before = proc_stat::cpu_seconds("self")?;
        let result = tokio::task::block_in_place(|| wrk::run(&target, seconds, c, c, script))?;
        let cpu = proc_stat::cpu_seconds("self")? - cpu_before;
        println!(
            "{case}\t{}\t{:.0}\t{:.0}\t{:.0}\t{}\t{:.1}",
            result.requests,
            result.per_second,
            result.p50_us,
            result.p99_us,
            result.non_2xx + result.socket_errors,
            cpu * 1e6 / result.requests.max(1) as f64
        );
        if result.non_2xx > 0 || result.socket_errors > 0 {
            return Err(format!(
                "{case}: {} answers were not 2xx and {} sockets failed",
                result.non_2xx, result.socket_errors
            ));
        }
        if script.is_some() {
            let charged = channels
                .check_charged(&http, &base, result.requests)
                .await?;
            println!(
                "the store charged {charged} vouchers for {} answered requests",
                result.requests
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
