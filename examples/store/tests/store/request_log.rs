//! The request log at debug level never holds a fulfillment key: the `store` binary, run with
//! `RUST_LOG=tower_http=debug`, serves a purchase and a download over loopback, and its log is
//! read back.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tower_x402_sandbox::SandboxWallet;
use x402_wire::{PaymentRequired, header};

#[tokio::test]
async fn fulfillment_keys_never_reach_the_request_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_store"))
        .env("RUST_LOG", "tower_http=debug")
        .env("STORE_LISTEN", "127.0.0.1:0")
        .env(
            "STORE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("store.db").display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = stdout.next_line().await.unwrap().expect("the store exited");
        if let Some(address) = line.strip_prefix("listening on ") {
            break address.to_owned();
        }
    };
    let http = reqwest::Client::new();
    let url = format!("{base}/api/x402/{}", super::support::RECEIPT);
    let challenge = http.get(&url).send().await.unwrap();
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    let payment = header::encode(&SandboxWallet::random().pay(&required).unwrap()).unwrap();
    let bought: serde_json::Value = http
        .get(&url)
        .header("payment-signature", payment)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let file = bought["fulfillment"][0]["url"].as_str().unwrap().to_owned();
    let key = file.rsplit_once("key=").unwrap().1.to_owned();
    let download = http.get(&file).send().await.unwrap();
    assert_eq!(download.status(), 200);

    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .await
        .unwrap();
    assert!(
        log.contains("/api/fulfillment/"),
        "the download was not logged: {log}"
    );
    assert!(log.contains("key=REDACTED"), "{log}");
    assert!(!log.contains(&key), "the key was logged: {log}");
}
