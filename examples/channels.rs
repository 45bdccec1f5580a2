//! Payment channels (`batch-settlement`): a buyer deposits once, then pays each request with a
//! voucher the server checks on its own — no facilitator call, no chain wait — and the server
//! claims the vouchers in batches and sweeps them to its receiver.
//!
//! ```text
//! cargo run --release --example channels -- [--listen ADDR] [--facilitator URL] \
//!     [--pay-to ADDRESS] [--database-url postgres://…] [--rpc-url URL] [--claim-every SECONDS]
//! ```
//!
//! - `GET /v1/rows?count=N`: N rows as JSON, sold with `batch-settlement` on Base USDC
//!   (`eip155:8453`): each request up to 0.01 USDC (amount `10000`), charged 0.001 USDC a row
//!   (count 1 to 10; `count=4` charges `4000`) through the typed `Charge`. A `count` over 10, 0,
//!   or that is not one integer is answered 400 (JSON) before any payment is asked.
//!
//! The receiver authorizer named in the 402 is the facilitator's (from its `/supported`): it
//! signs the claims and refunds. Without `--facilitator` the in-process sandbox facilitator
//! verifies the deposits and settles the claims. Every `--claim-every` seconds (default 60) the
//! latest voucher of every channel with unclaimed charges is claimed in one batch, then swept to
//! `--pay-to`. With `--rpc-url` the channels with unclaimed charges are also watched on that
//! chain for a pending withdrawal, and claimed at once when one starts, and a deposit whose
//! `/settle` answer was lost is looked up on chain (the token's `authorizationState`) when the
//! buyer sends it again: served once found, instead of 503 until the buyer deposits a second
//! time (without `--rpc-url` it stays in doubt, 503). With `--database-url`
//! the channels are kept in PostgreSQL (the table is created when missing), so several
//! instances share them; otherwise in memory.
//!
//! Every server paid to one receiver must share one channel store: without `--database-url` the
//! example warns, and holds an exclusive lock on its receiver (a file in the temporary
//! directory), so that a second process paid to the same receiver with its own memory refuses
//! to start instead of serving a voucher the first already counted.
//!
//! A payer may withdraw whatever the server has not claimed once the channel's withdrawal delay
//! (900 s) has passed. A voucher is refused when the channel's pending withdrawal may finalize
//! before the next claim could land; without `--rpc-url` the server learns of a withdrawal only
//! from the facilitator's `/verify`, so a `--claim-every` that is not well inside the delay (at
//! most half of it) is warned about at start: charges accepted before a withdrawal nobody sees
//! are lost when it finalizes.
//!
//! Served with the limits of `examples/serve/mod.rs`; on SIGTERM or Ctrl-C the requests in
//! progress finish, then every outstanding voucher is claimed and swept: a claim under another
//! instance's lease (one killed during a claim) is waited for, up to the lease
//! (`--claim-lease`) and 10 s more, then resolved or claimed again; a claim the facilitator
//! refused is tried once more, alone; the receiver is swept, what cooperative refunds claimed
//! included. The process exits 0 only when nothing charged is left unclaimed or unswept;
//! otherwise it exits 1 naming the amounts. The first line on stdout is
//! `listening on http://ADDR`.

mod serve;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Uri;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::json;
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, Network, ResourceInfo, UsdcDeployment};
use tower_x402::{Charge, Offer, Price, SettlementMode, X402Layer};
use tower_x402_channels::{
    BatchSettlement, ChannelOffer, ChannelStore, ClaimPolicy, ClaimReport, Claimer,
    DepositReconciler, MIN_WITHDRAW_DELAY, MemoryChannelStore, RpcChainReader,
};
use tower_x402_postgres::PostgresChannelStore;
use tower_x402_sandbox::demo;

/// A metered API sold through payment channels: one deposit, then a voucher per request.
///
/// A demonstration, not a server to put on the internet as it is: it speaks plain HTTP/1.1 (put
/// a reverse proxy in front for TLS). Its limits keep one client from exhausting it, and SIGTERM
/// or Ctrl-C drains it, claims every outstanding voucher and sweeps, then exits 0, or 1 naming
/// what is left unclaimed or unswept.
#[derive(Debug, Parser)]
#[command(name = "channels")]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4050")]
    listen: String,
    /// The facilitator's base URL; the in-process sandbox facilitator when absent.
    #[arg(long, value_name = "URL")]
    facilitator: Option<String>,
    /// Who is paid: the channels' receiver, where the claims are swept.
    #[arg(
        long,
        value_name = "ADDRESS",
        default_value = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    )]
    pay_to: String,
    /// Keep the channels in this PostgreSQL database (shared by every instance using it);
    /// in memory when absent. Every server paid to one receiver must share one channel store:
    /// without it, a second process on the same receiver refuses to start.
    #[arg(long, value_name = "postgres://…")]
    database_url: Option<String>,
    /// An Ethereum JSON-RPC endpoint of Base, to watch the channels with unclaimed charges for a
    /// pending withdrawal (claimed at once), to resolve a claim or refund whose answer was lost,
    /// and to recover a deposit whose settlement answer was lost when the buyer sends it again.
    #[arg(long, value_name = "URL")]
    rpc_url: Option<String>,
    /// Seconds between two claims of every channel with unclaimed charges (each followed by a
    /// sweep). Without --rpc-url, keep it at most half the channels' withdrawal delay (900 s):
    /// charges not claimed when a payer's withdrawal finalizes are lost.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    claim_every: u64,
    /// Seconds a claim is its instance's before another may resolve it (longer than a claim
    /// transaction takes to be mined); shutdown waits up to this and 10 s more for a claim
    /// under another instance's lease.
    #[arg(long, value_name = "SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    claim_lease: u64,
    #[command(flatten)]
    limits: serve::Limits,
}

/// Each request's maximum: 0.01 USDC (USDC has six decimals: micro-dollars are atomic units).
const MAXIMUM: u128 = 10_000;
/// 0.001 USDC a row.
const ROW: u128 = 1_000;
/// The most rows one request may ask for: what the maximum covers.
const MOST_ROWS: u64 = 10;

#[tokio::main]
async fn main() -> ExitCode {
    serve::log_to_stderr();
    serve::exit_code("channels", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let (listener, address) = serve::listen(&args.listen).await?;
    let facilitator = demo::facilitator_or_sandbox(args.facilitator.as_deref())?;
    // The facilitator's receiver authorizer signs the claims and refunds.
    let terms = ChannelOffer::from_facilitator(&facilitator, &Network::BASE)
        .await
        .map_err(|e| format!("offer: {e}"))?;
    let store: Arc<dyn ChannelStore> = match &args.database_url {
        Some(url) => Arc::new(postgres(url).await?),
        None => Arc::new(memory(&args.pay_to, terms.receiver_authorizer())?),
    };
    let claim_within = claim_within(&args);

    let lease = Duration::from_secs(args.claim_lease);
    let mut claimer = Claimer::new(Arc::clone(&store), Arc::clone(&facilitator))
        .policy(
            ClaimPolicy::default()
                .every(Duration::from_secs(args.claim_every))
                .on_withdrawal(args.rpc_url.is_some())
                .lease(lease)
                .shutdown_wait(lease + Duration::from_secs(10)),
        )
        // What cooperative refunds claimed is swept on the way out too.
        .sweeps_for(&Network::BASE, &args.pay_to, UsdcDeployment::BASE.asset);
    let mut scheme = BatchSettlement::new(Arc::clone(&store)).claim_within(claim_within);
    if let Some(url) = &args.rpc_url {
        claimer = claimer.chain(RpcChainReader::new(url).map_err(|e| format!("--rpc-url: {e}"))?);
        // A refund whose answer is lost is resolved on the same chain.
        scheme = scheme.chain(RpcChainReader::new(url).map_err(|e| format!("--rpc-url: {e}"))?);
    }

    let mut core = Payments::new(Arc::clone(&facilitator));
    if let Some(url) = &args.rpc_url {
        // A deposit whose `/settle` answer was lost is looked up on chain when the buyer sends it
        // again: served once found, never left for the buyer to deposit a second time.
        core = core.reconciler(DepositReconciler::new(url).map_err(|e| format!("--rpc-url: {e}"))?);
    }
    let payments = scheme.register(core);
    let offer = Offer::builder(ResourceInfo::new(format!("http://{address}/v1/rows")))
        .accept(terms.usdc(&UsdcDeployment::BASE, AtomicAmount(MAXIMUM), &args.pay_to))
        .settlement(SettlementMode::After)
        .build()
        .map(Arc::new)
        .map_err(|e| format!("offer: {e}"))?;
    let paywall = X402Layer::with_payments(payments.clone(), move |parts: &Parts| {
        match count_of(&parts.uri) {
            Ok(_) => Price::Charge(Arc::clone(&offer)),
            Err(error) => Price::NotSold {
                status: http::StatusCode::BAD_REQUEST,
                message: error.message().into(),
            },
        }
    });
    let app = Router::new()
        .route("/", get(index))
        .route("/v1/rows", get(rows).layer(paywall));

    let claims = claimer.spawn();
    let served = serve::serve(listener, app, args.limits, async move {
        payments.until_idle().await;
    })
    .await;
    // The requests are drained: claim every outstanding voucher and sweep, whatever the serving
    // came to.
    let claimed = claims.shutdown().await;
    served?;
    let report = claimed.map_err(|e| format!("claiming on shutdown: {e}"))?;
    tracing::info!(
        claimed = report.claimed.len(),
        in_doubt = report.in_doubt.len(),
        unclaimed = report.left_unclaimed(),
        unswept = report.left_unswept(),
        "outstanding vouchers claimed and swept"
    );
    if report.is_settled() {
        Ok(())
    } else {
        Err(unsettled(&report))
    }
}

/// What a shutdown left behind, for the exit message.
fn unsettled(report: &ClaimReport) -> String {
    let channels: Vec<String> = report
        .left
        .iter()
        .map(|(channel, amount)| format!("{channel} ({amount})"))
        .collect();
    format!(
        "{} charged left unclaimed on {} channels [{}], {} claimed left unswept, {} claims in \
         doubt (their answer was lost): a later start on the same --database-url tries them \
         again, as long as the payers have not withdrawn; kept in memory, they are lost",
        report.left_unclaimed(),
        report.left.len(),
        channels.join(", "),
        report.left_unswept(),
        report.in_doubt.len()
    )
}

/// The channels' table in the database at `url`, created when missing.
async fn postgres(url: &str) -> Result<PostgresChannelStore, String> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(url)
        .await
        .map_err(|e| format!("--database-url: {e}"))?;
    tower_x402_postgres::migrate(&pool)
        .await
        .map_err(|e| format!("creating the tables: {e}"))?;
    Ok(PostgresChannelStore::new(pool))
}

/// The channels of `pay_to` in this process's memory, with the receiver's lock: a second
/// process paid to the same receiver with its own memory would serve vouchers again.
fn memory(pay_to: &str, receiver_authorizer: &str) -> Result<MemoryChannelStore, String> {
    let store = MemoryChannelStore::exclusive(&Network::BASE, pay_to, receiver_authorizer)
        .map_err(|e| {
            format!(
                "channel store: {e}; give every server of this receiver the same --database-url"
            )
        })?;
    tracing::warn!(
        lock = %store.lock_file().map(|path| path.display().to_string()).unwrap_or_default(),
        "no --database-url: channels are kept in this process's memory, lost on exit (unclaimed vouchers are forfeited) and not shared: every server paid to {pay_to} must share one channel store, so no other process on this receiver may run"
    );
    Ok(store)
}

/// How long this server may take to claim a channel: the claim interval without a withdrawal
/// watch, the watch's 30 s with one, plus a claim's lease (2 minutes). Warns when, without a
/// watch, the interval is not well inside the channels' withdrawal delay.
fn claim_within(args: &Args) -> Duration {
    const CLAIM_LEASE: u64 = 120;
    const WATCH_EVERY: u64 = 30;
    let delay = MIN_WITHDRAW_DELAY;
    if args.rpc_url.is_none() && args.claim_every.saturating_mul(2) > delay {
        tracing::error!(
            claim_every = args.claim_every,
            withdraw_delay = delay,
            "--claim-every {}s is not well inside the channels' withdrawal delay of {delay}s, and without --rpc-url no withdrawal is watched: a payer who starts a withdrawal after paying takes back, when it finalizes, whatever was not claimed by then. Use --claim-every {} or less, or --rpc-url",
            args.claim_every,
            delay / 2
        );
    }
    let every = if args.rpc_url.is_some() {
        WATCH_EVERY.min(args.claim_every)
    } else {
        args.claim_every
    };
    Duration::from_secs(every.saturating_add(CLAIM_LEASE))
}

/// Why a query names no count of rows this route sells.
#[derive(Debug)]
enum CountError {
    NotANumber,
    Repeated,
    OutOfRange(u64),
}

impl CountError {
    fn message(&self) -> String {
        match self {
            Self::NotANumber => "count must be an integer from 1 to 10".to_owned(),
            Self::Repeated => "count is given more than once".to_owned(),
            Self::OutOfRange(count) => format!(
                "count {count} is out of range: from 1 to {MOST_ROWS} rows (0.001 USDC a row, at most 0.01 USDC a request)"
            ),
        }
    }

    /// The JSON 400 the handler answers (the paywall refuses the same queries before payment).
    fn response(&self) -> axum::response::Response {
        let body = json!({"error": self.message()});
        (http::StatusCode::BAD_REQUEST, Json(body)).into_response()
    }
}

/// The `count` query parameter (default 1), from 1 to 10: the price and the handler read it
/// alike, so a query the handler would refuse is refused before payment.
fn count_of(uri: &Uri) -> Result<u64, CountError> {
    let mut counts = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.strip_prefix("count="));
    let count = counts.next();
    if counts.next().is_some() {
        return Err(CountError::Repeated);
    }
    let count = match count {
        None => 1,
        Some(count) => count.parse().map_err(|_| CountError::NotANumber)?,
    };
    if (1..=MOST_ROWS).contains(&count) {
        Ok(count)
    } else {
        Err(CountError::OutOfRange(count))
    }
}

async fn index() -> Json<serde_json::Value> {
    Json(json!({
        "routes": [
            {"path": "/v1/rows?count=N", "price": "0.001 USDC per row, 1 to 10 rows, up to 0.01 USDC a request"},
        ],
        "network": "eip155:8453",
        "scheme": "batch-settlement",
    }))
}

async fn rows(charge: Charge, uri: Uri) -> axum::response::Response {
    let count = match count_of(&uri) {
        Ok(count) => count,
        Err(error) => return error.response(),
    };
    charge.set(AtomicAmount(u128::from(count) * ROW));
    Json(json!(
        (0..count).map(|n| json!({"row": n})).collect::<Vec<_>>()
    ))
    .into_response()
}
