//! The request log at its most verbose never holds a fulfillment key.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::support::{Shop, first_file_path};
use tower_x402::sandbox::SandboxWallet;

/// A log sink the test can read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn fulfillment_keys_never_reach_the_request_log() {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let shop = Shop::open(true).await;
    let bought = shop
        .buy(&SandboxWallet::random(), super::support::RECEIPT, None)
        .await;
    let path = first_file_path(&bought);
    let key = path.split("key=").nth(1).unwrap().to_owned();
    assert!(key.len() > 20);
    let download = shop.get(&path, &[]).await;
    assert_eq!(download.status, 200, "{}", download.text);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        log.contains("/api/fulfillment/"),
        "the request was not logged: {log}"
    );
    assert!(log.contains("key=REDACTED"), "{log}");
    assert!(!log.contains(&key), "the key was logged");
}
