//! Sign-in-with-x over real HTTP: the store's server on a loopback port and a real HTTP client,
//! from the purchase (the wallet signs the 402's accept) to signing in on one server or on
//! another sharing the PostgreSQL database, and every refusal as the client sees it.

use axum::http::StatusCode;
use serde_json::json;
use tower_x402_sandbox::SandboxWallet;
use tower_x402_sandbox::siwx::{encode, proof_fields};
use x402_store::serve::{ServeLimits, serve};
use x402_wire::{PAYMENT_REQUIRED, PaymentRequired, header};

use super::support::{
    Answer, Backend, RECEIPT, Shop, TAX, assert_sign_in_refused, passport_of, read_response,
    run_on, sign_in_challenge,
};

/// Copies of one proof sent at once.
const COPIES: usize = 12;

/// A store served on a loopback port, with a client for it.
struct Served {
    shop: Shop,
    base: String,
    client: reqwest::Client,
}

impl Served {
    /// Serves `shop`'s app with the store's server until the test ends.
    async fn start(shop: Shop) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = shop.app.clone();
        tokio::spawn(serve(
            listener,
            app,
            ServeLimits::default(),
            std::future::pending(),
        ));
        Self {
            shop,
            base,
            client: reqwest::Client::new(),
        }
    }

    /// `GET /api/x402/{slug}` with `headers`, over the wire.
    async fn get(&self, slug: &str, headers: &[(&str, &str)]) -> Answer {
        let mut request = self.client.get(format!("{}/api/x402/{slug}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        read_response(request.send().await.unwrap()).await
    }

    /// The sign-in challenge of `slug`'s 402.
    async fn challenge(&self, slug: &str) -> serde_json::Value {
        sign_in_challenge(&self.get(slug, &[]).await)
    }

    async fn sign_in(&self, slug: &str, proof: &str) -> Answer {
        self.get(slug, &[("sign-in-with-x", proof)]).await
    }

    /// Pays for `slug` from `wallet`: the wallet signs the 402's accept; expects a 200.
    async fn buy(&self, wallet: &SandboxWallet, slug: &str) -> Answer {
        let offer = self.get(slug, &[]).await;
        assert_eq!(offer.status, StatusCode::PAYMENT_REQUIRED, "{}", offer.text);
        let required: PaymentRequired =
            header::decode(offer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap();
        let payment = header::encode(&wallet.pay(&required).unwrap()).unwrap();
        let bought = self
            .get(slug, &[("payment-signature", payment.to_str().unwrap())])
            .await;
        assert_eq!(bought.status, StatusCode::OK, "{}", bought.text);
        bought
    }

    async fn orders(&self) -> u64 {
        self.shop.state.store.row_counts().await.unwrap()["orders"]
    }
}

async fn a_buyer_signs_in_over_http() {
    let served = Served::start(Shop::open(false).await).await;
    let buyer = SandboxWallet::random();
    let bought = served.buy(&buyer, RECEIPT).await;
    let settlements = served.shop.facilitator.settlement_count();
    let orders = served.orders().await;

    let proof = buyer.sign_in(&served.challenge(RECEIPT).await).unwrap();
    let again = served.sign_in(RECEIPT, &proof).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(passport_of(&again), passport_of(&bought));
    assert_eq!(again.json["fulfillment"], bought.json["fulfillment"]);
    assert!(again.header("payment-response").is_none(), "nothing paid");
    assert_eq!(
        served.shop.facilitator.settlement_count(),
        settlements,
        "no new settlement"
    );
    assert_eq!(served.orders().await, orders, "no new order");

    assert_sign_in_refused(
        &served.sign_in(RECEIPT, &proof).await,
        "invalid_siwx_nonce_used",
    );
}

async fn proofs_refused_over_http() {
    let served = Served::start(Shop::open(false).await).await;
    let buyer = SandboxWallet::random();
    served.buy(&buyer, RECEIPT).await;
    let orders = served.orders().await;

    let stranger = SandboxWallet::random()
        .sign_in(&served.challenge(RECEIPT).await)
        .unwrap();
    assert_sign_in_refused(
        &served.sign_in(RECEIPT, &stranger).await,
        "invalid_siwx_not_entitled",
    );

    // A valid signature over a nonce this server did not issue.
    let mut fields = proof_fields(
        &served.challenge(RECEIPT).await,
        "eip155:",
        &buyer.address(),
    )
    .unwrap();
    fields.insert("nonce".into(), "9f".repeat(20).into());
    buyer.sign_proof(&mut fields).unwrap();
    assert_sign_in_refused(
        &served.sign_in(RECEIPT, &encode(&fields)).await,
        "invalid_siwx_nonce",
    );

    for (issued, code) in [
        ("2020-01-01T00:00:00.000Z", "invalid_siwx_issued_at_too_old"),
        (
            "2099-01-01T00:00:00.000Z",
            "invalid_siwx_issued_at_in_future",
        ),
    ] {
        let mut fields = proof_fields(
            &served.challenge(RECEIPT).await,
            "eip155:",
            &buyer.address(),
        )
        .unwrap();
        fields.insert("issuedAt".into(), issued.into());
        buyer.sign_proof(&mut fields).unwrap();
        assert_sign_in_refused(&served.sign_in(RECEIPT, &encode(&fields)).await, code);
    }

    // SKU A's proof on SKU B: as sent, and re-signed for B's URI over A's nonce.
    let proof = buyer.sign_in(&served.challenge(RECEIPT).await).unwrap();
    assert_sign_in_refused(
        &served.sign_in(TAX, &proof).await,
        "invalid_siwx_uri_mismatch",
    );
    let mut fields = proof_fields(
        &served.challenge(RECEIPT).await,
        "eip155:",
        &buyer.address(),
    )
    .unwrap();
    let uri = format!("http://127.0.0.1:4020/api/x402/{TAX}");
    fields.insert("uri".into(), uri.clone().into());
    fields.insert("resources".into(), json!([uri]));
    buyer.sign_proof(&mut fields).unwrap();
    assert_sign_in_refused(
        &served.sign_in(TAX, &encode(&fields)).await,
        "invalid_siwx_nonce",
    );

    assert_eq!(served.orders().await, orders, "no refusal made an order");
    // None of this used up the buyer's proof for A.
    let answer = served.sign_in(RECEIPT, &proof).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
}

/// One proof sent on several connections at once is served once: the nonce is consumed by one
/// atomic insert, and every other copy is refused as used.
async fn one_proof_sent_at_once_is_served_once() {
    let served = Served::start(Shop::open(false).await).await;
    let buyer = SandboxWallet::random();
    served.buy(&buyer, RECEIPT).await;
    let proof = buyer.sign_in(&served.challenge(RECEIPT).await).unwrap();

    let copies: Vec<_> = (0..COPIES)
        .map(|_| {
            // A client each, so each copy has its own connection.
            let request = reqwest::Client::new()
                .get(format!("{}/api/x402/{RECEIPT}", served.base))
                .header("sign-in-with-x", proof.clone());
            tokio::spawn(async move { read_response(request.send().await.unwrap()).await })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.unwrap());
    }
    let served_once = answers
        .iter()
        .filter(|answer| answer.status == StatusCode::OK)
        .count();
    assert_eq!(served_once, 1, "{answers:#?}");
    for refused in answers
        .iter()
        .filter(|answer| answer.status != StatusCode::OK)
    {
        assert_sign_in_refused(refused, "invalid_siwx_nonce_used");
    }
}

super::support::on_both_backends!(
    a_buyer_signs_in_over_http,
    proofs_refused_over_http,
    one_proof_sent_at_once_is_served_once,
);

/// Two servers on one PostgreSQL database: bought on the first, signed in on the second; the
/// proof then used is refused by the first.
#[tokio::test]
async fn bought_on_one_server_signed_in_on_another() {
    run_on(Backend::Postgres, async {
        let first = Shop::open(false).await;
        let second = Served::start(first.sibling(|_| {}).await).await;
        let first = Served::start(first).await;
        let buyer = SandboxWallet::random();
        let bought = first.buy(&buyer, RECEIPT).await;
        let settlements = first.shop.facilitator.settlement_count();

        let proof = buyer.sign_in(&first.challenge(RECEIPT).await).unwrap();
        let answer = second.sign_in(RECEIPT, &proof).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        assert_eq!(passport_of(&answer), passport_of(&bought));
        assert_eq!(answer.json["fulfillment"], bought.json["fulfillment"]);
        assert_eq!(first.shop.facilitator.settlement_count(), settlements);
        assert_sign_in_refused(
            &first.sign_in(RECEIPT, &proof).await,
            "invalid_siwx_nonce_used",
        );
    })
    .await;
}
