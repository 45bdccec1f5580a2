//! Sign-in where it used to go wrong at run time: two prices under one resource URL, a handler
//! that asks for a payment, and a challenge too large for a reverse proxy.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_x402::payment::Payments;
use tower_x402::{Offer, Price, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use tower_x402_siwx::{
    Buyer, EntitlementStore, MemoryEntitlementStore, SignInWithX, entitlement_key,
};
use x402_wire::{AtomicAmount, Extension, PaymentRequired, ResourceInfo, UsdcDeployment, header};

const ORIGIN: &str = "https://shop.example";
const SECRET: &[u8] = b"the secret every instance shares";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn offer_at(url: &str, price: &str) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new(url))
            .usdc(&UsdcDeployment::BASE, price.parse().unwrap(), PAY_TO)
            .settlement(SettlementMode::Before)
            .build()
            .unwrap(),
    )
}

async fn send(app: &Router, path: &str, headers: &[(&str, &str)]) -> Response<Body> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

async fn json_body(response: Response<Body>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// The 402 of `path`: its challenge and its sign-in extension.
async fn challenge(app: &Router, path: &str) -> (PaymentRequired, Value) {
    let response = send(app, path, &[]).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap();
    let extension = required.extensions.as_ref().unwrap()["sign-in-with-x"].clone();
    (required, extension)
}

/// Pays `path` from `wallet`; the answer.
async fn buy(app: &Router, path: &str, wallet: &SandboxWallet) -> Response<Body> {
    let (required, _) = challenge(app, path).await;
    let payment = header::encode(&wallet.pay(&required).unwrap()).unwrap();
    send(
        app,
        path,
        &[("payment-signature", payment.to_str().unwrap())],
    )
    .await
}

/// `wallet`'s proof for a fresh challenge of `path`, sent: the answer.
async fn sign_in(app: &Router, path: &str, wallet: &SandboxWallet) -> Response<Body> {
    let (_, extension) = challenge(app, path).await;
    let proof = wallet.sign_in(&extension).unwrap();
    send(app, path, &[("sign-in-with-x", &proof)]).await
}

/// Who a handler taking [`Buyer`] was called for.
async fn buyer(buyer: Buyer) -> String {
    match buyer {
        Buyer::Paid(payment) => json!({"paid": payment.payer}),
        Buyer::SignedIn(signed_in) => json!({"signedIn": signed_in.address()}),
    }
    .to_string()
}

/// One resource URL, two prices chosen by the query: `?tier=basic` 0.10, anything else 0.25.
fn two_tiers(facilitator: &SandboxFacilitator, siwx: SignInWithX) -> Router {
    let url = format!("{ORIGIN}/report");
    let (basic, full) = (offer_at(&url, "0.10"), offer_at(&url, "0.25"));
    let pricing = move |parts: &Parts| match parts.uri.query() {
        Some("tier=basic") => Price::Charge(Arc::clone(&basic)),
        _ => Price::Charge(Arc::clone(&full)),
    };
    Router::new().route(
        "/report",
        get(buyer).layer(X402Layer::with_payments(
            Payments::new(facilitator.clone()).hook(siwx),
            pricing,
        )),
    )
}

#[tokio::test]
async fn a_buyer_of_the_cheaper_price_cannot_sign_in_to_the_dearer_one() {
    let facilitator = SandboxFacilitator::new();
    let store = MemoryEntitlementStore::default();
    let siwx = SignInWithX::new(ORIGIN, SECRET)
        .unwrap()
        .entitlement_store(store.clone());
    let app = two_tiers(&facilitator, siwx);
    let buyer = SandboxWallet::random();

    let bought = buy(&app, "/report?tier=basic", &buyer).await;
    assert_eq!(bought.status(), StatusCode::OK);
    let address = buyer.address().to_lowercase();
    let url = format!("{ORIGIN}/report");
    assert!(
        store
            .last_purchase(&entitlement_key(&url, &AtomicAmount(100_000)), &address)
            .await
            .unwrap()
            .is_some(),
        "recorded under the price paid"
    );

    // The 0.25 tier: the 0.10 purchase does not open it.
    let refused = sign_in(&app, "/report?tier=full", &buyer).await;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    let error = json_body(refused).await["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.starts_with("invalid_siwx_not_entitled"), "{error}");
    // The 0.10 tier: it does.
    let served = sign_in(&app, "/report?tier=basic", &buyer).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(
        json_body(served).await["signedIn"],
        buyer.address().as_str()
    );

    // Paying the 0.25 tier opens it too.
    assert_eq!(
        buy(&app, "/report?tier=full", &buyer).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        sign_in(&app, "/report?tier=full", &buyer).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_entitlement_recorded_under_the_resource_url_alone_still_signs_in() {
    let facilitator = SandboxFacilitator::new();
    let store = MemoryEntitlementStore::default();
    let siwx = SignInWithX::new(ORIGIN, SECRET)
        .unwrap()
        .entitlement_store(store.clone());
    let app = two_tiers(&facilitator, siwx);
    let earlier = SandboxWallet::random();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // As a store written before entitlements were keyed by price holds it.
    store
        .record_purchase(
            &format!("{ORIGIN}/report"),
            &earlier.address().to_lowercase(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        sign_in(&app, "/report?tier=basic", &earlier).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_handler_taking_verified_payment_is_told_about_sign_in_and_buyer_serves_both() {
    let facilitator = SandboxFacilitator::new();
    let siwx = SignInWithX::new(ORIGIN, SECRET).unwrap();
    let offer = offer_at(&format!("{ORIGIN}/paid"), "0.10");
    let layer = X402Layer::with_payments(
        Payments::new(facilitator.clone()).hook(siwx),
        Arc::clone(&offer),
    );
    let app = Router::new()
        .route(
            "/paid",
            get(|payment: VerifiedPayment| async move { format!("{:?}", payment.payer) })
                .layer(layer.clone()),
        )
        .route("/either", get(buyer).layer(layer));
    let wallet = SandboxWallet::random();

    // Bought through the first route, the entitlement is to the offer: both routes share it.
    assert_eq!(buy(&app, "/paid", &wallet).await.status(), StatusCode::OK);
    let signed_in = sign_in(&app, "/paid", &wallet).await;
    assert_eq!(signed_in.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let error = json_body(signed_in).await["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("signed in (sign-in-with-x)") && error.contains("Buyer"),
        "{error}"
    );

    let served = sign_in(&app, "/either", &wallet).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(
        json_body(served).await,
        json!({"signedIn": wallet.address()})
    );
    let other = SandboxWallet::random();
    let paid = buy(&app, "/either", &other).await;
    assert_eq!(paid.status(), StatusCode::OK);
    assert_eq!(json_body(paid).await, json!({"paid": other.address()}));
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_offer_whose_challenge_would_pass_four_kilobytes_is_warned_about_once() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let url = "https://shop.example/huge";
    tracing::subscriber::with_default(subscriber, || {
        let schema = json!({"description": "x".repeat(4096)});
        for _ in 0..2 {
            Offer::builder(ResourceInfo::new(url))
                .usdc(&UsdcDeployment::BASE, "0.10".parse().unwrap(), PAY_TO)
                .extension("bazaar", Extension::new(json!({}), schema.clone()))
                .build()
                .unwrap();
        }
        offer_at("https://shop.example/small", "0.10");
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|line| line.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "once, for the large offer only: {log}");
    assert!(
        warnings[0].contains(url) && warnings[0].contains("nginx"),
        "{log}"
    );
}
