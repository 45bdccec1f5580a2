//! The store behind a reverse proxy: every 402 fits the 4 KB a stock nginx reads of a response's
//! headers, and a real nginx (Debian's, with the configuration an operator writes first) in
//! front of the store's server passes a purchase and a sign-in end to end.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower_x402::pricing::header_budget::PROXY_HEADER_BUFFER;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_store::app::app;
use x402_store::serve::{ServeLimits, serve};
use x402_wire::{PAYMENT_REQUIRED, PaymentRequired, header};

use super::support::{
    Answer, RECEIPT, passport_of, read_response, sign_in_challenge, signature_header, store_with,
};

#[path = "../../../../tests/common/nginx.rs"]
mod nginx;

use nginx::{Nginx, free_port};

/// Serves `state`'s app with the store's server on a free loopback port until the test ends.
async fn serve_app(state: x402_store::state::AppState) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        app(state),
        ServeLimits::default(),
        std::future::pending(),
    ));
    address
}

/// The response head (status line, headers, the blank line) of `GET path` with `headers`, as
/// the bytes on the wire: what a reverse proxy must buffer whole.
async fn response_head(address: SocketAddr, path: &str, headers: &str) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            received.truncate(end + 4);
            return received;
        }
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "the connection closed inside the response head");
        received.extend_from_slice(&buffer[..read]);
    }
}

/// A public origin of 39 characters, longer than most a store is served at: every 402 names it
/// in the resource URL, the sign-in URI and domain.
const LONG_ORIGIN: &str = "https://x402-store.payments.example.com";

/// Every SKU's 402, by an agent, by a browser script (whose `Origin` adds the CORS headers) and
/// by a browser (the paywall page and its security headers), fits nginx's default
/// `proxy_buffer_size`: with the default settings (sign-in on, the `bazaar` extension on), and
/// with the largest challenge the settings make — `STORE_PERMIT2=1` in demo mode (the Permit2
/// accept and `eip2612GasSponsoring` beside the EIP-3009 accept, the Solana door the sandbox
/// opens) — at [`LONG_ORIGIN`].
#[tokio::test]
async fn every_402_fits_a_stock_nginx_header_buffer() {
    let store = store_with(|_| {}, Arc::new(SandboxFacilitator::new())).await;
    let address = serve_app(store.state.clone()).await;
    assert_every_402_fits(&store.state, address).await;

    let store = store_with(
        |config| {
            config.base_url = LONG_ORIGIN.to_owned();
            config.permit2 = true;
            config.open_demo_doors();
        },
        Arc::new(SandboxFacilitator::new()),
    )
    .await;
    let accepts = store
        .state
        .catalog
        .iter()
        .next()
        .unwrap()
        .offer
        .accepts()
        .len();
    assert_eq!(accepts, 3, "EIP-3009, Permit2 and Solana");
    let address = serve_app(store.state.clone()).await;
    assert_every_402_fits(&store.state, address).await;
}

/// The largest response head of every SKU's 402 served at `address`, by an agent, a browser
/// script and a browser, fits nginx's default `proxy_buffer_size`.
async fn assert_every_402_fits(state: &x402_store::state::AppState, address: SocketAddr) {
    let mut largest = (0, String::new());
    for sku in state.catalog.iter() {
        let path = format!("/api/x402/{}", sku.slug);
        for headers in [
            "",
            "Origin: https://buyer.example\r\n",
            // A browser: the paywall page, with its security headers.
            "Accept: text/html,application/xhtml+xml\r\nOrigin: https://buyer.example\r\n",
        ] {
            let head = response_head(address, &path, headers).await;
            let text = String::from_utf8_lossy(&head);
            assert!(text.starts_with("HTTP/1.1 402 "), "{text}");
            assert!(sign_in_in_challenge(&text), "sign-in and bazaar on: {text}");
            if head.len() > largest.0 {
                largest = (head.len(), format!("{path} {headers:?}"));
            }
        }
    }
    println!(
        "largest 402 response head over {} SKUs: {} bytes ({})",
        state.catalog.len(),
        largest.0,
        largest.1
    );
    assert!(
        largest.0 <= PROXY_HEADER_BUFFER,
        "the 402 of {} has a {}-byte head: a stock nginx answers 502 for it",
        largest.1,
        largest.0
    );
}

/// With `STORE_PERMIT2=1` in demo mode (the Solana door open), behind Debian's nginx with the
/// stock configuration: every SKU's 402 carries, beside its EIP-3009 accept on Base USDC, a
/// Permit2 `exact` accept of the same amount and `payTo` and the `eip2612GasSponsoring`
/// declaration, its head still fits the stock buffer (nginx answers every one 402, never 502),
/// and a buyer with no Permit2 allowance buys through the proxy in one request with its EIP-2612
/// approval.
#[tokio::test]
async fn with_permit2_every_402_fits_and_a_permit2_purchase_passes_a_stock_nginx() {
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let sandbox = SandboxFacilitator::new();
    let store = store_with(
        move |config| {
            config.base_url = public;
            config.permit2 = true;
            config.open_demo_doors();
        },
        Arc::new(sandbox.clone()),
    )
    .await;
    let upstream = serve_app(store.state.clone()).await;
    assert_every_402_fits(&store.state, upstream).await;
    let nginx = Nginx::start(port, upstream);
    let client = reqwest::Client::new();

    for sku in store.state.catalog.iter() {
        let url = format!("{}/api/x402/{}", nginx.origin(), sku.slug);
        let offer = get(&client, &url, &[]).await;
        assert_eq!(
            offer.status,
            StatusCode::PAYMENT_REQUIRED,
            "{url}: {}\nnginx error log:\n{}",
            offer.text,
            nginx.error_log()
        );
        let required: PaymentRequired =
            header::decode(offer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap();
        let (eip3009, permit2) = (&required.accepts[0], &required.accepts[1]);
        assert!(
            eip3009
                .extra
                .as_ref()
                .unwrap()
                .get("assetTransferMethod")
                .is_none()
        );
        assert_eq!(
            permit2.extra.as_ref().unwrap()["assetTransferMethod"],
            "permit2"
        );
        assert_eq!(
            (
                &permit2.scheme,
                &permit2.network,
                permit2.amount,
                &permit2.asset,
                &permit2.pay_to
            ),
            (
                &eip3009.scheme,
                &eip3009.network,
                eip3009.amount,
                &eip3009.asset,
                &eip3009.pay_to
            ),
            "{url}"
        );
        let extensions = required.extensions.unwrap_or_default();
        assert!(extensions.contains_key("eip2612GasSponsoring"), "{url}");
    }

    let url = format!("{}/api/x402/{RECEIPT}", nginx.origin());
    let offer = get(&client, &url, &[]).await;
    let mut required: PaymentRequired =
        header::decode(offer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap();
    required.accepts.retain(|accept| {
        accept
            .extra
            .as_ref()
            .and_then(|extra| extra.get("assetTransferMethod"))
            == Some(&serde_json::json!("permit2"))
    });
    let buyer = SandboxWallet::random();
    let network = required.accepts[0].network.clone();
    sandbox
        .set_permit2_allowance(&network, &buyer.address(), 0)
        .unwrap();
    let mut payment = buyer.pay(&required).unwrap();
    let nonce = sandbox.eip2612_nonce(&network, &buyer.address()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    buyer.sponsor_eip2612(&mut payment, nonce, now).unwrap();
    let signature = header::encode(&payment).unwrap();
    let bought = get(
        &client,
        &url,
        &[("payment-signature", signature.to_str().unwrap())],
    )
    .await;
    assert_eq!(
        bought.status,
        StatusCode::OK,
        "{}\nnginx error log:\n{}",
        bought.text,
        nginx.error_log()
    );
    let settled = &sandbox.settlements()[0];
    assert_eq!(
        (settled.scheme.as_str(), settled.transfer_method.as_str()),
        ("exact", "permit2")
    );
    assert_eq!(sandbox.settlement_count(), 1);
    let log = nginx.error_log();
    assert!(
        !log.contains("too big header"),
        "nginx refused an upstream header:\n{log}"
    );
}

/// Whether the `PAYMENT-REQUIRED` header in the response head `text` carries the sign-in and
/// `bazaar` extensions.
fn sign_in_in_challenge(text: &str) -> bool {
    let value = text
        .split("\r\n")
        .find_map(|line| line.strip_prefix("payment-required: "))
        .expect("a PAYMENT-REQUIRED header");
    let required: PaymentRequired = header::decode(value.as_bytes()).unwrap();
    let extensions = required.extensions.unwrap_or_default();
    extensions.contains_key("sign-in-with-x") && extensions.contains_key("bazaar")
}

/// `GET {origin}{path}` with `headers`, over the wire.
async fn get(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    read_response(request.send().await.unwrap()).await
}

/// The store's server behind Debian's nginx with the stock configuration, `STORE_BASE_URL` the
/// proxy's origin: a buyer's 402, purchase and sign-in all go through the proxy.
#[tokio::test]
async fn a_purchase_and_a_sign_in_through_a_stock_nginx() {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let public = origin.clone();
    let store = store_with(
        move |config| config.base_url = public,
        Arc::new(SandboxFacilitator::new()),
    )
    .await;
    let upstream = serve_app(store.state.clone()).await;
    let nginx = Nginx::start(port, upstream);
    let client = reqwest::Client::new();
    let url = format!("{}/api/x402/{RECEIPT}", nginx.origin());

    let offer = get(&client, &url, &[]).await;
    assert_eq!(
        offer.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}\nnginx error log:\n{}",
        offer.text,
        nginx.error_log()
    );
    let required: PaymentRequired =
        header::decode(offer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap();
    assert_eq!(
        required.resource.url, url,
        "resource URLs on the public origin"
    );

    let buyer = SandboxWallet::random();
    let payment = signature_header(&buyer, &required);
    let bought = get(&client, &url, &[("payment-signature", &payment)]).await;
    assert_eq!(
        bought.status,
        StatusCode::OK,
        "{}\nnginx error log:\n{}",
        bought.text,
        nginx.error_log()
    );
    assert!(bought.header("payment-response").is_some());
    let fulfillment = bought.json["fulfillment"][0]["url"].as_str().unwrap();
    assert!(fulfillment.starts_with(&origin), "{fulfillment}");
    let file = get(&client, fulfillment, &[]).await;
    assert_eq!(file.status, StatusCode::OK, "{}", file.text);

    let challenge = sign_in_challenge(&get(&client, &url, &[]).await);
    assert_eq!(challenge["info"]["uri"], url.as_str());
    let proof = buyer.sign_in(&challenge).unwrap();
    let again = get(&client, &url, &[("sign-in-with-x", &proof)]).await;
    assert_eq!(
        again.status,
        StatusCode::OK,
        "{}\nnginx error log:\n{}",
        again.text,
        nginx.error_log()
    );
    assert_eq!(passport_of(&again), passport_of(&bought));
    assert!(again.header("payment-response").is_none(), "nothing paid");

    let log = nginx.error_log();
    assert!(
        !log.contains("too big header"),
        "nginx refused an upstream header:\n{log}"
    );
    println!(
        "through nginx on {}: 402 ({} bytes of PAYMENT-REQUIRED), purchase 200 (Passport {}), sign-in 200 (same Passport)",
        nginx.origin(),
        offer.headers[PAYMENT_REQUIRED].len(),
        passport_of(&bought)
    );
}
