//! `/bazaar` rendered by headless Chromium: every product is in the DOM and configured text is
//! escaped, not interpreted.
//!
//! Without Chromium the test fails.

use std::path::Path;
use std::sync::Arc;

use tower_x402_sandbox::SandboxFacilitator;

use super::support::{serve, store_with};

const CHROMIUM: &str = "/usr/bin/chromium";

/// A checkout template whose query would run a script if it were not escaped.
const HOSTILE_CHECKOUT: &str =
    "https://pay.example/checkout?sku={sku}&note=<script>document.title='pwned'</script>";

async fn bazaar_page_renders_every_sku_escaped() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "the browser tests need Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    );
    let store = store_with(
        |c| c.checkout_url = Some(HOSTILE_CHECKOUT.to_owned()),
        Arc::new(SandboxFacilitator::new()),
    )
    .await;
    let address = serve(store.app.clone()).await;
    let profile = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("http://{address}/bazaar"))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), output)
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dom = String::from_utf8(output.stdout).unwrap();

    assert!(
        dom.contains("<title>x402 example store — catalog</title>"),
        "the injected script must not run"
    );
    assert!(!dom.contains("pwned</title>"));
    for sku in store.state.catalog.iter() {
        assert!(
            dom.contains(&format!("id=\"{}\"", sku.slug)),
            "{} missing from the DOM",
            sku.slug
        );
        assert!(
            dom.contains(&format!("<span class=\"price\">${}</span>", sku.price)),
            "{} price",
            sku.slug
        );
    }
    // Text with markup characters arrives as text.
    assert!(dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"));
    assert!(dom.contains("Atlas of UCC filing offices &amp; their search rules."));
    assert!(dom.contains("proof of purchase only"));
    for status in [
        "data-status=\"live\"",
        "data-status=\"gated\"",
        "data-status=\"mapped\"",
    ] {
        assert!(dom.contains(status), "{status}");
    }
    assert_eq!(dom.matches("class=\"checkout\"").count(), 45);
}

super::support::on_both_backends!(bazaar_page_renders_every_sku_escaped,);
