//! The server against slow and greedy clients (real TCP on loopback), and JSON bodies on the
//! errors the router and middleware write.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use x402_store::serve::{ServeLimits, serve};

use super::reliability;
use super::support::{TestStore, store, store_with};

/// Longest a test waits for the server to close a connection: far beyond every limit set here,
/// so only a server that never closes fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// Serves `store`'s app on a fresh loopback port with `limits`.
async fn listen(store: &TestStore, limits: ServeLimits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = store.app.clone();
    tokio::spawn(serve(listener, app, limits, std::future::pending()));
    address
}

fn short_limits() -> ServeLimits {
    ServeLimits {
        first_byte_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        http2_idle_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        max_connections: 64,
    }
}

/// Reads until the server closes the connection; returns what it sent. Panics after `PATIENCE`.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server kept the connection open");
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn a_connection_dripping_header_lines_is_closed() {
    let store = store().await;
    let address = listen(&store, short_limits()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /llms.txt HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One header line every 300 ms, for longer than PATIENCE unless the server closes first.
    let drip = async {
        for i in 0..100 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if stream
                .write_all(format!("X-Slow-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return true;
            }
        }
        false
    };
    let closed = tokio::time::timeout(PATIENCE, drip).await.unwrap_or(false);
    assert!(closed, "the server kept reading a header that never ended");
}

#[tokio::test]
async fn a_partial_request_followed_by_silence_is_closed() {
    let store = store().await;
    let address = listen(&store, short_limits()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /llms.txt HTTP/1.1\r\nHo")
        .await
        .unwrap();
    read_until_closed(&mut stream).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let store = store().await;
    let address = listen(&store, short_limits()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /.well-known/x402 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let received = read_until_closed(&mut stream).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
}

#[tokio::test]
async fn a_body_that_never_arrives_gets_408_json() {
    let store = store_with(
        |config| config.limits = short_limits(),
        std::sync::Arc::new(tower_x402_sandbox::SandboxFacilitator::new()),
    )
    .await;
    let address = listen(&store, short_limits()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            b"POST /api/discovery HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        .await
        .unwrap();
    let received = read_until_closed(&mut stream).await;
    assert!(received.starts_with("HTTP/1.1 408"), "{received}");
    assert!(received.contains("application/json"), "{received}");
    assert!(received.contains(r#""error""#), "{received}");
}

#[tokio::test]
async fn connections_beyond_the_bound_wait_for_a_free_slot() {
    let store = store().await;
    let limits = ServeLimits {
        max_connections: 1,
        first_byte_timeout: Duration::from_secs(30),
        header_read_timeout: Duration::from_secs(30),
        ..short_limits()
    };
    let address = listen(&store, limits).await;
    let holder = TcpStream::connect(address).await.unwrap();
    // Let the server take the first connection before the second arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut waiting = TcpStream::connect(address).await.unwrap();
    waiting
        .write_all(b"GET /.well-known/x402 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), waiting.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "a second connection was served beyond the bound"
    );
    drop(holder);
    let received = read_until_closed(&mut waiting).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
}

#[tokio::test]
async fn router_and_middleware_errors_have_json_bodies() {
    let store = store().await;
    let delete = store
        .send(
            Request::delete("/openapi.json")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(delete.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(delete.json["error"].is_string(), "{}", delete.text);
    assert!(delete.header("allow").is_some());

    let post_paid = store
        .send(
            Request::post("/api/x402/store-rail-receipt")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(post_paid.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(post_paid.json["error"].is_string(), "{}", post_paid.text);

    let big = vec![b' '; x402_store::app::MAX_BODY_BYTES + 1];
    let too_large = store
        .send(
            Request::post("/api/discovery")
                .header("content-type", "application/json")
                .body(Body::from(big.clone()))
                .unwrap(),
        )
        .await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(too_large.json["error"].is_string(), "{}", too_large.text);

    let mcp_too_large = store
        .send(
            Request::post("/mcp")
                .header("content-type", "application/json")
                .header("accept", "application/json")
                .body(Body::from(big))
                .unwrap(),
        )
        .await;
    assert_eq!(mcp_too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        mcp_too_large.json["jsonrpc"], "2.0",
        "{}",
        mcp_too_large.text
    );
    assert!(mcp_too_large.json["error"]["code"].is_i64());

    let mut many = Request::get("/llms.txt");
    for i in 0..=x402_store::http_errors::MAX_HEADERS {
        many = many.header(format!("x-h{i}"), "v");
    }
    let headers = store.send(many.body(Body::empty()).unwrap()).await;
    assert_eq!(headers.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert!(headers.json["error"].is_string(), "{}", headers.text);
}

#[tokio::test]
async fn too_many_headers_over_tcp_get_431_json() {
    let store = store_with(
        |_| {},
        std::sync::Arc::new(tower_x402_sandbox::SandboxFacilitator::new()),
    )
    .await;
    let address = listen(&store, short_limits()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut request = String::from("GET /llms.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for i in 0..150 {
        request.push_str(&format!("X-H{i}: v\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let received = read_until_closed(&mut stream).await;
    assert!(received.starts_with("HTTP/1.1 431"), "{received}");
    assert!(received.contains(r#""error""#), "{received}");
}

/// Seconds from connecting to the server closing a connection that sends nothing.
async fn seconds_until_closed(stream: &mut TcpStream) -> f64 {
    let started = std::time::Instant::now();
    read_until_closed(stream).await;
    started.elapsed().as_secs_f64()
}

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_first_byte_deadline() {
    let store = store().await;
    let limits = ServeLimits {
        first_byte_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(30),
        http2_idle_timeout: Duration::from_secs(30),
        ..short_limits()
    };
    let address = listen(&store, limits).await;
    let mut silent = TcpStream::connect(address).await.unwrap();
    let waited = seconds_until_closed(&mut silent).await;
    assert!((0.9..6.0).contains(&waited), "closed after {waited:.1} s");
    // An HTTP/2 preface cut short is as silent: closed at the same deadline.
    let mut partial = TcpStream::connect(address).await.unwrap();
    partial.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let waited = seconds_until_closed(&mut partial).await;
    assert!((0.9..6.0).contains(&waited), "closed after {waited:.1} s");
    // A client that speaks within the deadline is served.
    let mut prompt = TcpStream::connect(address).await.unwrap();
    prompt
        .write_all(b"GET /.well-known/x402 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let received = read_until_closed(&mut prompt).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
}

#[tokio::test]
async fn an_idle_h2c_connection_answering_pings_is_closed() {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

    let store = store().await;
    let limits = ServeLimits {
        // The server pings every second (its keep-alive interval is the header-read timeout).
        header_read_timeout: Duration::from_secs(1),
        http2_idle_timeout: Duration::from_secs(3),
        ..short_limits()
    };
    let address = listen(&store, limits).await;
    let stream = TcpStream::connect(address).await.unwrap();
    // Prior-knowledge h2c; the client pings too, and answers the server's pings.
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(300))
        .keep_alive_while_idle(true)
        .handshake::<_, Body>(TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(
            Request::get(format!("http://{address}/.well-known/x402"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap();
    let idle_since = std::time::Instant::now();
    let closed = tokio::time::timeout(PATIENCE, connection).await;
    let waited = idle_since.elapsed().as_secs_f64();
    assert!(closed.is_ok(), "the idle HTTP/2 connection was kept open");
    assert!(
        (2.5..10.0).contains(&waited),
        "closed {waited:.1} s after its last stream"
    );
    assert!(sender.is_closed());
}

/// A real `store` process limited to four connections: four silent sockets hold every slot
/// until the first-byte deadline closes them, and the store answers again.
#[tokio::test]
async fn a_store_process_held_by_silent_connections_recovers_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_store"))
        .args([
            "--listen",
            &address.to_string(),
            "--database-url",
            &database,
        ])
        .args(["--max-connections", "4", "--first-byte-timeout-secs", "2"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the store binary starts");
    let _kill = KillOnDrop(&mut child);

    // Ready when a request on a fresh connection is answered (and its connection closed).
    let started = std::time::Instant::now();
    loop {
        if let Ok(mut stream) = TcpStream::connect(address).await {
            let _ = stream
                .write_all(
                    b"GET /.well-known/x402 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                )
                .await;
            if read_until_closed(&mut stream)
                .await
                .starts_with("HTTP/1.1 200")
            {
                break;
            }
        }
        assert!(started.elapsed() < PATIENCE, "the store did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(address).await.unwrap());
    }
    let held_since = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut buyer = TcpStream::connect(address).await.unwrap();
    buyer
        .write_all(b"GET /.well-known/x402 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(1000), buyer.peek(&mut byte)).await;
    assert!(
        early.is_err(),
        "a fifth connection was served beyond the bound"
    );
    let received = read_until_closed(&mut buyer).await;
    let waited = held_since.elapsed().as_secs_f64();
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    assert!(
        (1.5..10.0).contains(&waited),
        "answered after {waited:.1} s"
    );
    for stream in &mut silent {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "a silent connection was left open: {read:?}"
        );
    }

    let row = reliability::Row {
        fault: "four silent TCP connections (no byte sent) to a store limited to four \
                (`STORE_MAX_CONNECTIONS=4`, `STORE_FIRST_BYTE_TIMEOUT_SECS=2`); a fifth client"
            .to_owned(),
        mode: "before",
        client_sees: "fifth waits in the backlog → 200 once the four are closed at the deadline"
            .to_owned(),
        inner_ran: 0,
        transfers: 0,
        delivered_unpaid: false,
    };
    reliability::check("store-connections", &[row]);
}

struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A request sent on a fresh connection: everything the server sent until it closed.
async fn raw_answer(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The server may answer and close before the whole request is written.
    let _ = stream.write_all(request).await;
    read_until_closed(&mut stream).await
}

/// What the README says of malformed HTTP/1 framing: hyper refuses what it cannot frame before
/// the app sees a request (empty body, connection closed); what reaches the app gets JSON.
#[tokio::test]
async fn malformed_http1_framing_is_answered_as_the_readme_says() {
    let store = store().await;
    let address = listen(&store, short_limits()).await;
    let mut long_line = b"GET /llms.txt?q=".to_vec();
    long_line.resize(long_line.len() + 450 * 1024, b'a');
    long_line.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    // hyper parses what it has read whenever a read ends: a request line that fits the read
    // buffer whole is parsed and its URI, past 64 KB, refused 414; one that overflows the buffer
    // first is refused 431. Which comes first depends on how the kernel hands over 450 KB.
    let by_hyper: [(&str, Vec<u8>, &[&str]); 3] = [
        (
            "two different Content-Length",
            b"POST /api/discovery HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
                .to_vec(),
            &["HTTP/1.1 400 Bad Request\r\n"],
        ),
        (
            "a Transfer-Encoding not ending in chunked",
            b"POST /api/discovery HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
                .to_vec(),
            &["HTTP/1.1 400 Bad Request\r\n"],
        ),
        (
            "a 450 KB request line",
            long_line,
            &[
                "HTTP/1.1 431 Request Header Fields Too Large\r\n",
                "HTTP/1.1 414 URI Too Long\r\n",
            ],
        ),
    ];
    for (case, request, status_lines) in by_hyper {
        let received = raw_answer(address, &request).await;
        assert!(
            status_lines.iter().any(|line| received.starts_with(line)),
            "{case}: {received:?}"
        );
        assert!(
            received.contains("connection: close\r\n"),
            "{case}: {received:?}"
        );
        assert!(
            received.contains("content-length: 0\r\n"),
            "{case}: {received:?}"
        );
        assert!(
            received.ends_with("\r\n\r\n"),
            "{case}: no body: {received:?}"
        );
    }
    // A chunked body that turns out malformed reaches the app, which answers JSON.
    let received = raw_answer(
        address,
        b"POST /api/discovery HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    )
    .await;
    assert!(received.starts_with("HTTP/1.1 400 "), "{received:?}");
    assert!(
        received.contains("content-type: application/json"),
        "{received:?}"
    );
    assert!(received.contains(r#"{"error":""#), "{received:?}");
}
