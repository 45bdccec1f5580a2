//! Sign-in never gives a meter away: a buyer charged once on a metered (`upto`) route records
//! no entitlement and is never served there free after signing in — a proof for the route is
//! not looked at, and the request goes on to payment as if unsigned — while a fixed-price
//! (`exact`) purchase still signs its buyer in. Through the layer, against the sandbox
//! facilitator, with real signatures from the sandbox wallet.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use tower_x402::payment::Payments;
use tower_x402::{Charge, Offer, SettlementMode, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use tower_x402_siwx::{
    EntitlementStore, MemoryEntitlementStore, SignInWithX, SignedIn, entitlement_key,
};
use x402_wire::{AtomicAmount, PaymentRequired, ResourceInfo, SettleResponse, UsdcDeployment};

const ORIGIN: &str = "https://shop.example";
const SECRET: &[u8] = b"the secret every instance shares";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const ROWS: &str = "https://shop.example/rows";

/// Every run of a handler: `metered` or `fixed`, and whether it was signed in.
type Runs = Arc<Mutex<Vec<String>>>;

/// `/rows` behind `offer`, with `siwx`: a metered handler (charges 0.01 and takes `Charge`,
/// so a request that reaches it without a payment is a 500) or a fixed-price one.
fn app(
    facilitator: &SandboxFacilitator,
    siwx: &SignInWithX,
    offer: Offer,
    metered: bool,
    runs: &Runs,
) -> Router {
    let layer = X402Layer::with_payments(
        Payments::new(facilitator.clone()).hook(siwx.clone()),
        Arc::new(offer),
    );
    let runs = Arc::clone(runs);
    if metered {
        Router::new().route(
            "/rows",
            get(move |charge: Charge| async move {
                runs.lock().unwrap().push("metered".to_owned());
                charge.set(AtomicAmount(10_000));
                "1 row"
            })
            .layer(layer),
        )
    } else {
        Router::new().route(
            "/rows",
            get(move |signed_in: Option<SignedIn>| async move {
                let how = if signed_in.is_some() {
                    "signed in"
                } else {
                    "paid"
                };
                runs.lock().unwrap().push(format!("fixed, {how}"));
                "all rows"
            })
            .layer(layer),
        )
    }
}

async fn metered_app(facilitator: &SandboxFacilitator, siwx: &SignInWithX, runs: &Runs) -> Router {
    let offer = Offer::builder(ResourceInfo::new(ROWS))
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .build_for(facilitator)
        .await
        .unwrap();
    app(facilitator, siwx, offer, true, runs)
}

fn fixed_app(facilitator: &SandboxFacilitator, siwx: &SignInWithX, runs: &Runs) -> Router {
    let offer = Offer::builder(ResourceInfo::new(ROWS))
        .usdc(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .settlement(SettlementMode::Before)
        .build()
        .unwrap();
    app(facilitator, siwx, offer, false, runs)
}

async fn send(app: &Router, headers: &[(&str, &str)]) -> Response<Body> {
    let mut request = Request::get("/rows");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

async fn challenge(app: &Router) -> PaymentRequired {
    let response = send(app, &[]).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    x402_wire::header::decode(response.headers()["payment-required"].as_bytes()).unwrap()
}

/// `wallet` pays `app`'s challenge: the status and the settlement.
async fn pay(
    app: &Router,
    wallet: &SandboxWallet,
    also: &[(&str, &str)],
) -> (StatusCode, Option<SettleResponse>) {
    let required = challenge(app).await;
    let payment = x402_wire::header::encode(&wallet.pay(&required).unwrap()).unwrap();
    let mut headers = vec![("payment-signature", payment.to_str().unwrap())];
    headers.extend_from_slice(also);
    let response = send(app, &headers).await;
    let settlement = response
        .headers()
        .get("payment-response")
        .map(|value| x402_wire::header::decode(value.as_bytes()).unwrap());
    (response.status(), settlement)
}

/// `wallet`'s proof for `/rows`, from a 402 of `app` (which must carry the sign-in challenge).
async fn proof(app: &Router, wallet: &SandboxWallet) -> String {
    let required = challenge(app).await;
    let extension = &required.extensions.as_ref().unwrap()["sign-in-with-x"];
    wallet.sign_in(extension).unwrap()
}

async fn json(response: Response<Body>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_buyer_charged_once_on_a_metered_route_is_never_served_free_after_signing_in() {
    let facilitator = SandboxFacilitator::new();
    let store = MemoryEntitlementStore::default();
    let siwx = SignInWithX::new(ORIGIN, SECRET)
        .unwrap()
        .entitlement_store(store.clone());
    let runs = Runs::default();
    let metered = metered_app(&facilitator, &siwx, &runs).await;
    let buyer = SandboxWallet::random();

    // Charged 0.01 of a 0.50 maximum, once.
    let (status, settlement) = pay(&metered, &buyer, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(settlement.unwrap().amount, Some(AtomicAmount(10_000)));
    let address = buyer.address().to_lowercase();
    for amount in ["500000", "10000"] {
        let key = entitlement_key(ROWS, &amount.parse().unwrap());
        assert_eq!(
            store.last_purchase(&key, &address).await.unwrap(),
            None,
            "a metered payment records no entitlement ({key})"
        );
    }
    // The metered route's 402 offers no sign-in.
    let required = challenge(&metered).await;
    assert!(
        required
            .extensions
            .as_ref()
            .is_none_or(|extensions| !extensions.contains_key("sign-in-with-x")),
        "{required:?}"
    );

    // A proof for /rows, from a fixed-price route of the same origin and secret: on the
    // metered route it is not looked at, and the request goes on to payment as if unsigned.
    let fixed = fixed_app(&facilitator, &siwx, &Runs::default());
    for _ in 0..3 {
        let proof = proof(&fixed, &buyer).await;
        let response = send(&metered, &[("sign-in-with-x", &proof)]).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(json(response).await["accepts"].is_array(), "the challenge");
    }
    // A proof with a payment: charged, as without the proof.
    let proof = proof(&fixed, &buyer).await;
    let (status, settlement) = pay(&metered, &buyer, &[("sign-in-with-x", &proof)]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(settlement.unwrap().amount, Some(AtomicAmount(10_000)));

    assert_eq!(
        *runs.lock().unwrap(),
        ["metered", "metered"],
        "served only when paid"
    );
    assert_eq!(facilitator.settlement_count(), 2, "each delivery charged");
}

#[tokio::test]
async fn a_fixed_price_purchase_still_signs_its_buyer_in() {
    let facilitator = SandboxFacilitator::new();
    let store = MemoryEntitlementStore::default();
    let siwx = SignInWithX::new(ORIGIN, SECRET)
        .unwrap()
        .entitlement_store(store.clone());
    let runs = Runs::default();
    let fixed = fixed_app(&facilitator, &siwx, &runs);
    let buyer = SandboxWallet::random();

    let (status, _) = pay(&fixed, &buyer, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let key = entitlement_key(ROWS, &"500000".parse().unwrap());
    let address = buyer.address().to_lowercase();
    assert!(store.last_purchase(&key, &address).await.unwrap().is_some());

    let proof = proof(&fixed, &buyer).await;
    let response = send(&fixed, &[("sign-in-with-x", &proof)]).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(*runs.lock().unwrap(), ["fixed, paid", "fixed, signed in"]);
    assert_eq!(
        facilitator.settlement_count(),
        1,
        "signed in without paying"
    );
}
