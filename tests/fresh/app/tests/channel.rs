use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{Request, StatusCode};
use axum::{Router, routing::get};
use tower::ServiceExt;
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, Network, PaymentRequired, ResourceInfo, SettleResponse, UsdcDeployment, header};
use tower_x402::{Charge, Facilitator, Offer, Price, SettlementMode, X402Layer};
use tower_x402_channels::{BatchSettlement, ChannelOffer, MemoryChannelStore};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};

/// One row for 0.001 USDC.
async fn row(charge: Charge) -> &'static str {
    charge.set(AtomicAmount(1_000));
    "one row"
}

/// The app under test, on the facilitator it is given.
async fn app(facilitator: impl Facilitator + Clone) -> Result<Router, Box<dyn std::error::Error>> {
    let channels = Arc::new(MemoryChannelStore::default());
    let payments = BatchSettlement::new(channels).register(Payments::new(facilitator.clone()));
    let terms = ChannelOffer::from_facilitator(&facilitator, &Network::BASE).await?;
    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/row"))
        .accept(terms.usdc(&UsdcDeployment::BASE, AtomicAmount(10_000), "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"))
        .settlement(SettlementMode::After)
        .build()?;
    let offer = Arc::new(offer);
    let paywall = X402Layer::with_payments(payments, move |_: &Parts| Price::Charge(Arc::clone(&offer)));
    Ok(Router::new().route("/row", get(row).layer(paywall)))
}

#[tokio::test]
async fn a_deposit_then_vouchers() -> Result<(), Box<dyn std::error::Error>> {
    let facilitator = SandboxFacilitator::new();
    let app = app(facilitator.clone()).await?;

    // The 402 names the channel's terms.
    let unpaid = app.clone().oneshot(Request::get("/row").body(Body::empty())?).await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let challenge: PaymentRequired = header::decode(unpaid.headers()["payment-required"].as_bytes())?;
    let accept = challenge.accepts[0].clone();

    // The first request deposits 1 USDC into a new channel, with a voucher for up to the
    // request's amount (nothing charged yet).
    let wallet = SandboxWallet::random();
    let channel = wallet.channel_config(&accept, [1; 32])?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let mut payment = wallet.deposit_payment_at(&accept, &channel, 1_000_000, accept.amount.get(), now)?;

    for charged_so_far in [1_000, 2_000, 3_000] {
        let request = Request::get("/row")
            .header("payment-signature", header::encode(&payment)?)
            .body(Body::empty())?;
        let paid = app.clone().oneshot(request).await?;
        assert_eq!(paid.status(), StatusCode::OK);

        // What the channel was charged so far; the next voucher signs it plus the amount.
        let settlement: SettleResponse = header::decode(paid.headers()["payment-response"].as_bytes())?;
        let state = settlement.extra.as_ref().and_then(|extra| extra.get("channelState"));
        let charged: u128 = state.and_then(|state| state["chargedCumulativeAmount"].as_str()).ok_or("no channelState")?.parse()?;
        assert_eq!(charged, charged_so_far);
        payment = wallet.voucher_payment(&accept, &channel, charged + accept.amount.get())?;
    }
    // The deposit was the only settlement: the vouchers were checked by the server alone.
    assert_eq!(facilitator.settle_calls(), 1);
    Ok(())
}
