//! Sign-in-with-x through the layer: the challenge in every 402, a buyer signing in with real
//! keys (secp256k1, EIP-1271 contract wallets over JSON-RPC on loopback, ed25519) and being
//! served without payment, and every kind of proof the layer must refuse.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_x402::payment::Payments;
use tower_x402::settlement::StoreError;
use tower_x402::{BoxFuture, Offer, SettlementMode, X402Layer};
use tower_x402_sandbox::siwx::{encode, proof_fields};
use tower_x402_sandbox::{SandboxFacilitator, SandboxSolanaWallet, SandboxWallet};
use tower_x402_siwx::{EntitlementStore, MemoryEntitlementStore, SignInWithX, SignedIn};
use x402_wire::{Network, PaymentRequired, ResourceInfo, UsdcDeployment, header};

const ORIGIN: &str = "https://shop.example";
const SECRET: &[u8] = b"the secret every instance shares";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const SOLANA_PAY_TO: &str = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM";

fn offer(name: &str, solana: bool) -> Arc<Offer> {
    let mut builder = Offer::builder(ResourceInfo::new(format!("{ORIGIN}/{name}")))
        .usdc(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .settlement(SettlementMode::Before);
    if solana {
        builder = builder.usdc(
            &UsdcDeployment::SOLANA,
            "0.50".parse().unwrap(),
            SOLANA_PAY_TO,
        );
    }
    Arc::new(builder.build().unwrap())
}

async fn who(signed_in: Option<SignedIn>) -> String {
    match signed_in {
        Some(signed_in) => {
            json!({"signedIn": signed_in.address(), "resource": signed_in.resource()})
        }
        None => json!({"signedIn": null}),
    }
    .to_string()
}

fn app(facilitator: &SandboxFacilitator, siwx: SignInWithX) -> Router {
    let (a, b) = (offer("a", true), offer("b", false));
    Router::new()
        .route(
            "/a",
            get(who).layer(X402Layer::with_payments(
                Payments::new(facilitator.clone()).hook(siwx.clone()),
                a,
            )),
        )
        .route(
            "/b",
            get(who).layer(X402Layer::with_payments(
                Payments::new(facilitator.clone()).hook(siwx),
                b,
            )),
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

/// A 402's challenge and its sign-in extension.
async fn challenge(app: &Router, path: &str) -> (PaymentRequired, Value) {
    let response = send(app, path, &[]).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap();
    let body = json_body(response).await;
    let extension = required.extensions.as_ref().unwrap()["sign-in-with-x"].clone();
    assert_eq!(
        body["extensions"]["sign-in-with-x"], extension,
        "header and body agree"
    );
    (required, extension)
}

async fn buy(app: &Router, path: &str, wallet: &SandboxWallet) {
    let (required, _) = challenge(app, path).await;
    let payment = header::encode(&wallet.pay(&required).unwrap()).unwrap();
    let response = send(
        app,
        path,
        &[("payment-signature", payment.to_str().unwrap())],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// The `error` of a refusal, which must be a 402 carrying a fresh sign-in challenge.
async fn refused(response: Response<Body>) -> String {
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap();
    assert!(required.extensions.unwrap().contains_key("sign-in-with-x"));
    json_body(response).await["error"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The two routes with the default sign-in, and a buyer who has bought `/a`.
async fn a_buyer_of_a() -> (SandboxFacilitator, Router, SandboxWallet) {
    let facilitator = SandboxFacilitator::new();
    let app = app(&facilitator, siwx());
    let buyer = SandboxWallet::random();
    buy(&app, "/a", &buyer).await;
    (facilitator, app, buyer)
}

/// `wallet`'s proof for a fresh challenge of `path`.
async fn fresh_proof(app: &Router, path: &str, wallet: &SandboxWallet) -> String {
    let (_, extension) = challenge(app, path).await;
    wallet.sign_in(&extension).unwrap()
}

/// The `error` of the refusal of `proof` sent to `path`.
async fn refused_proof(app: &Router, path: &str, proof: &str) -> String {
    refused(send(app, path, &[("sign-in-with-x", proof)]).await).await
}

/// The status of a request to `path` carrying `proof`.
async fn signs_in(app: &Router, path: &str, proof: &str) -> StatusCode {
    send(app, path, &[("sign-in-with-x", proof)]).await.status()
}

fn siwx() -> SignInWithX {
    SignInWithX::new(ORIGIN, SECRET).unwrap()
}

#[tokio::test]
async fn the_challenge_is_bound_to_the_configured_origin_and_the_route() {
    let facilitator = SandboxFacilitator::new();
    let app = app(
        &facilitator,
        siwx().statement("Sign in to get what you bought"),
    );
    let (_, extension) = challenge(&app, "/a?format=pdf").await;
    let info = &extension["info"];
    assert_eq!(info["domain"], "shop.example");
    // The path, without the query: the size of a 402 is not the client's to choose.
    assert_eq!(info["uri"], "https://shop.example/a");
    assert_eq!(info["version"], "1");
    assert_eq!(info["statement"], "Sign in to get what you bought");
    assert!(info.get("resources").is_none(), "the URI is not repeated");
    assert_eq!(info["nonce"].as_str().unwrap().len(), 40);
    assert!(info["issuedAt"].as_str().unwrap().ends_with('Z'));
    assert!(info["expirationTime"].as_str().unwrap() > info["issuedAt"].as_str().unwrap());
    assert_eq!(
        extension["supportedChains"],
        json!([
            {"chainId": "eip155:8453", "type": "eip191"},
            {"chainId": UsdcDeployment::SOLANA.network.to_string(), "type": "ed25519"}
        ])
    );
    assert!(
        extension["schema"]["required"]
            .as_array()
            .unwrap()
            .contains(&json!("nonce"))
    );
    // A Host header never moves the origin.
    let response = app
        .clone()
        .oneshot(
            Request::get("/a")
                .header("host", "evil.example")
                .header("x-forwarded-host", "evil.example")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let required: PaymentRequired =
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap();
    assert_eq!(
        required.extensions.unwrap()["sign-in-with-x"]["info"]["domain"],
        "shop.example"
    );
    // Each 402 has its own nonce.
    let (_, again) = challenge(&app, "/a?format=pdf").await;
    assert_ne!(again["info"]["nonce"], info["nonce"]);
}

/// Every 402 after the first is spliced into the challenge prebuilt with the sign-in
/// template: each must still be one valid x402 v2 challenge, its header the base64 of its body,
/// with a nonce of its own that signs in once.
#[tokio::test]
async fn two_spliced_402s_decode_and_carry_nonces_of_their_own_each_good_once() {
    use base64::Engine as _;
    let (_facilitator, app, buyer) = a_buyer_of_a().await;
    let mut nonces = Vec::new();
    let mut proofs = Vec::new();
    for _ in 0..2 {
        let response = send(&app, "/a", &[]).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        let encoded = response.headers()["payment-required"].as_bytes().to_vec();
        let required: PaymentRequired = header::decode(&encoded).unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(&encoded)
            .unwrap();
        assert_eq!(decoded, body.to_vec(), "the header is the body's base64");
        let from_body: PaymentRequired = serde_json::from_slice(&body).unwrap();
        assert_eq!(from_body, required);
        assert_eq!(
            required.error.as_deref(),
            Some("PAYMENT-SIGNATURE header is required")
        );
        let extension = required.extensions.as_ref().unwrap()["sign-in-with-x"].clone();
        nonces.push(extension["info"]["nonce"].as_str().unwrap().to_owned());
        proofs.push(buyer.sign_in(&extension).unwrap());
    }
    assert_ne!(nonces[0], nonces[1], "each 402 has a nonce of its own");
    // Both nonces were issued by this server: each proof signs in, once.
    for proof in &proofs {
        assert_eq!(signs_in(&app, "/a", proof).await, StatusCode::OK);
    }
    for proof in &proofs {
        let error = refused_proof(&app, "/a", proof).await;
        assert!(error.starts_with("invalid_siwx_nonce_used"), "{error}");
    }
}

#[tokio::test]
async fn a_buyer_signs_in_without_paying_and_each_proof_works_once() {
    let (facilitator, app, buyer) = a_buyer_of_a().await;
    let settled = facilitator.settlements().len();
    let balance = facilitator.balance_of(&buyer.address());

    let proof = fresh_proof(&app, "/a", &buyer).await;
    let response = send(&app, "/a", &[("sign-in-with-x", &proof)]).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = json_body(response).await;
    assert_eq!(body["signedIn"], buyer.address());
    assert_eq!(body["resource"], "https://shop.example/a");
    assert_eq!(
        facilitator.settlements().len(),
        settled,
        "nothing settled again"
    );
    assert_eq!(facilitator.balance_of(&buyer.address()), balance);

    // The same proof again: refused, on this or any instance sharing the store.
    let error = refused_proof(&app, "/a", &proof).await;
    assert!(error.starts_with("invalid_siwx_nonce_used"), "{error}");

    // A fresh proof works again.
    let proof = fresh_proof(&app, "/a", &buyer).await;
    assert_eq!(signs_in(&app, "/a", &proof).await, StatusCode::OK);
}

#[tokio::test]
async fn a_valid_proof_beats_a_payment_and_a_failed_one_lets_the_payment_through() {
    let (facilitator, app, buyer) = a_buyer_of_a().await;
    let settled = facilitator.settlements().len();

    let (required, extension) = challenge(&app, "/a").await;
    let proof = buyer.sign_in(&extension).unwrap();
    let payment = header::encode(&buyer.pay(&required).unwrap()).unwrap();
    let payment = payment.to_str().unwrap();
    let proof_and_payment = [
        ("sign-in-with-x", proof.as_str()),
        ("payment-signature", payment),
    ];
    let response = send(&app, "/a", &proof_and_payment).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        !response.headers().contains_key("payment-response"),
        "not paid"
    );
    assert_eq!(facilitator.settlements().len(), settled);

    // The same proof is now used: the payment it came with is processed instead.
    let response = send(&app, "/a", &proof_and_payment).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("payment-response"), "paid");
    assert_eq!(facilitator.settlements().len(), settled + 1);
}

/// How a refused proof is broken.
#[derive(Clone, Copy)]
enum Broken {
    /// Another wallet's proof, validly signed.
    AnotherWallet,
    /// The buyer's proof with one field replaced, re-signed by the buyer.
    Field(&'static str, &'static str),
    /// The buyer's proof signed by another key than the address's.
    AnotherKey,
    /// A header that is no proof at all.
    Header(&'static str),
}

/// A `sign-in-with-x` header for `path`, broken as `broken` says.
async fn broken_proof(app: &Router, path: &str, buyer: &SandboxWallet, broken: Broken) -> String {
    if let Broken::Header(header) = broken {
        return header.to_owned();
    }
    let (_, extension) = challenge(app, path).await;
    let mut fields = proof_fields(&extension, "eip155:", &buyer.address()).unwrap();
    match broken {
        Broken::AnotherWallet => return SandboxWallet::random().sign_in(&extension).unwrap(),
        Broken::Field(name, value) => {
            fields.insert(name.into(), value.into());
            buyer.sign_proof(&mut fields).unwrap();
        }
        Broken::AnotherKey => SandboxWallet::random().sign_proof(&mut fields).unwrap(),
        Broken::Header(_) => unreachable!("a broken header needs no challenge"),
    }
    encode(&fields)
}

#[tokio::test]
async fn proofs_the_layer_must_refuse() {
    let (_, app, buyer) = a_buyer_of_a().await;

    let cases = [
        (
            "another wallet, validly signed: not entitled",
            Broken::AnotherWallet,
            "invalid_siwx_not_entitled",
        ),
        (
            "a nonce this server did not issue, validly signed",
            Broken::Field("nonce", "0123456789abcdef0123456789abcdef01234567"),
            "invalid_siwx_nonce:",
        ),
        (
            "issued in the future",
            Broken::Field("issuedAt", "2099-01-01T00:00:00.000Z"),
            "invalid_siwx_issued_at_in_future",
        ),
        (
            "issued long ago",
            Broken::Field("issuedAt", "2020-01-01T00:00:00.000Z"),
            "invalid_siwx_issued_at_too_old",
        ),
        (
            "signed by another key than the address's",
            Broken::AnotherKey,
            "invalid_siwx_signature",
        ),
        (
            "another domain",
            Broken::Field("domain", "evil.example"),
            "invalid_siwx_domain_mismatch",
        ),
        (
            "not base64 JSON",
            Broken::Header("not a proof"),
            "invalid_siwx_header",
        ),
        (
            "a chain the route does not take",
            Broken::Field("chainId", "eip155:1"),
            "invalid_siwx_unsupported_chain",
        ),
    ];
    for (case, broken, code) in cases {
        let proof = broken_proof(&app, "/a", &buyer, broken).await;
        let error = refused_proof(&app, "/a", &proof).await;
        assert!(
            error.starts_with(code),
            "{case}: expected {code}, got {error}"
        );
    }

    // And the buyer's own valid proof still works: none of the above consumed anything.
    let proof = fresh_proof(&app, "/a", &buyer).await;
    assert_eq!(signs_in(&app, "/a", &proof).await, StatusCode::OK);
}

#[tokio::test]
async fn a_proof_for_one_resource_never_unlocks_another() {
    let (_, app, buyer) = a_buyer_of_a().await;

    // Bought A; B's challenge signed: not entitled to B.
    let proof = fresh_proof(&app, "/b", &buyer).await;
    let error = refused_proof(&app, "/b", &proof).await;
    assert!(error.starts_with("invalid_siwx_not_entitled"), "{error}");

    // A's proof sent to B: refused (its URI is A's).
    let proof = fresh_proof(&app, "/a", &buyer).await;
    let error = refused_proof(&app, "/b", &proof).await;
    assert!(error.starts_with("invalid_siwx_uri_mismatch"), "{error}");

    // A's nonce with B's URI, re-signed: the nonce is bound to A.
    let (_, extension) = challenge(&app, "/a").await;
    let mut fields = proof_fields(&extension, "eip155:", &buyer.address()).unwrap();
    fields.insert("uri".into(), "https://shop.example/b".into());
    fields.insert("resources".into(), json!(["https://shop.example/b"]));
    buyer.sign_proof(&mut fields).unwrap();
    let error = refused_proof(&app, "/b", &encode(&fields)).await;
    assert!(error.starts_with("invalid_siwx_nonce:"), "{error}");

    // A's proof still works on A.
    assert_eq!(signs_in(&app, "/a", &proof).await, StatusCode::OK);
}

#[tokio::test]
async fn proofs_and_entitlements_lapse() {
    let facilitator = SandboxFacilitator::new();
    let store = MemoryEntitlementStore::default();
    let app = app(
        &facilitator,
        siwx()
            .proof_lifetime(Duration::from_secs(1))
            .entitlement_store(store.clone())
            .entitlement_lifetime(Some(Duration::from_secs(3600))),
    );
    let buyer = SandboxWallet::random();
    buy(&app, "/a", &buyer).await;

    // A challenge answered too late.
    let proof = fresh_proof(&app, "/a", &buyer).await;
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let error = refused_proof(&app, "/a", &proof).await;
    assert!(
        error.starts_with("invalid_siwx_issued_at_too_old"),
        "{error}"
    );

    // A purchase older than the entitlement lifetime.
    let stale = SandboxWallet::random();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    store
        .record_purchase(
            "https://shop.example/a",
            &stale.address().to_lowercase(),
            now - 3_700,
        )
        .await
        .unwrap();
    let proof = fresh_proof(&app, "/a", &stale).await;
    let error = refused_proof(&app, "/a", &proof).await;
    assert!(
        error.starts_with("invalid_siwx_entitlement_lapsed"),
        "{error}"
    );
}

#[tokio::test]
async fn smart_contract_wallets_sign_in_through_the_json_rpc_endpoint_only() {
    let facilitator = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rpc = format!("http://{}", listener.local_addr().unwrap());
    let chain = facilitator.rpc_router(Network::BASE);
    tokio::spawn(async move { axum::serve(listener, chain).await });

    let owner = SandboxWallet::random();
    let wallet = facilitator
        .deploy_contract_wallet(&owner.address())
        .unwrap();
    let store = MemoryEntitlementStore::default();
    store
        .record_purchase("https://shop.example/a", &wallet.to_lowercase(), now())
        .await
        .unwrap();

    let sign = |extension: &Value, signer: &SandboxWallet| {
        let mut fields = proof_fields(extension, "eip155:", &wallet).unwrap();
        signer.sign_proof(&mut fields).unwrap();
        encode(&fields)
    };

    // Without an endpoint: refused.
    let without = app(&facilitator, siwx().entitlement_store(store.clone()));
    let (_, extension) = challenge(&without, "/a").await;
    let error = refused_proof(&without, "/a", &sign(&extension, &owner)).await;
    assert!(error.starts_with("invalid_siwx_signature"), "{error}");

    // With one: the contract accepts its owner's signature...
    let with = app(
        &facilitator,
        siwx()
            .entitlement_store(store.clone())
            .evm_rpc(&rpc)
            .unwrap(),
    );
    let (_, extension) = challenge(&with, "/a").await;
    let response = send(
        &with,
        "/a",
        &[("sign-in-with-x", &sign(&extension, &owner))],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json_body(response).await["signedIn"], wallet);

    // ...and refuses anyone else's.
    let (_, extension) = challenge(&with, "/a").await;
    let proof = sign(&extension, &SandboxWallet::random());
    let error = refused_proof(&with, "/a", &proof).await;
    assert!(error.starts_with("invalid_siwx_signature"), "{error}");

    // An endpoint that cannot be reached: the verifier's error, refused.
    let unreachable = app(
        &facilitator,
        siwx()
            .entitlement_store(store)
            .evm_rpc("http://127.0.0.1:9")
            .unwrap(),
    );
    let (_, extension) = challenge(&unreachable, "/a").await;
    let error = refused_proof(&unreachable, "/a", &sign(&extension, &owner)).await;
    assert!(error.starts_with("invalid_siwx_verifier_error"), "{error}");
}

#[tokio::test]
async fn a_solana_signer_signs_in_with_ed25519() {
    let facilitator = SandboxFacilitator::new();
    let store = MemoryEntitlementStore::default();
    let app = app(&facilitator, siwx().entitlement_store(store.clone()));
    let buyer = SandboxSolanaWallet::random();
    // Solana payments are not settled by the sandbox: the purchase is recorded as the layer
    // records a settled one (base58 kept as is).
    store
        .record_purchase("https://shop.example/a", &buyer.address(), now())
        .await
        .unwrap();

    let (_, extension) = challenge(&app, "/a").await;
    let proof = buyer.sign_in(&extension).unwrap();
    let response = send(&app, "/a", &[("sign-in-with-x", &proof)]).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(json_body(response).await["signedIn"], buyer.address());

    // Another Solana key: not entitled; the buyer's address with another key's signature:
    // refused.
    let (_, extension) = challenge(&app, "/a").await;
    let stranger = SandboxSolanaWallet::random().sign_in(&extension).unwrap();
    let error = refused_proof(&app, "/a", &stranger).await;
    assert!(error.starts_with("invalid_siwx_not_entitled"), "{error}");
    let mut forged: serde_json::Map<String, Value> = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &stranger).unwrap(),
    )
    .unwrap();
    forged.insert("address".into(), buyer.address().into());
    let error = refused_proof(&app, "/a", &encode(&forged)).await;
    assert!(error.starts_with("invalid_siwx_signature"), "{error}");

    // Route B has no Solana accept: no Solana sign-in there.
    let (_, extension) = challenge(&app, "/b").await;
    assert!(buyer.sign_in(&extension).is_err());
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An entitlement store whose database is away: every call fails.
#[derive(Clone, Default)]
struct Away {
    calls: Arc<Mutex<u32>>,
}

impl EntitlementStore for Away {
    fn record_purchase<'a>(
        &'a self,
        _resource: &'a str,
        _address: &'a str,
        _at: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        *self.calls.lock().unwrap() += 1;
        Box::pin(async { Err(StoreError("the database is away".into())) })
    }

    fn last_purchase<'a>(
        &'a self,
        _resource: &'a str,
        _address: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        *self.calls.lock().unwrap() += 1;
        Box::pin(async { Err(StoreError("the database is away".into())) })
    }

    fn consume_nonce<'a>(
        &'a self,
        _nonce: &'a str,
        _expires: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        *self.calls.lock().unwrap() += 1;
        Box::pin(async { Err(StoreError("the database is away".into())) })
    }
}

#[tokio::test]
async fn a_sign_in_while_the_entitlement_store_is_away_is_a_503_never_a_402() {
    let facilitator = SandboxFacilitator::new();
    let away = Away::default();
    let siwx = SignInWithX::new(ORIGIN, SECRET)
        .unwrap()
        .entitlement_store(away.clone());
    let offer = offer("report", false);
    let app = Router::new().route(
        "/report",
        get(who).layer(X402Layer::with_payments(
            Payments::new(facilitator.clone()).hook(siwx),
            offer,
        )),
    );
    let wallet = SandboxWallet::random();
    let settled = facilitator.settlements().len();

    let (_, extension) = challenge(&app, "/report").await;
    let proof = wallet.sign_in(&extension).unwrap();
    let answer = send(&app, "/report", &[("sign-in-with-x", &proof)]).await;
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.headers().contains_key("retry-after"));
    assert!(
        !answer.headers().contains_key("payment-required"),
        "no challenge to pay"
    );
    assert_eq!(answer.headers()["content-type"], "application/json");
    let error = json_body(answer).await["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.starts_with("siwx_store_unavailable"), "{error}");
    assert!(*away.calls.lock().unwrap() > 0, "the store was asked");
    assert_eq!(facilitator.settlements().len(), settled, "nothing paid");
}

#[tokio::test]
async fn a_huge_query_does_not_grow_the_sign_in_challenge() {
    let facilitator = SandboxFacilitator::new();
    let siwx = SignInWithX::new(ORIGIN, SECRET).unwrap();
    let offer = offer("report", false);
    let app = Router::new().route(
        "/report",
        get(who).layer(X402Layer::with_payments(
            Payments::new(facilitator.clone()).hook(siwx),
            offer,
        )),
    );
    let plain = send(&app, "/report", &[]).await;
    let plain_len = plain.headers()["payment-required"].len();
    let path = format!("/report?q={}", "x".repeat(30 * 1024));
    let (_, extension) = challenge(&app, &path).await;
    assert_eq!(extension["info"]["uri"], format!("{ORIGIN}/report"));
    let queried = send(&app, &path, &[]).await;
    let queried_len = queried.headers()["payment-required"].len();
    assert_eq!(queried_len, plain_len, "the query adds nothing");
    let body = queried.into_body().collect().await.unwrap().to_bytes();
    assert!(body.len() < 2048, "{} bytes of body", body.len());

    // And the proof for the path signs in whatever the query.
    let wallet = SandboxWallet::random();
    buy(&app, "/report?a=1", &wallet).await;
    let (_, extension) = challenge(&app, "/report?a=1").await;
    let proof = wallet.sign_in(&extension).unwrap();
    assert_eq!(
        send(&app, "/report?b=2", &[("sign-in-with-x", &proof)])
            .await
            .status(),
        StatusCode::OK
    );
}
