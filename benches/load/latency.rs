//! `x402-load latency`: how long a buyer waits for a paid response when the facilitator's
//! `/settle` takes as long as a chain does (about 2 s on Base): an `exact` payment, settled per
//! request, against a `batch-settlement` voucher, checked by the server alone after one deposit.
//!
//! Everything runs in this process over loopback HTTP: the sandbox facilitator with every
//! `/settle` answered after `--settle-delay-ms` (its script's delay; signatures checked, the
//! ledger moved), the app (`/exact`: 0.01 USDC `exact`; `/channel`: up to 0.01 USDC a request
//! through a payment channel, charged 0.001 USDC), and the buyer, the sandbox wallet signing
//! each payment before its request is timed. A request is timed from sending it with its payment
//! to the end of the response body; the requests are sent one after another.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, SettlementMode, X402Layer};
use tower_x402_benches::PAY_TO;
use tower_x402_channels::{BatchSettlement, ChannelOffer, MemoryChannelStore};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, Network, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired, ResourceInfo,
    UsdcDeployment, header,
};

/// The options of `x402-load latency`.
#[derive(clap::Args)]
pub(crate) struct Options {
    /// How long the facilitator takes to answer each `/settle`, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    settle_delay_ms: u64,
    /// Paid requests timed per case.
    #[arg(long, value_name = "N", default_value_t = 10)]
    requests: u32,
}

const EXACT: &str = "/exact";
const CHANNEL: &str = "/channel";
/// Both routes' price: 0.01 USDC (`exact`), or up to it a request (the channel).
const PRICE: u128 = 10_000;
/// What a channel request is charged: 0.001 USDC.
const CHARGE: u128 = 1_000;

pub(crate) async fn run(options: &Options) -> Result<(), String> {
    let delay = Duration::from_millis(options.settle_delay_ms);
    let sandbox = SandboxFacilitator::new().with_settle(Step::Answer.after(delay));
    let facilitator_url = serve(sandbox.router()).await?;
    let facilitator =
        Arc::new(HttpFacilitator::new(&facilitator_url).map_err(|e| format!("facilitator: {e}"))?);
    let base = serve(app(&facilitator).await?).await?;
    let http = reqwest::Client::new();
    let wallet = SandboxWallet::random();

    let mut exact = Vec::new();
    for _ in 0..options.requests {
        let required = challenge(&http, &format!("{base}{EXACT}")).await?;
        let payment = wallet.pay(&required).map_err(|e| e.to_string())?;
        exact.push(timed(&http, &format!("{base}{EXACT}"), &payment).await?);
    }

    let url = format!("{base}{CHANNEL}");
    let accept = challenge(&http, &url)
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
    let deposit_payment = wallet
        .deposit_payment_at(&accept, &config, 100 * PRICE, PRICE, now)
        .map_err(|e| e.to_string())?;
    let deposit = timed(&http, &url, &deposit_payment).await?;
    let mut charged = CHARGE;
    let mut vouchers = Vec::new();
    for _ in 0..options.requests {
        let payment = wallet
            .voucher_payment(&accept, &config, charged + PRICE)
            .map_err(|e| e.to_string())?;
        vouchers.push(timed(&http, &url, &payment).await?);
        charged += CHARGE;
    }

    println!(
        "case\trequests\tmedian ms\tmin ms\tmax ms\t(/settle answered after {} ms)",
        options.settle_delay_ms
    );
    for (name, samples) in [
        ("exact", exact),
        ("channel deposit", vec![deposit]),
        ("channel voucher", vouchers),
    ] {
        let (median, min, max) = summary(samples);
        println!(
            "{name}\t{}\t{median:.1}\t{min:.1}\t{max:.1}",
            if name == "channel deposit" {
                1
            } else {
                options.requests
            }
        );
    }
    Ok(())
}

/// The app: `/exact` and `/channel` paying through `facilitator`.
async fn app(facilitator: &Arc<HttpFacilitator>) -> Result<Router, String> {
    let exact = Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/exact"))
            .usdc(
                &UsdcDeployment::BASE,
                "0.01".parse().map_err(|_| "price")?,
                PAY_TO,
            )
            .build()
            .map_err(|e| format!("exact offer: {e}"))?,
    );
    let payments = BatchSettlement::new(Arc::new(MemoryChannelStore::default()))
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
    let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
        EXACT => Some(Arc::clone(&exact)),
        CHANNEL => Some(Arc::clone(&channel)),
        _ => None,
    };
    Ok(Router::new()
        .route(EXACT, get(|| async { "the report" }))
        .route(
            CHANNEL,
            get(|charge: Charge| async move {
                charge.set(AtomicAmount(CHARGE));
                "the report"
            }),
        )
        .layer(X402Layer::with_payments(payments, pricing)))
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

/// Median, minimum and maximum.
fn summary(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    let median = samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN);
    let min = samples.first().copied().unwrap_or(f64::NAN);
    let max = samples.last().copied().unwrap_or(f64::NAN);
    (median, min, max)
}
