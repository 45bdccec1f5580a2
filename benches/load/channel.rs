//! `x402-load channel`: wrk against tower-x402's app paid with `batch-settlement` vouchers, each
//! request with a voucher of its own, signed before the run, beside the same app's bare route.
//!
//! Everything but wrk runs in this process over loopback HTTP: the sandbox facilitator, the app
//! (`/channel`: up to 0.01 USDC a request through a payment channel, charged in full, so every
//! ceiling is known in advance) and the buyer. Before the measured run the buyer opens one
//! channel per wrk connection with a real deposit through the facilitator (its `/verify` and
//! `/settle`), then signs `--vouchers` vouchers per channel with the sandbox wallet (k256), the
//! n-th with the ceiling `(n + 1) * 0.01 USDC`, one `PAYMENT-SIGNATURE` value a line in a file
//! per channel (about 1.5 kB a voucher: 8,000 a channel sign in about 0.6 s and take 12 MB).
//! wrk runs one thread per connection and `channel.lua` walks that thread's file, taking the
//! next voucher when an answer arrives, so the vouchers of a channel arrive in order on one
//! connection (its `response` callback makes wrk read every answer's headers into Lua: work of
//! the client, not of the measured app). A run passes only if every
//! answer was 200 and the store charged each channel exactly one price per request wrk counted.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::routing::get;
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, SettlementMode, X402Layer};
use tower_x402_benches::PAY_TO;
use tower_x402_channels::{BatchSettlement, ChannelOffer, ChannelStore, MemoryChannelStore};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{AtomicAmount, Network, ResourceInfo, UsdcDeployment, header};

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

const BARE: &str = "/bare";
const CHANNEL: &str = "/channel";
/// The route's price, charged in full: 0.01 USDC.
const PRICE: u128 = 10_000;

pub(crate) async fn run(options: &Options) -> Result<(), String> {
    let facilitator_url = serve(SandboxFacilitator::new().router()).await?;
    let facilitator =
        Arc::new(HttpFacilitator::new(&facilitator_url).map_err(|e| format!("facilitator: {e}"))?);
    let store = Arc::new(MemoryChannelStore::default());
    let base = serve(app(&facilitator, Arc::clone(&store)).await?).await?;
    let http = reqwest::Client::new();
    let url = format!("{base}{CHANNEL}");
    let accept = challenge(&http, &url)
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
    let scratch = std::env::temp_dir().join(format!("x402-load-channel-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let files = scratch.join("vouchers-");
    let vouchers = u128::from(options.vouchers);
    let signing = Instant::now();
    let mut bytes = 0;
    let mut ids = Vec::new();
    for connection in 1..=options.connections {
        let mut salt = [0; 32];
        salt[28..].copy_from_slice(&connection.to_be_bytes());
        let config = wallet
            .channel_config(&accept, salt)
            .map_err(|e| e.to_string())?;
        ids.push(SandboxWallet::channel_id(&config, &accept.network).map_err(|e| e.to_string())?);
        // The deposit request is served and charged too: the first voucher's base is one price.
        let deposit = wallet
            .deposit_payment_at(&accept, &config, (vouchers + 1) * PRICE, PRICE, now)
            .map_err(|e| e.to_string())?;
        timed(&http, &url, &deposit).await?;
        let path = format!("{}{connection}.txt", files.display());
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(&path).map_err(|e| format!("{path}: {e}"))?,
        );
        for n in 1..=vouchers {
            let payment = wallet
                .voucher_payment(&accept, &config, (n + 1) * PRICE)
                .map_err(|e| e.to_string())?;
            let line = header::encode(&payment).map_err(|e| e.to_string())?;
            bytes += line.len() + 1;
            writeln!(file, "{}", line.to_str().map_err(|e| e.to_string())?)
                .map_err(|e| format!("{path}: {e}"))?;
        }
        file.flush().map_err(|e| format!("{path}: {e}"))?;
    }
    println!(
        "{} channels deposited through the sandbox facilitator; {} vouchers signed and written in {:.1} s ({:.1} MB)",
        options.connections,
        u128::from(options.connections) * vouchers,
        signing.elapsed().as_secs_f64(),
        bytes as f64 / 1e6
    );
    let script = scratch.join("channel.lua");
    std::fs::write(
        &script,
        format!(
            "FILES = \"{}\"\nPATH = \"{CHANNEL}\"\n{}",
            files.display(),
            include_str!("channel.lua")
        ),
    )
    .map_err(|e| format!("{}: {e}", script.display()))?;

    let (c, seconds) = (options.connections, options.seconds);
    println!(
        "wrk -t{c} -c{c} -d{seconds}s, no warm-up (a voucher is spent once)\ncase\trequests\treq/s\tp50 us\tp99 us\tnon-2xx\tapp CPU us/req"
    );
    for (case, path, script) in [
        ("bare", BARE, None),
        ("paid_channel", CHANNEL, Some(script.as_path())),
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
        if script.is_some() {
            check_charged(
                store.as_ref(),
                &ids,
                result.requests - result.non_2xx,
                options,
            )
            .await?;
        }
        if result.non_2xx > 0 || result.socket_errors > 0 {
            return Err(format!(
                "{case}: {} answers were not 2xx and {} sockets failed",
                result.non_2xx, result.socket_errors
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Every voucher wrk counted was charged once, none twice: the channels' charges, less the
/// deposits' requests, are the requests answered plus at most one in flight per connection;
/// and no channel spent all its vouchers (its later requests went unpaid).
async fn check_charged(
    store: &MemoryChannelStore,
    ids: &[String],
    requests: u64,
    options: &Options,
) -> Result<(), String> {
    let mut charged = 0;
    for id in ids {
        let channel = store
            .load(id)
            .await
            .map_err(|e| format!("channel store: {e}"))?
            .ok_or_else(|| format!("channel {id} not in the store"))?;
        let vouchers = channel.charged / PRICE - 1;
        println!("channel {id}: {vouchers} vouchers charged");
        charged += vouchers;
        if vouchers == u128::from(options.vouchers) {
            return Err(format!(
                "channel {id} ran out of vouchers: raise --vouchers or lower --seconds"
            ));
        }
    }
    let requests = u128::from(requests);
    if charged < requests || charged > requests + u128::from(options.connections) {
        return Err(format!(
            "{requests} voucher requests answered, {charged} charged by the store"
        ));
    }
    println!("the store charged {charged} vouchers for {requests} answered requests");
    Ok(())
}

/// The app: `/bare`, and `/channel` paying through `facilitator` with channels in `store`.
async fn app(
    facilitator: &Arc<HttpFacilitator>,
    store: Arc<MemoryChannelStore>,
) -> Result<Router, String> {
    let payments = BatchSettlement::new(store, Arc::clone(facilitator))
        .register(Payments::new(Arc::clone(facilitator)));
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
    Ok(Router::new()
        .route(BARE, get(|| async { "the report" }))
        .merge(paid))
}
