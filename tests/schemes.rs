//! A payment scheme is a plug-in: a scheme defined here, outside the crate — `tab`, a running
//! tab that a buyer's tab id identifies, billed in whole units of 100 — registered with
//! `Payments::scheme` and bought with through the HTTP layer, against a facilitator of its own
//! that counts its calls.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{body_json, decode_required, decode_settlement, get};
use http::{Request, Response};
use http_body_util::Full;
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};
use tower_x402::payment::{Payments, Refusal, Scheme};
use tower_x402::{BoxFuture, Charge, Facilitator, FacilitatorError, Offer, X402Layer};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements, ResourceInfo,
    SettleResponse, VerifyResponse, X402Version, header,
};

const URL: &str = "https://api.example.com/rows";
const UNIT: u128 = 100;

/// `tab`: the buyer names a tab, and one tab id is one payment whatever else its proof says;
/// a payment matches an offer's `tab` requirement by network and payee, for any maximum up to
/// the offer's; the work charges what it used, billed in whole units of 100.
struct Tab;

impl Scheme for Tab {
    fn name(&self) -> &str {
        "tab"
    }

    fn mismatch(
        &self,
        own: &PaymentRequirements,
        accepted: &PaymentRequirements,
    ) -> Option<&'static str> {
        if accepted.scheme != own.scheme {
            Some("scheme")
        } else if accepted.network != own.network {
            Some("network")
        } else if accepted.pay_to != own.pay_to {
            Some("payTo")
        } else if accepted.amount > own.amount {
            Some("amount")
        } else {
            None
        }
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        let proof: serde_json::Value = serde_json::from_str(payload.payload.get())
            .map_err(|_| invalid("invalid_tab_proof"))?;
        let tab = proof["tab"]
            .as_str()
            .ok_or_else(|| invalid("invalid_tab_proof"))?;
        Ok(format!("tab:{}:{tab}", payload.accepted.network).into())
    }

    fn metered(&self) -> bool {
        true
    }

    fn settle_request(
        &self,
        verified: &FacilitatorRequest,
        amount: AtomicAmount,
    ) -> Option<FacilitatorRequest> {
        let mut billed = PaymentRequirements::clone(verified.payment_requirements());
        let units = amount.get().div_ceil(UNIT) * UNIT;
        billed.amount = AtomicAmount(units.min(billed.amount.get()));
        Some(verified.with_requirements(billed))
    }
}

fn invalid(reason: &str) -> Refusal {
    Refusal::InvalidPayment {
        reason: reason.to_owned(),
    }
}

/// A facilitator for tabs: a proof signed `ok` verifies, and every `/settle` succeeds for the
/// amount its requirement names, each recorded.
#[derive(Clone, Default)]
struct TabFacilitator {
    verified: Arc<AtomicUsize>,
    settled: Arc<Mutex<Vec<AtomicAmount>>>,
}

impl Facilitator for TabFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.verified.fetch_add(1, Ordering::SeqCst);
        let proof: serde_json::Value =
            serde_json::from_str(request.payment_payload().payload.get()).unwrap();
        let valid = proof["signature"] == "ok";
        Box::pin(async move {
            Ok(VerifyResponse {
                is_valid: valid,
                invalid_reason: (!valid).then(|| "invalid_tab_signature".to_owned()),
                payer: Some("tab-holder".to_owned()),
                ..Default::default()
            })
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        let requirement = request.payment_requirements();
        self.settled.lock().unwrap().push(requirement.amount);
        let mut settled = SettleResponse::failure(requirement.network.clone(), "");
        settled.success = true;
        settled.error_reason = None;
        settled.transaction = format!("tab-close-{}", requirement.amount);
        settled.amount = Some(requirement.amount);
        Box::pin(async move { Ok(settled) })
    }
}

fn tab_offer() -> Arc<Offer> {
    let requirement: PaymentRequirements = serde_json::from_value(json!({
        "scheme": "tab", "network": "eip155:8453", "amount": "1000",
        "asset": "usd-cents", "payTo": "shop-42", "maxTimeoutSeconds": 60
    }))
    .unwrap();
    Arc::new(
        Offer::builder(ResourceInfo::new(URL))
            .accept(requirement)
            .build()
            .unwrap(),
    )
}

/// A tab payment for `offer` naming `maximum`, with `proof` as its proof.
fn tab_payment(offer: &Offer, maximum: u128, proof: serde_json::Value) -> PaymentPayload {
    let mut accepted = offer.accepts()[0].clone();
    accepted.amount = AtomicAmount(maximum);
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        accepted,
        payload: serde_json::value::to_raw_value(&proof).unwrap(),
        extensions: None,
    }
}

fn paid(payload: &PaymentPayload) -> Request<Full<Bytes>> {
    Request::get("/rows")
        .header("payment-signature", header::encode(payload).unwrap())
        .body(Full::default())
        .unwrap()
}

/// The work: charges 250 of whatever the tab allows (and says whether it got a charge).
async fn rows(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let charged = match request.extensions().get::<Charge>() {
        Some(charge) => {
            charge.set(AtomicAmount(250));
            true
        }
        None => false,
    };
    let body = json!({ "rows": 3, "charged": charged });
    Ok(Response::new(Full::new(Bytes::from(body.to_string()))))
}

#[tokio::test]
async fn a_scheme_registered_from_outside_the_crate_is_matched_identified_and_settled_its_way() {
    let facilitator = TabFacilitator::default();
    let offer = tab_offer();
    let payments = Payments::new(facilitator.clone()).scheme(Tab);
    let app = ServiceBuilder::new()
        .layer(X402Layer::with_payments(payments, Arc::clone(&offer)))
        .service_fn(rows);

    // The challenge states the scheme's requirement as the offer has it.
    let challenge = app.clone().oneshot(get("/rows")).await.unwrap();
    assert_eq!(challenge.status(), 402);
    assert_eq!(decode_required(&challenge).accepts[0].scheme, "tab");

    // The scheme's own matching: a maximum above the offer's names the field; below it matches.
    let greedy = tab_payment(&offer, 5_000, json!({"tab": "alice-7", "signature": "ok"}));
    let refused = app.clone().oneshot(paid(&greedy)).await.unwrap();
    assert_eq!(refused.status(), 402);
    let error = body_json(refused).await["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains("amount"), "{error}");

    // The scheme's own identity: a proof without a tab is refused before any /verify.
    let anonymous = tab_payment(&offer, 800, json!({"signature": "ok"}));
    let refused = app.clone().oneshot(paid(&anonymous)).await.unwrap();
    assert_eq!(refused.status(), 402);
    let error = body_json(refused).await["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains("invalid_tab_proof"), "{error}");
    assert_eq!(facilitator.verified.load(Ordering::SeqCst), 0);

    // Bought: the work got a charge (the scheme is metered), charged 250, and the scheme
    // billed it as 300 — what /settle was asked and what PAYMENT-RESPONSE says.
    let payment = tab_payment(&offer, 800, json!({"tab": "alice-7", "signature": "ok"}));
    let bought = app.clone().oneshot(paid(&payment)).await.unwrap();
    assert_eq!(bought.status(), 200);
    let settlement = decode_settlement(&bought);
    assert_eq!(settlement.amount, Some(AtomicAmount(300)));
    assert_eq!(settlement.transaction, "tab-close-300");
    assert_eq!(body_json(bought).await["charged"], true);
    assert_eq!(*facilitator.settled.lock().unwrap(), [AtomicAmount(300)]);

    // The same tab under another proof is the same payment: metered, so never delivered
    // twice, answered from its record (409) with no second /verify or /settle.
    let again = tab_payment(
        &offer,
        800,
        json!({"signature": "ok", "tab": "alice-7", "note": "retry"}),
    );
    let repeated = app.clone().oneshot(paid(&again)).await.unwrap();
    assert_eq!(repeated.status(), 409);
    assert_eq!(
        decode_settlement(&repeated).transaction,
        "tab-close-300",
        "the recorded settlement"
    );
    assert_eq!(
        body_json(repeated).await["error"],
        "payment_already_delivered"
    );
    assert_eq!(facilitator.verified.load(Ordering::SeqCst), 1);
    assert_eq!(facilitator.settled.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn without_the_scheme_registered_its_requirement_is_a_fixed_price() {
    let facilitator = TabFacilitator::default();
    let offer = tab_offer();
    let app = ServiceBuilder::new()
        .layer(X402Layer::new(facilitator.clone(), Arc::clone(&offer)))
        .service_fn(rows);

    // No `tab` scheme: the offer's requirement is matched field by field (a lower maximum
    // does not pay it) and the work gets no charge; the requirement's amount is settled.
    let lower = tab_payment(&offer, 800, json!({"tab": "bob-1", "signature": "ok"}));
    let refused = app.clone().oneshot(paid(&lower)).await.unwrap();
    assert_eq!(refused.status(), 402);
    let exact = tab_payment(&offer, 1000, json!({"tab": "bob-1", "signature": "ok"}));
    let bought = app.clone().oneshot(paid(&exact)).await.unwrap();
    assert_eq!(bought.status(), 200);
    assert_eq!(decode_settlement(&bought).amount, Some(AtomicAmount(1000)));
    assert_eq!(body_json(bought).await["charged"], false);
    assert_eq!(*facilitator.settled.lock().unwrap(), [AtomicAmount(1000)]);
}

/// A scheme that refuses every payment it is asked about with its own mark: which scheme the
/// core asked.
struct Marked {
    namespace: Option<&'static str>,
    mark: &'static str,
}

impl Scheme for Marked {
    fn name(&self) -> &str {
        "tab"
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace
    }

    fn identify(&self, _: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        Err(invalid(self.mark))
    }
}

/// The `tab` offer and a payment of it on `network`.
fn tab_on(network: &str) -> (Arc<Offer>, PaymentPayload) {
    let requirement: PaymentRequirements = serde_json::from_value(json!({
        "scheme": "tab", "network": network, "amount": "1000",
        "asset": "usd-cents", "payTo": "shop-42", "maxTimeoutSeconds": 60
    }))
    .unwrap();
    let offer = Arc::new(
        Offer::builder(ResourceInfo::new(URL))
            .accept(requirement)
            .build()
            .unwrap(),
    );
    let payment = tab_payment(&offer, 1000, json!({"tab": "carol-3", "signature": "ok"}));
    (offer, payment)
}

#[tokio::test]
async fn a_requirement_is_answered_by_the_scheme_of_its_networks_namespace() {
    let mark = |namespace, mark| Marked { namespace, mark };
    let payments = Payments::new(TabFacilitator::default())
        .scheme(mark(Some("eip155"), "evm-replaced"))
        .scheme(mark(None, "everywhere"))
        .scheme(mark(Some("solana"), "solana"))
        // Same name and namespace: replaces the first.
        .scheme(mark(Some("eip155"), "evm"));
    for (network, expected) in [
        ("eip155:8453", "evm"),
        ("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "solana"),
        ("aptos:1", "everywhere"),
    ] {
        let (offer, payment) = tab_on(network);
        let app = ServiceBuilder::new()
            .layer(X402Layer::with_payments(payments.clone(), offer))
            .service_fn(rows);
        let refused = app.oneshot(paid(&payment)).await.unwrap();
        assert_eq!(refused.status(), 402, "{network}");
        assert_eq!(body_json(refused).await["error"], expected, "{network}");
    }
}
