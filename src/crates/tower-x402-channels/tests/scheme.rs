//! The `batch-settlement` scheme served over loopback HTTP against the sandbox facilitator: one
//! deposit then vouchers verified locally (one facilitator `/settle` in all), forged vouchers
//! refused, a replay answered with the corrective 402, a failing handler changing nothing, and
//! concurrent requests on one channel never accepted on one cumulative base.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Query;
use axum::routing::get;
use axum::{Extension, Router};
use http::StatusCode;
use serde_json::Value;
use tower_x402::payment::Payments;
use tower_x402::proto::{
    AtomicAmount, PaymentPayload, PaymentRequirements, ResourceInfo, SettleResponse,
    UsdcDeployment, header,
};
use tower_x402::{Charge, HttpFacilitator, Offer, Price, SettlementMode, X402Layer};
use tower_x402_channels::{
    BatchSettlement, ChannelConfig, ChannelOffer, ChannelStore, MemoryChannelStore,
};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// At most 0.01 USDC a request; 0.001 USDC a row.
const AMOUNT: u128 = 10_000;
const ROW: u128 = 1_000;
const DEPOSIT: u128 = 1_000_000;

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

#[derive(serde::Deserialize)]
struct Rows {
    count: u64,
}

async fn rows(Query(rows): Query<Rows>, Extension(charge): Extension<Charge>) -> String {
    charge.add(AtomicAmount(u128::from(rows.count) * ROW));
    format!("{} rows", rows.count)
}

async fn broken() -> StatusCode {
    StatusCode::INTERNAL_SERVER_ERROR
}

/// A server selling `/rows` and `/broken` with `batch-settlement`, over the sandbox.
struct Server {
    sandbox: SandboxFacilitator,
    base: String,
    accept: PaymentRequirements,
    channels: Arc<MemoryChannelStore>,
}

impl Server {
    async fn start() -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        let facilitator = HttpFacilitator::new(&url).unwrap();
        let usdc = UsdcDeployment::BASE;
        let terms = ChannelOffer::from_facilitator(&facilitator, &usdc.network)
            .await
            .unwrap();
        let accept = terms.usdc(&usdc, AtomicAmount(AMOUNT), PAY_TO);
        let channels = Arc::new(MemoryChannelStore::default());
        let payments = BatchSettlement::new(Arc::clone(&channels), facilitator.clone())
            .register(Payments::new(facilitator));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let base = format!("http://{address}");
        let offer = |path: &str| {
            Arc::new(
                Offer::builder(ResourceInfo::new(format!("{base}{path}")))
                    .accept(accept.clone())
                    .settlement(SettlementMode::After)
                    .build()
                    .unwrap(),
            )
        };
        let (rows_offer, broken_offer) = (offer("/rows"), offer("/broken"));
        let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
            "/rows" => Price::Charge(Arc::clone(&rows_offer)),
            _ => Price::Charge(Arc::clone(&broken_offer)),
        };
        let app = Router::new()
            .route("/rows", get(rows))
            .route("/broken", get(broken))
            .layer(X402Layer::with_payments(payments, pricing));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            sandbox,
            base,
            accept,
            channels,
        }
    }

    async fn get(&self, path: &str, payment: &PaymentPayload) -> Answer {
        let value = header::encode(payment).unwrap();
        let response = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .header("PAYMENT-SIGNATURE", value.to_str().unwrap())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let settlement = response
            .headers()
            .get("PAYMENT-RESPONSE")
            .map(|value| header::decode::<SettleResponse>(value.as_bytes()).unwrap());
        let required = response.headers().get("PAYMENT-REQUIRED").map(|value| {
            let json =
                header::decode::<tower_x402::proto::PaymentRequired>(value.as_bytes()).unwrap();
            serde_json::to_value(json).unwrap()
        });
        let body = response.text().await.unwrap();
        Answer {
            status,
            settlement,
            required,
            body,
        }
    }
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    settlement: Option<SettleResponse>,
    required: Option<Value>,
    body: String,
}

impl Answer {
    fn extra(&self) -> &serde_json::Map<String, Value> {
        self.settlement
            .as_ref()
            .and_then(|settlement| settlement.extra.as_ref())
            .unwrap_or_else(|| panic!("no PAYMENT-RESPONSE extra: {self:?}"))
    }

    fn error(&self) -> String {
        let body: Value = serde_json::from_str(&self.body).unwrap_or(Value::Null);
        body["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// A buyer with one channel to the server.
struct Buyer {
    wallet: SandboxWallet,
    config: ChannelConfig,
    id: String,
}

impl Buyer {
    fn new(server: &Server) -> Self {
        let wallet = SandboxWallet::random();
        let config = wallet
            .channel_config(&server.accept, rand::random())
            .unwrap();
        let id = SandboxWallet::channel_id(&config, &server.accept.network).unwrap();
        let config = serde_json::from_value(serde_json::to_value(config).unwrap()).unwrap();
        Self { wallet, config, id }
    }

    fn sandbox_config(&self) -> tower_x402_sandbox::batch::ChannelConfig {
        serde_json::from_value(serde_json::to_value(&self.config).unwrap()).unwrap()
    }

    fn deposit(&self, server: &Server, charged: u128) -> PaymentPayload {
        self.wallet
            .deposit_payment_at(
                &server.accept,
                &self.sandbox_config(),
                DEPOSIT,
                charged + AMOUNT,
                server.sandbox.now(),
            )
            .unwrap()
    }

    fn voucher(&self, server: &Server, ceiling: u128) -> PaymentPayload {
        self.wallet
            .voucher_payment(&server.accept, &self.sandbox_config(), ceiling)
            .unwrap()
    }
}

#[tokio::test]
async fn twenty_vouchers_after_one_deposit_cost_one_facilitator_settle() {
    let server = Server::start().await;
    let buyer = Buyer::new(&server);
    let first = server
        .get("/rows?count=2", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let settlement = first.settlement.as_ref().unwrap();
    assert!(
        !settlement.transaction.is_empty(),
        "the deposit's transaction"
    );
    assert_eq!(settlement.amount, Some(AtomicAmount(DEPOSIT)));
    assert_eq!(first.extra()["chargedAmount"], "2000");
    assert_eq!(
        first.extra()["channelState"]["chargedCumulativeAmount"],
        "2000"
    );
    assert_eq!(
        first.extra()["channelState"]["balance"],
        DEPOSIT.to_string()
    );
    let (verifies, settles) = (server.sandbox.verify_calls(), server.sandbox.settle_calls());
    assert_eq!((verifies, settles), (1, 1));

    let mut charged = 2_000;
    for request in 0..20u128 {
        let count = request % 10 + 1;
        let answer = server
            .get(
                &format!("/rows?count={count}"),
                &buyer.voucher(&server, charged + AMOUNT),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        let settlement = answer.settlement.as_ref().unwrap();
        assert_eq!(
            settlement.transaction, "",
            "a voucher moves nothing on chain"
        );
        assert_eq!(settlement.amount, None);
        charged += count * ROW;
        assert_eq!(answer.extra()["chargedAmount"], (count * ROW).to_string());
        assert_eq!(
            answer.extra()["channelState"]["chargedCumulativeAmount"],
            charged.to_string()
        );
        assert_eq!(answer.body, format!("{count} rows"));
    }
    assert_eq!(
        (server.sandbox.verify_calls(), server.sandbox.settle_calls()),
        (1, 1),
        "every voucher verified locally and committed without the facilitator"
    );
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, charged);
    assert_eq!(
        channel.voucher.unwrap().max_claimable,
        charged - 10 * ROW + AMOUNT
    );
    assert_eq!(channel.hold, None);
}

#[tokio::test]
async fn forged_vouchers_are_refused_and_change_nothing() {
    let server = Server::start().await;
    let buyer = Buyer::new(&server);
    let first = server
        .get("/rows?count=1", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let charged = 1_000;

    // Another key signs the channel's voucher.
    let thief = SandboxWallet::random();
    let forged = thief
        .voucher_payment(&server.accept, &buyer.sandbox_config(), charged + AMOUNT)
        .unwrap();
    let answer = server.get("/rows?count=1", &forged).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        answer.error(),
        "invalid_batch_settlement_evm_voucher_signature"
    );

    // A ceiling above charged + amount.
    let greedy = buyer.voucher(&server, charged + AMOUNT + 1);
    let answer = server.get("/rows?count=1", &greedy).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        answer.error(),
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );

    // A tampered configuration (another payer authorizer) under the channel's id.
    let mut tampered = buyer.voucher(&server, charged + AMOUNT);
    let mut payload: Value = serde_json::from_str(tampered.payload.get()).unwrap();
    payload["channelConfig"]["payerAuthorizer"] = thief.address().into();
    tampered.payload = serde_json::value::to_raw_value(&payload).unwrap();
    let answer = server.get("/rows?count=1", &tampered).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        answer.error(),
        "invalid_batch_settlement_evm_channel_id_mismatch"
    );

    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (charged, None));
    // The honest voucher still pays.
    let answer = server
        .get("/rows?count=3", &buyer.voucher(&server, charged + AMOUNT))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(server.sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn a_replayed_voucher_is_answered_with_the_corrective_402() {
    let server = Server::start().await;
    let buyer = Buyer::new(&server);
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let voucher = buyer.voucher(&server, 1_000 + AMOUNT);
    let paid = server.get("/rows?count=4", &voucher).await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");

    let replay = server.get("/rows?count=4", &voucher).await;
    assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED, "{replay:?}");
    assert_eq!(
        replay.error(),
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );
    let required = replay.required.as_ref().unwrap();
    let extra = &required["accepts"][0]["extra"];
    assert_eq!(
        extra["channelState"]["channelId"],
        buyer.id.to_ascii_lowercase()
    );
    assert_eq!(extra["channelState"]["chargedCumulativeAmount"], "5000");
    assert_eq!(
        extra["voucherState"]["signedMaxClaimable"],
        (1_000 + AMOUNT).to_string()
    );
    let signature: Value = serde_json::from_str(voucher.payload.get()).unwrap();
    assert_eq!(
        extra["voucherState"]["signature"],
        signature["voucher"]["signature"]
    );
    assert_eq!(
        extra["receiverAuthorizer"],
        server.accept.extra.as_ref().unwrap()["receiverAuthorizer"]
    );

    // Re-synced on the corrective state, the buyer pays again.
    let answer = server
        .get("/rows?count=1", &buyer.voucher(&server, 5_000 + AMOUNT))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 6_000);
}

#[tokio::test]
async fn a_failing_handler_changes_nothing() {
    let server = Server::start().await;
    let buyer = Buyer::new(&server);
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let before = server.channels.load(&buyer.id).await.unwrap().unwrap();
    let voucher = buyer.voucher(&server, 1_000 + AMOUNT);
    let failed = server.get("/broken", &voucher).await;
    assert_eq!(
        failed.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{failed:?}"
    );
    assert!(failed.settlement.is_none());
    let after = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(
        (after.charged, &after.voucher, &after.hold),
        (before.charged, &before.voucher, &None)
    );
    // The same voucher pays for a request that succeeds.
    let answer = server.get("/rows?count=2", &voucher).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        server
            .channels
            .load(&buyer.id)
            .await
            .unwrap()
            .unwrap()
            .charged,
        3_000
    );
}

#[tokio::test]
async fn concurrent_requests_on_one_channel_are_never_accepted_on_one_base() {
    let server = Arc::new(Server::start().await);
    let buyer = Arc::new(Buyer::new(&server));
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let requests: Vec<_> = (0..12)
        .map(|_| {
            let (server, buyer) = (Arc::clone(&server), Arc::clone(&buyer));
            tokio::spawn(async move {
                server
                    .get("/rows?count=5", &buyer.voucher(&server, 1_000 + AMOUNT))
                    .await
            })
        })
        .collect();
    let mut served = 0;
    for request in requests {
        let answer = request.await.unwrap();
        match answer.status {
            StatusCode::OK => served += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(answer.error(), "invalid_batch_settlement_evm_channel_busy")
            }
            StatusCode::PAYMENT_REQUIRED => assert_eq!(
                answer.error(),
                "invalid_batch_settlement_evm_cumulative_amount_mismatch"
            ),
            other => panic!("{other}: {answer:?}"),
        }
    }
    assert_eq!(served, 1, "one request per cumulative base");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (6_000, None));
}
