//! Three `store` processes on one PostgreSQL database, as three instances behind one origin:
//! one payment presented to all of them at once settles once; what one sells, the others
//! verify and deliver; the standing read from one counts every instance's traffic; an instance
//! killed (SIGKILL) while it holds a payment is recovered by another after the lease.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use reqwest::StatusCode;
use serde_json::Value;
use tower_x402_sandbox::{SandboxFacilitator, Step};
use x402_wire::Network;

use super::live_store::new_payment;
use super::support::RECEIPT;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// Seconds an instance holds a payment it is settling.
const LEASE: u64 = 2;
/// How long any one wait in these tests may last.
const PATIENCE: Duration = Duration::from_secs(60);
/// Instances sharing the database.
const INSTANCES: usize = 3;
/// Copies of one payment sent at once, spread over the instances.
const DUPLICATES: usize = 30;

/// A `store` child process, killed when dropped.
struct Instance {
    child: Child,
    base: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start(database: &str, facilitator: &str, rpc: &str) -> Instance {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_store"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--base-url", "http://shop.example"])
        .args(["--facilitator-url", facilitator, "--pay-to", PAY_TO])
        .args(["--rpc-url", rpc, "--database-url", database])
        .args(["--settlement-lease", &LEASE.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the store binary starts");
    // Owned at once, so the process is killed and reaped whatever happens next.
    let instance = Instance { child, base };
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let ready = client
            .get(format!("{}/.well-known/x402.json", instance.base))
            .send()
            .await;
        if ready.is_ok_and(|response| response.status() == StatusCode::OK) {
            return instance;
        }
        assert!(started.elapsed() < PATIENCE, "the store did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Serves `app` on a loopback port: its URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The facilitator's address as the stores see it: every call forwarded to `upstream`, each
/// `/settle` held for `settle_delay` first, so copies of a payment arrive while it settles.
async fn slow_settling_proxy(upstream: String, settle_delay: Duration) -> String {
    async fn forward(
        State((upstream, delay)): State<(String, Duration)>,
        request: Request,
    ) -> Response {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        if parts.uri.path() == "/settle" {
            tokio::time::sleep(delay).await;
        }
        let url = format!("{upstream}{}", parts.uri);
        let mut outgoing = reqwest::Client::new().request(parts.method, url).body(body);
        if let Some(kind) = parts.headers.get("content-type") {
            outgoing = outgoing.header("content-type", kind);
        }
        match outgoing.send().await {
            Ok(answer) => {
                let status = answer.status();
                let bytes: Bytes = answer.bytes().await.unwrap_or_default();
                (status, [("content-type", "application/json")], bytes).into_response()
            }
            Err(_) => StatusCode::BAD_GATEWAY.into_response(),
        }
    }
    serve(
        axum::Router::new()
            .fallback(forward)
            .with_state((upstream, settle_delay)),
    )
    .await
}

/// One signed payment for the store's cheapest product, from `instance`'s challenge.
async fn sign(client: &reqwest::Client, instance: &Instance) -> String {
    new_payment(client, &format!("{}/api/x402/{RECEIPT}", instance.base)).await
}

async fn present(client: &reqwest::Client, base: &str, signature: &str) -> (StatusCode, Value) {
    let answer = client
        .get(format!("{base}/api/x402/{RECEIPT}"))
        .header("payment-signature", signature)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// The count of one stage of the live funnel, as `base` reports it in `/api/bazaar`.
async fn stage(client: &reqwest::Client, base: &str, name: &str) -> u64 {
    let bazaar: Value = client
        .get(format!("{base}/api/bazaar"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    bazaar["standing"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["stage"] == name)
        .and_then(|entry| entry["count"].as_u64())
        .unwrap_or_else(|| panic!("no stage {name}: {bazaar}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_payment_at_three_instances_at_once_settles_once() {
    super::postgres_server::require();
    let database = super::postgres_server::fresh_database().await;
    let sandbox = SandboxFacilitator::new();
    let faulty = sandbox.clone();
    let upstream = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(faulty.clone().serve(listener));
        url
    };
    let facilitator = slow_settling_proxy(upstream, Duration::from_millis(300)).await;
    let rpc = serve(sandbox.rpc_router(Network::BASE)).await;
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        instances.push(start(&database, &facilitator, &rpc).await);
    }
    let client = reqwest::Client::new();
    let signature = sign(&client, &instances[0]).await;

    let copies: Vec<_> = (0..DUPLICATES)
        .map(|copy| {
            let (client, signature) = (client.clone(), signature.clone());
            let base = instances[copy % INSTANCES].base.clone();
            tokio::spawn(async move { present(&client, &base, &signature).await })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut passports = std::collections::BTreeSet::new();
    let mut files = std::collections::BTreeSet::new();
    for copy in copies {
        let (status, body) = copy.await.unwrap();
        *statuses.entry(status.as_u16()).or_default() += 1;
        assert_ne!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
        if status == StatusCode::OK {
            passports.insert(body["passport"]["passport"].as_str().unwrap().to_owned());
            files.insert(body["fulfillment"][0]["url"].as_str().unwrap().to_owned());
        }
    }
    println!(
        "{DUPLICATES} copies of one payment over {INSTANCES} instances: answers {statuses:?}, \
         /settle calls {}, transfers {}, Passports {}",
        faulty.settle_calls(),
        sandbox.settlement_count(),
        passports.len()
    );
    assert_eq!(
        statuses,
        [(200, DUPLICATES)].into(),
        "every copy answered from one outcome"
    );
    assert_eq!(faulty.settle_calls(), 1, "one /settle over all instances");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    assert_eq!(passports.len(), 1, "one Passport: {passports:?}");
    assert_eq!(
        files.len(),
        1,
        "one fulfillment key on every instance: {files:?}"
    );

    // What one instance sold, every other verifies and delivers.
    let passport = passports.into_iter().next().unwrap();
    let (_, bought) = present(&client, &instances[0].base, &signature).await;
    let file = bought["fulfillment"][0]["url"].as_str().unwrap().to_owned();
    let path = file.strip_prefix("http://shop.example").unwrap().to_owned();
    for instance in &instances {
        let verified = client
            .get(format!("{}/api/passport/{passport}", instance.base))
            .send()
            .await
            .unwrap();
        assert_eq!(verified.status(), StatusCode::OK);
        let download = client
            .get(format!("{}{path}", instance.base))
            .send()
            .await
            .unwrap();
        assert_eq!(download.status(), StatusCode::OK, "{path}");
    }

    // One more challenge on each instance; each read of the standing flushes that instance's
    // counts as increments, and the last read sees them all: the signing challenge plus three.
    for instance in &instances {
        let challenge = client
            .get(format!("{}/api/x402/{RECEIPT}", instance.base))
            .send()
            .await
            .unwrap();
        assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
        stage(&client, &instance.base, "considered").await;
    }
    assert_eq!(stage(&client, &instances[1].base, "considered").await, 4);
    assert_eq!(stage(&client, &instances[2].base, "purchased").await, 1);

    // Every instance stopped and a new one started: the re-delivery hands out the same key
    // (the secret is the database's, not a process's), and stores no new one.
    drop(instances);
    let restarted = start(&database, &facilitator, &rpc).await;
    let (status, again) = present(&client, &restarted.base, &signature).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["fulfillment"][0]["url"], file.as_str());
    let store = x402_store::storage::Store::open(&database).await.unwrap();
    assert_eq!(store.row_counts().await.unwrap()["fulfillment_grants"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_killed_holding_a_payment_is_recovered_by_another() {
    super::postgres_server::require();
    let database = super::postgres_server::fresh_database().await;
    let sandbox = SandboxFacilitator::new();
    let faulty = sandbox.clone();
    // The first /settle moves the money and then never answers.
    faulty.queue_settle(Step::NoAnswer);
    let facilitator = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(faulty.clone().serve(listener));
        url
    };
    let rpc = serve(sandbox.rpc_router(Network::BASE)).await;
    let mut holder = start(&database, &facilitator, &rpc).await;
    let other = start(&database, &facilitator, &rpc).await;
    let client = reqwest::Client::new();
    let signature = sign(&client, &holder).await;

    let first = tokio::spawn({
        let url = format!("{}/api/x402/{RECEIPT}", holder.base);
        let (client, signature) = (client.clone(), signature.clone());
        async move {
            client
                .get(url)
                .header("payment-signature", signature)
                .send()
                .await
        }
    });
    let started = Instant::now();
    while sandbox.settlement_count() == 0 {
        assert!(
            started.elapsed() < PATIENCE,
            "the payment never reached /settle"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder.child.kill().unwrap(); // SIGKILL, holding the payment's lease
    holder.child.wait().unwrap();
    let cut = first.await.unwrap();
    assert!(cut.is_err(), "the request dies with its instance: {cut:?}");

    // The other instance waits out the dead one's lease, re-sends the identical /settle, and
    // delivers.
    let (status, body) = present(&client, &other.base, &signature).await;
    println!(
        "instance killed holding the payment: the other answered {status}, /settle calls {}, \
         transfers {}",
        faulty.settle_calls(),
        sandbox.settlement_count()
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["passport"]["passport"]
            .as_str()
            .is_some_and(|id| id.starts_with("pp_"))
    );
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    assert_eq!(
        faulty.settle_calls(),
        2,
        "the identical /settle, re-sent once"
    );
    let (again, replay) = present(&client, &other.base, &signature).await;
    assert_eq!(again, StatusCode::OK);
    assert_eq!(replay["passport"], body["passport"]);
}
