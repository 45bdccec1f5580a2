//! A streamed route for the metered tests: `/tokens` sends one server-sent-event token each time
//! the test releases one through a gate, each charged 0.001 USDC as it is handed to the
//! connection; and the client side that reads it over a fresh HTTP/1.1 connection.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tower_x402::Charge;
use x402_wire::{AtomicAmount, PaymentPayload, SettleResponse, header};

/// What each token costs, in atomic USDC units (0.001 USDC).
pub const TOKEN_PRICE: u128 = 1_000;

/// The streamed route's body: tokens from a channel, each charged [`TOKEN_PRICE`] as it is
/// handed to the connection.
struct Tokens {
    tokens: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    charge: Charge,
}

impl http_body::Body for Tokens {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.tokens.poll_recv(cx).map(|token| {
            token.map(|token| {
                self.charge.add(AtomicAmount(TOKEN_PRICE));
                Ok(http_body::Frame::data(token))
            })
        })
    }
}

/// A router with `/tokens`: up to 100 tokens `data: token {n}`, one per permit added to `gate`;
/// closing `gate` ends the stream. Put the paywall on it with `.layer(…)`.
pub fn tokens_router(gate: &Arc<Semaphore>) -> Router {
    let gate = Arc::clone(gate);
    let tokens = move |charge: Charge| async move {
        charge.set(AtomicAmount(0));
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            for n in 0..100 {
                let Ok(permit) = gate.acquire().await else {
                    return;
                };
                permit.forget();
                let token = bytes::Bytes::from(format!("data: token {n}\n\n"));
                if sender.send(token).await.is_err() {
                    return;
                }
            }
        });
        let body = axum::body::Body::new(Tokens {
            tokens: receiver,
            charge,
        });
        ([("content-type", "text/event-stream")], body)
    };
    Router::new().route("/tokens", get(tokens))
}

/// Serves `app` over HTTP on 127.0.0.1 and returns its address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Sends the paid `GET /tokens` to `addr` over a fresh HTTP/1.1 connection (asking for
/// trailers); returns the response and the task driving the connection (abort it to hang up).
pub async fn pay(
    addr: SocketAddr,
    payload: &PaymentPayload,
) -> (
    http::Response<hyper::body::Incoming>,
    tokio::task::JoinHandle<()>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = http::Request::get("/tokens")
        .header("host", "api.example.com")
        .header("te", "trailers")
        .header("payment-signature", header::encode(payload).unwrap())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    (sender.send_request(request).await.unwrap(), driver)
}

/// The next data frame of `body`, as text.
pub async fn next_token(body: &mut hyper::body::Incoming) -> String {
    loop {
        let frame = body.frame().await.unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            return String::from_utf8(data.to_vec()).unwrap();
        }
    }
}

/// Asserts that `response` is a 200 whose settlement is announced as a trailer, not sent as a
/// header, and returns its body.
pub fn streaming_body(response: http::Response<hyper::body::Incoming>) -> hyper::body::Incoming {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["trailer"], "PAYMENT-RESPONSE");
    assert!(!response.headers().contains_key("payment-response"));
    response.into_body()
}

/// Releases the tokens numbered `tokens` through `gate` and asserts each arrives, in order.
pub async fn release(
    gate: &Semaphore,
    body: &mut hyper::body::Incoming,
    tokens: std::ops::Range<u32>,
) {
    gate.add_permits(tokens.len());
    for n in tokens {
        assert_eq!(next_token(body).await, format!("data: token {n}\n\n"));
    }
}

/// Closes `gate`, which ends the stream, and returns the settlement of its `PAYMENT-RESPONSE`
/// trailer; nothing is sent after the tokens already read.
pub async fn finish(gate: &Semaphore, body: hyper::body::Incoming) -> SettleResponse {
    gate.close();
    let rest = body.collect().await.unwrap();
    let trailers = rest
        .trailers()
        .expect("the settlement in a trailer")
        .clone();
    assert!(rest.to_bytes().is_empty());
    header::decode(trailers["payment-response"].as_bytes()).unwrap()
}
