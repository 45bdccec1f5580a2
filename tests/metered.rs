//! Metered (`upto`) payments through the layer, over loopback HTTP: the handler decides the
//! amount (through the typed [`Charge`] or the `Settlement-Overrides` header), the layer settles
//! exactly that amount once, never above the signed maximum, never the maximum by default.

#[path = "common/streamed.rs"]
mod streamed;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use serde_json::json;
use tower_x402::facilitator::{Endpoint, Facilitator, FacilitatorError};
use tower_x402::payment::Payments;
use tower_x402::settlement::PaymentKey;
use tower_x402::{
    BoxFuture, Charge, MemorySettlementStore, Offer, SettlementMode, SettlementStore, X402Layer,
};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentPayload, ResourceInfo, SettleResponse,
    SupportedKind, SupportedResponse, UsdcDeployment, VerifyResponse, X402Version, header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const FACILITATOR_ADDRESS: &str = "0x1111111111111111111111111111111111111111";

/// What the facilitator does with the next `/settle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settle {
    /// Settles and answers.
    Answer,
    /// Settles, then the answer is lost.
    AnswerLost,
    /// Answers `settlement_pending` without settling.
    Pending,
}

/// A facilitator that understands `upto`: verifies that the payment signs the maximum, and
/// settles each payment's nonce once, for the requirement's amount if at most the maximum.
#[derive(Clone, Default)]
struct Metering {
    /// Each transfer made: (nonce, amount).
    transfers: Arc<Mutex<Vec<(String, u128)>>>,
    /// Every `/settle` request received.
    settles: Arc<Mutex<Vec<FacilitatorRequest>>>,
    script: Arc<Mutex<Vec<Settle>>>,
    /// Networks listed for `upto` in `/supported`.
    upto_networks: Arc<Vec<Network>>,
}

impl Metering {
    fn new() -> Self {
        Self {
            upto_networks: Arc::new(vec![Network::BASE]),
            ..Self::default()
        }
    }

    fn queue(&self, step: Settle) {
        self.script.lock().unwrap().push(step);
    }

    fn transfers(&self) -> Vec<(String, u128)> {
        self.transfers.lock().unwrap().clone()
    }

    fn settle_amounts(&self) -> Vec<u128> {
        let settles = self.settles.lock().unwrap();
        settles
            .iter()
            .map(|r| r.payment_requirements().amount.get())
            .collect()
    }
}

/// The signed proof of `request` as JSON.
fn proof(request: &FacilitatorRequest) -> serde_json::Value {
    serde_json::from_str(request.payment_payload().payload.get()).unwrap_or_default()
}

fn nonce(request: &FacilitatorRequest) -> String {
    proof(request)["permit2Authorization"]["nonce"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn permitted(request: &FacilitatorRequest) -> u128 {
    proof(request)["permit2Authorization"]["permitted"]["amount"]
        .as_str()
        .and_then(|amount| amount.parse().ok())
        .unwrap_or(0)
}

impl Facilitator for Metering {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        let valid = permitted(request) >= request.payment_requirements().amount.get();
        Box::pin(async move {
            Ok(VerifyResponse {
                is_valid: valid,
                invalid_reason: (!valid).then(|| "upto_amount_exceeds_permitted".to_owned()),
                payer: Some(PAYER.to_owned()),
                ..VerifyResponse::default()
            })
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.settles.lock().unwrap().push(request.clone());
        let step = {
            let mut script = self.script.lock().unwrap();
            if script.is_empty() {
                Settle::Answer
            } else {
                script.remove(0)
            }
        };
        let network = request.payment_requirements().network.clone();
        let amount = request.payment_requirements().amount;
        let mut answer = SettleResponse::failure(network, "");
        if step == Settle::Pending {
            answer.error_reason = Some("settlement_pending".into());
            return Box::pin(async move { Ok(answer) });
        }
        if amount.get() > permitted(request) {
            answer.error_reason = Some("upto_amount_exceeds_permitted".into());
            return Box::pin(async move { Ok(answer) });
        }
        let nonce = nonce(request);
        {
            let mut transfers = self.transfers.lock().unwrap();
            if transfers.iter().any(|(used, _)| *used == nonce) {
                // Settled before (an answer lost): the same settlement again, as a facilitator
                // that recognises the identical request.
                if step == Settle::Answer {
                    answer.success = true;
                    answer.error_reason = None;
                    answer.transaction = format!("0x{nonce}");
                    answer.payer = Some(PAYER.into());
                    answer.amount = Some(amount);
                    return Box::pin(async move { Ok(answer) });
                }
            } else {
                transfers.push((nonce.clone(), amount.get()));
            }
        }
        if step == Settle::AnswerLost {
            return Box::pin(async move {
                Err(FacilitatorError::TimedOut {
                    endpoint: Endpoint::Settle,
                    after: Duration::from_secs(1),
                })
            });
        }
        answer.success = true;
        answer.error_reason = None;
        answer.transaction = format!("0x{nonce}");
        answer.payer = Some(PAYER.into());
        answer.amount = Some(amount);
        Box::pin(async move { Ok(answer) })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        let mut kinds: Vec<SupportedKind> = self
            .upto_networks
            .iter()
            .map(|network| SupportedKind {
                x402_version: X402Version::V2,
                scheme: "upto".into(),
                network: network.clone(),
                extra: Some(
                    json!({ "facilitatorAddress": FACILITATOR_ADDRESS })
                        .as_object()
                        .unwrap()
                        .clone(),
                ),
            })
            .collect();
        kinds.push(SupportedKind {
            x402_version: X402Version::V2,
            scheme: "exact".into(),
            network: Network::BASE,
            extra: None,
        });
        Box::pin(async move {
            Ok(Arc::new(SupportedResponse {
                kinds,
                ..SupportedResponse::default()
            }))
        })
    }
}

/// An offer of up to 0.50 USDC on Base for `url`.
async fn upto_offer(facilitator: &Metering, url: &str, mode: SettlementMode) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new(url))
            .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
            .settlement(mode)
            .build_for(facilitator)
            .await
            .unwrap(),
    )
}

/// A Permit2 `upto` payment of the offer's first accept, with nonce `seed`. The signature is
/// made up: the test facilitator does not read it.
fn payment(offer: &Offer, seed: u32) -> PaymentPayload {
    let accepted = offer.accepts()[0].clone();
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: serde_json::value::to_raw_value(&json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "permit2Authorization": {
                "from": PAYER,
                "permitted": { "token": accepted.asset, "amount": accepted.amount },
                "spender": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
                "nonce": seed.to_string(),
                "deadline": "99999999999",
                "witness": { "to": PAY_TO, "facilitator": FACILITATOR_ADDRESS, "validAfter": "0" },
            }
        }))
        .expect("a JSON payload"),
        accepted,
        extensions: None,
    }
}

/// Serves the metered routes behind `layer`; returns the base URL.
async fn serve(layer: X402Layer) -> String {
    async fn rows(charge: Charge, headers: HeaderMap) -> axum::response::Response {
        use axum::response::IntoResponse;
        // The test says what to charge through request headers.
        if let Some(count) = headers.get("x-rows") {
            let count: u64 = count.to_str().unwrap().parse().unwrap();
            charge.set(AtomicAmount(0));
            for _ in 0..count {
                charge.add_usd("0.01".parse().unwrap()).unwrap();
            }
        }
        let mut response = "rows".into_response();
        if let Some(value) = headers.get("x-override") {
            response
                .headers_mut()
                .insert("settlement-overrides", value.clone());
        }
        if headers.contains_key("x-fail") {
            *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        }
        response
    }
    let app = Router::new().route("/rows", get(rows)).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

struct Shop {
    facilitator: Metering,
    offer: Arc<Offer>,
    store: Arc<MemorySettlementStore>,
    base: String,
}

async fn shop() -> Shop {
    let facilitator = Metering::new();
    let offer = upto_offer(
        &facilitator,
        "https://api.example.com/rows",
        SettlementMode::After,
    )
    .await;
    let store = Arc::new(MemorySettlementStore::default());
    let layer = X402Layer::with_payments(
        Payments::new(facilitator.clone())
            .settlement_store(Arc::clone(&store))
            .pending_settlement_pause(Duration::from_millis(10)),
        Arc::clone(&offer),
    );
    let base = serve(layer).await;
    Shop {
        facilitator,
        offer,
        store,
        base,
    }
}

impl Shop {
    async fn pay(&self, payload: &PaymentPayload, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = reqwest::Client::new()
            .get(format!("{}/rows", self.base))
            .header(
                "payment-signature",
                header::encode(payload).unwrap().to_str().unwrap(),
            );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    async fn phase(&self, payload: &PaymentPayload) -> Option<&'static str> {
        self.store
            .load(&PaymentKey::of(payload))
            .await
            .unwrap()
            .map(|entry| entry.state.phase())
    }
}

fn settlement(response: &reqwest::Response) -> SettleResponse {
    header::decode(response.headers()["payment-response"].as_bytes()).unwrap()
}

async fn error_of(response: reqwest::Response) -> String {
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "errors are JSON"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    body["error"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_challenge_offers_upto_with_the_facilitators_address() {
    let facilitator = Metering::new();
    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/rows"))
        .usdc(&UsdcDeployment::BASE, "0.10".parse().unwrap(), PAY_TO)
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        // Not listed for `upto` by the facilitator: left out, never a challenge the buyer
        // cannot pay.
        .usdc_upto(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.50".parse().unwrap(),
            PAY_TO,
        )
        .build_for(&facilitator)
        .await
        .unwrap();
    let accepts = offer.accepts();
    assert_eq!(accepts.len(), 2, "{accepts:?}");
    assert_eq!(accepts[0].scheme, "exact");
    assert_eq!(accepts[1].scheme, "upto");
    assert_eq!(accepts[1].amount, AtomicAmount(500_000));
    let extra = accepts[1].extra.as_ref().unwrap();
    assert_eq!(extra["assetTransferMethod"], "permit2");
    assert_eq!(extra["facilitatorAddress"], FACILITATOR_ADDRESS);
    assert_eq!(extra["name"], "USD Coin");
    assert_eq!(extra["version"], "2");

    // Only `upto` accepts the facilitator does not list: nothing left to offer.
    let none = Offer::builder(ResourceInfo::new("https://api.example.com/rows"))
        .usdc_upto(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.50".parse().unwrap(),
            PAY_TO,
        )
        .build_for(&facilitator)
        .await;
    assert!(none.is_err());
    // A metered accept never settles before the work.
    let before = Offer::builder(ResourceInfo::new("https://api.example.com/rows"))
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .settlement(SettlementMode::Before)
        .build_for(&facilitator)
        .await;
    assert!(
        before
            .unwrap_err()
            .to_string()
            .contains("SettlementMode::Before")
    );
}

#[tokio::test]
async fn the_amount_set_through_the_handle_is_settled_once() {
    let shop = shop().await;
    let payload = payment(&shop.offer, 1);
    let response = shop.pay(&payload, &[("x-rows", "7")]).await;
    assert_eq!(response.status(), 200);
    let settled = settlement(&response);
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(70_000)));
    assert_eq!(response.text().await.unwrap(), "rows");
    assert_eq!(shop.facilitator.transfers(), vec![("1".into(), 70_000)]);
    assert_eq!(shop.facilitator.settle_amounts(), vec![70_000]);

    // The same payment again is not served again (its charge was set by the work that served
    // it): 409 with the settlement from its record, no second settlement.
    let again = shop.pay(&payload, &[("x-rows", "3")]).await;
    assert_eq!(again.status(), 409);
    assert_eq!(settlement(&again).amount, Some(AtomicAmount(70_000)));
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["error"], "payment_already_delivered");
    assert_eq!(shop.facilitator.settle_amounts(), vec![70_000]);
    assert_eq!(shop.facilitator.transfers().len(), 1);
}

#[tokio::test]
async fn the_amount_set_through_the_header_is_settled_and_the_header_removed() {
    let shop = shop().await;
    for (seed, value, expected) in [
        (1, r#"{"amount":"1234"}"#, 1234),
        (2, r#"{"amount":"50%"}"#, 250_000),
        (3, r#"{"amount":"$0.05"}"#, 50_000),
    ] {
        let payload = payment(&shop.offer, seed);
        let response = shop.pay(&payload, &[("x-override", value)]).await;
        assert_eq!(response.status(), 200, "{value}");
        assert!(
            !response.headers().contains_key("settlement-overrides"),
            "the header never reaches the client"
        );
        assert_eq!(settlement(&response).amount, Some(AtomicAmount(expected)));
    }
    assert_eq!(
        shop.facilitator.settle_amounts(),
        vec![1234, 250_000, 50_000]
    );
    // The handle wins over the header.
    let payload = payment(&shop.offer, 4);
    let response = shop
        .pay(
            &payload,
            &[("x-rows", "2"), ("x-override", r#"{"amount":"50%"}"#)],
        )
        .await;
    assert_eq!(settlement(&response).amount, Some(AtomicAmount(20_000)));
    assert!(!response.headers().contains_key("settlement-overrides"));
}

#[tokio::test]
async fn a_malformed_override_settles_nothing_and_is_a_server_error() {
    let shop = shop().await;
    for (seed, value) in [
        (1, r#"{"amount":"lots"}"#),
        (2, "50%"),
        (3, r#"{"amount":5000}"#),
    ] {
        let payload = payment(&shop.offer, seed);
        let response = shop.pay(&payload, &[("x-override", value)]).await;
        assert_eq!(response.status(), 500, "{value}");
        assert!(!response.headers().contains_key("settlement-overrides"));
        assert!(!response.headers().contains_key("payment-response"));
        assert!(error_of(response).await.contains("Settlement-Overrides"));
        assert_eq!(shop.phase(&payload).await, None, "released: nothing moved");
    }
    assert!(shop.facilitator.settle_amounts().is_empty(), "no /settle");
}

#[tokio::test]
async fn an_untouched_charge_settles_zero_never_the_maximum() {
    let shop = shop().await;
    // The handler neither touches its `Charge` nor sends `Settlement-Overrides`: zero results.
    let payload = payment(&shop.offer, 1);
    let response = shop.pay(&payload, &[]).await;
    assert_eq!(response.status(), 200);
    let settled = settlement(&response);
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(0)));
    assert_eq!(settled.transaction, "");
    assert_eq!(response.text().await.unwrap(), "rows");
    assert!(shop.facilitator.settle_amounts().is_empty(), "no /settle");
    assert!(shop.facilitator.transfers().is_empty(), "no transfer");
    assert_eq!(shop.phase(&payload).await, None, "released, still usable");
    // The unused authorization pays a later request that does charge.
    let response = shop.pay(&payload, &[("x-rows", "2")]).await;
    assert_eq!(settlement(&response).amount, Some(AtomicAmount(20_000)));
    assert_eq!(shop.facilitator.transfers(), vec![("1".into(), 20_000)]);
}

#[tokio::test]
async fn a_charge_above_the_maximum_is_never_settled() {
    let shop = shop().await;
    // 51 rows at 0.01 is 0.51, above the 0.50 signed.
    let payload = payment(&shop.offer, 1);
    let response = shop.pay(&payload, &[("x-rows", "51")]).await;
    assert_eq!(response.status(), 500);
    assert!(error_of(response).await.contains("above"));
    let over = payment(&shop.offer, 2);
    let response = shop
        .pay(&over, &[("x-override", r#"{"amount":"101%"}"#)])
        .await;
    assert_eq!(response.status(), 500);
    assert!(shop.facilitator.settle_amounts().is_empty(), "no /settle");
    assert!(shop.facilitator.transfers().is_empty());
    // Exactly the maximum is fine.
    let full = payment(&shop.offer, 3);
    let response = shop.pay(&full, &[("x-rows", "50")]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(shop.facilitator.transfers(), vec![("3".into(), 500_000)]);
}

#[tokio::test]
async fn zero_settles_nothing_and_leaves_the_authorization_unused() {
    let shop = shop().await;
    let payload = payment(&shop.offer, 1);
    let response = shop.pay(&payload, &[("x-rows", "0")]).await;
    assert_eq!(response.status(), 200);
    let settled = settlement(&response);
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(0)));
    assert_eq!(settled.transaction, "");
    assert!(shop.facilitator.settle_amounts().is_empty(), "no /settle");
    assert_eq!(shop.phase(&payload).await, None, "released, still usable");
    // The unused authorization pays a later request.
    let response = shop.pay(&payload, &[("x-rows", "1")]).await;
    assert_eq!(settlement(&response).amount, Some(AtomicAmount(10_000)));
    assert_eq!(shop.facilitator.transfers(), vec![("1".into(), 10_000)]);
}

#[tokio::test]
async fn a_failing_handler_is_not_charged_and_the_header_is_removed() {
    let shop = shop().await;
    let payload = payment(&shop.offer, 1);
    let response = shop
        .pay(
            &payload,
            &[
                ("x-rows", "3"),
                ("x-fail", "1"),
                ("x-override", r#"{"amount":"1"}"#),
            ],
        )
        .await;
    assert_eq!(response.status(), 500);
    assert!(!response.headers().contains_key("settlement-overrides"));
    assert!(shop.facilitator.settle_amounts().is_empty());
}

#[tokio::test]
async fn a_lost_settle_answer_is_recovered_with_the_identical_amount_once() {
    for step in [Settle::AnswerLost, Settle::Pending] {
        let shop = shop().await;
        let payload = payment(&shop.offer, 1);
        shop.facilitator.queue(step);
        if step == Settle::Pending {
            // Pending twice: the re-send after the pause is pending too.
            shop.facilitator.queue(Settle::Pending);
        }
        let first = shop.pay(&payload, &[("x-rows", "4")]).await;
        assert_eq!(first.status(), 503, "{step:?}: in doubt");
        assert_eq!(shop.phase(&payload).await, Some("in_doubt"));

        // The retry's handler charges something else: the recorded intent is re-sent instead.
        let retry = shop.pay(&payload, &[("x-rows", "9")]).await;
        assert_eq!(retry.status(), 200, "{step:?}");
        assert_eq!(settlement(&retry).amount, Some(AtomicAmount(40_000)));
        let amounts = shop.facilitator.settle_amounts();
        assert!(
            amounts.iter().all(|amount| *amount == 40_000),
            "{step:?}: every /settle carries the same amount: {amounts:?}"
        );
        assert_eq!(
            shop.facilitator.transfers(),
            vec![("1".into(), 40_000)],
            "{step:?}: one transfer"
        );
        assert_eq!(shop.phase(&payload).await, Some("settled"));

        let replay = shop.pay(&payload, &[("x-rows", "1")]).await;
        assert_eq!(settlement(&replay).amount, Some(AtomicAmount(40_000)));
        assert_eq!(shop.facilitator.settle_amounts().len(), amounts.len());
    }
}

/// A streamed shop: `/tokens` sends one token each time the test releases one.
struct Stream {
    facilitator: Metering,
    offer: Arc<Offer>,
    addr: std::net::SocketAddr,
    gate: Arc<tokio::sync::Semaphore>,
}

async fn streamed() -> Stream {
    let facilitator = Metering::new();
    let offer = upto_offer(
        &facilitator,
        "https://api.example.com/tokens",
        SettlementMode::AfterBody,
    )
    .await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let layer = X402Layer::new(facilitator.clone(), Arc::clone(&offer));
    let addr = streamed::serve(streamed::tokens_router(&gate).layer(layer)).await;
    Stream {
        facilitator,
        offer,
        addr,
        gate,
    }
}

impl Stream {
    async fn transfers_settle(&self) -> Vec<(String, u128)> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.facilitator.transfers().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never settled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.facilitator.transfers()
    }
}

#[tokio::test]
async fn a_streamed_body_settles_after_its_last_chunk_for_the_tokens_sent() {
    let shop = streamed().await;
    let payload = payment(&shop.offer, 1);
    let (response, _driver) = streamed::pay(shop.addr, &payload).await;
    let mut body = streamed::streaming_body(response);

    // Streamed as produced: the first token arrives while the stream is still open, and
    // nothing has settled yet.
    streamed::release(&shop.gate, &mut body, 0..1).await;
    assert!(shop.facilitator.settle_amounts().is_empty());

    // Six more, then the stream ends after 7 tokens.
    streamed::release(&shop.gate, &mut body, 1..7).await;
    assert!(shop.facilitator.settle_amounts().is_empty());
    let settled = streamed::finish(&shop.gate, body).await;
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(7_000)));
    assert_eq!(shop.facilitator.transfers(), vec![("1".into(), 7_000)]);

    // The same payment sent again is refused, with the settlement from its record: the stream
    // is not served twice.
    let (again, _driver) = streamed::pay(shop.addr, &payload).await;
    assert_eq!(again.status(), 409);
    let replayed: SettleResponse =
        header::decode(again.headers()["payment-response"].as_bytes()).unwrap();
    assert_eq!(replayed, settled);
    assert_eq!(
        shop.facilitator.settle_amounts(),
        vec![7_000],
        "settled once"
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_is_charged_for_what_was_sent_once() {
    let shop = streamed().await;
    let payload = payment(&shop.offer, 2);
    let (response, driver) = streamed::pay(shop.addr, &payload).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    streamed::release(&shop.gate, &mut body, 0..3).await;
    // Hang up after 3 tokens, with the stream still open.
    driver.abort();
    drop(body);
    assert_eq!(shop.transfers_settle().await, vec![("2".into(), 3_000)]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(shop.facilitator.settle_amounts(), vec![3_000], "once");

    // The buyer's retry learns the settlement from the record; the stream is not sent again.
    let (again, _driver) = streamed::pay(shop.addr, &payload).await;
    assert_eq!(again.status(), 409);
    let replayed: SettleResponse =
        header::decode(again.headers()["payment-response"].as_bytes()).unwrap();
    assert_eq!(replayed.amount, Some(AtomicAmount(3_000)));
    assert_eq!(shop.facilitator.settle_amounts(), vec![3_000]);
}
