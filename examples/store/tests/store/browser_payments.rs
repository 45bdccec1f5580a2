//! Paying the store from real Chromium (driven by `playwright-core`, see `tests/browser/`): a
//! page on another origin pays with the official x402 TypeScript client, and the paywall page
//! pays through an injected EIP-1193 wallet whose signing is done here by a [`SandboxWallet`].
//!
//! The npm packages are installed on first use (`tests/browser/install.sh`); without Chromium or
//! npm the tests fail.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::routing::get;
use axum::routing::post;
use serde_json::Value;
use tower_x402::PaywallPage;
use tower_x402::{Offer, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{Eip3009Authorization, PaymentRequirements, ResourceInfo, UsdcDeployment};

use super::support::{TestStore, serve, store_with};

const CHROMIUM: &str = "/usr/bin/chromium";

/// A checkout template whose query would run a script if it were not escaped.
const HOSTILE_CHECKOUT: &str =
    "https://pay.example/checkout?sku={sku}&note=<script>document.title='pwned'</script>";

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Makes sure Chromium and the npm packages are there: installs the packages (pinned by
/// `package-lock.json`) on first use, and fails the test, never skips it, when Chromium or npm
/// is missing.
pub(crate) fn require_browser_tools() {
    static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut installed = INSTALLED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(
        Path::new(CHROMIUM).exists(),
        "the browser tests need Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    );
    let packages = ["playwright-core", "@x402/fetch"];
    let present = || {
        packages
            .iter()
            .all(|name| browser_dir().join("node_modules").join(name).exists())
    };
    if !*installed && !present() {
        let status = std::process::Command::new("bash")
            .arg(browser_dir().join("install.sh"))
            .status()
            .expect("the browser tests need npm (Debian: apt-get install npm) to install their packages");
        assert!(
            status.success(),
            "installing the browser tests' npm packages failed: {status}"
        );
    }
    assert!(
        present(),
        "npm packages missing under {}",
        browser_dir().display()
    );
    *installed = true;
}

/// The store served on a loopback port that is also its base URL, so its links work.
pub(crate) async fn served_store(
    edit: impl FnOnce(&mut x402_store::config::Config),
) -> (TestStore, String) {
    served_store_paying(edit, Arc::new(SandboxFacilitator::new())).await
}

/// [`served_store`] paying through `facilitator`.
pub(crate) async fn served_store_paying(
    edit: impl FnOnce(&mut x402_store::config::Config),
    facilitator: Arc<dyn tower_x402::Facilitator>,
) -> (TestStore, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let base = format!("http://{address}");
    let store = store_with(
        |config| {
            config.base_url = base.clone();
            edit(config);
        },
        facilitator,
    )
    .await;
    let app = store.app.clone();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (store, base)
}

pub(crate) async fn run_node(mode: &str, env: &[(&str, String)]) -> Value {
    let mut command = tokio::process::Command::new("node");
    command
        .arg("run.mjs")
        .arg(mode)
        .current_dir(browser_dir())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .expect("the browser run timed out")
        .expect("node could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{mode} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[tokio::test]
async fn another_origin_pays_with_the_official_client() {
    require_browser_tools();
    let (store, base) = served_store(|_| {}).await;
    let found = run_node("cross-origin", &[("STORE_URL", base.clone())]).await;
    assert_eq!(found["status"], 200, "{found}");
    assert_ne!(found["origin"].as_str(), Some(base.as_str()));
    let passport = found["body"]["passport"]["passport"].as_str().unwrap();
    assert!(passport.starts_with("pp_"), "{found}");
    assert_eq!(found["settlement"]["success"], true, "{found}");
    let orders = store.get(&format!("/api/passport/{passport}")).await;
    assert_eq!(orders.status, 200, "{}", orders.text);
}

/// The test wallet's signing endpoints: `/sign` is `eth_signTypedData_v4` (the typed data of an
/// EIP-3009 `TransferWithAuthorization` in, the signature out), `/personal-sign` is
/// `personal_sign` (`{"message": "0x…", "account": …}` in, the signature out).
pub(crate) async fn signer(wallet: SandboxWallet) -> SocketAddr {
    let wallet = Arc::new(wallet);
    let personal = Arc::clone(&wallet);
    let personal_sign = move |Json(request): Json<Value>| {
        let wallet = Arc::clone(&personal);
        async move {
            assert_eq!(
                request["account"].as_str().map(str::to_ascii_lowercase),
                Some(wallet.address().to_ascii_lowercase()),
                "personal_sign for another account"
            );
            let hex = request["message"].as_str().unwrap();
            let hex = hex.strip_prefix("0x").unwrap();
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
                .collect();
            let message = String::from_utf8(bytes).unwrap();
            wallet.sign_message(&message).unwrap()
        }
    };
    let sign = move |Json(typed): Json<Value>| {
        let wallet = Arc::clone(&wallet);
        async move {
            let domain = &typed["domain"];
            let message = &typed["message"];
            let text = |value: &Value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let requirements: PaymentRequirements = serde_json::from_value(serde_json::json!({
                "scheme": "exact",
                "network": format!("eip155:{}", text(&domain["chainId"])),
                "amount": text(&message["value"]),
                "asset": domain["verifyingContract"],
                "payTo": message["to"],
                "maxTimeoutSeconds": 60,
                "extra": {"name": domain["name"], "version": domain["version"]},
            }))
            .unwrap();
            let authorization: Eip3009Authorization =
                serde_json::from_value(message.clone()).unwrap();
            wallet
                .sign_authorization(&requirements, &authorization)
                .unwrap()
                .signature
        }
    };
    let routes = axum::Router::new()
        .route("/sign", post(sign))
        .route("/personal-sign", post(personal_sign));
    serve(routes).await
}

#[tokio::test]
async fn paywall_page_pays_with_a_browser_wallet_and_runs_no_injected_script() {
    require_browser_tools();
    let (_store, base) =
        served_store(|config| config.checkout_url = Some(HOSTILE_CHECKOUT.to_owned())).await;
    let wallet = SandboxWallet::random();
    let address = wallet.address();
    let signer = signer(wallet).await;
    let found = run_node(
        "paywall",
        &[
            ("STORE_URL", base),
            ("SIGNER_URL", format!("http://{signer}/sign")),
            ("WALLET_ADDRESS", address),
        ],
    )
    .await;
    assert_eq!(found["status"], 402, "{found}");
    assert_eq!(found["contentType"], "text/html; charset=utf-8");
    // The page's own two script elements (the challenge data and the code), nothing injected.
    assert_eq!(found["scripts"], 2, "{found}");
    assert!(
        found["passport"]
            .as_str()
            .unwrap()
            .starts_with("Passport: pp_"),
        "{found}"
    );
    assert_eq!(found["statusText"], "Payment settled.");
    assert_eq!(found["download"]["status"], 200, "{found}");
    assert!(found["download"]["bytes"].as_u64().unwrap() > 0);
    for title in [&found["title"], &found["titleAfter"]] {
        assert!(!title.as_str().unwrap().contains("pwned"), "{found}");
    }
    assert_eq!(found["violations"], serde_json::json!([]), "{found}");
    assert_eq!(found["dialogs"], serde_json::json!([]), "{found}");
}

/// A product description that would run script if the paywall page did not escape it.
const HOSTILE_DESCRIPTION: &str = "Report</title><script>window.__pwned=true;document.title='pwned'</script><img src=x onerror=\"window.__pwned=true;alert('pwned')\">";

#[tokio::test]
async fn a_hostile_description_is_shown_as_text_and_runs_nothing() {
    require_browser_tools();
    let mut resource = ResourceInfo::new("http://127.0.0.1/report");
    resource.description = Some(HOSTILE_DESCRIPTION.to_owned());
    let offer = Offer::builder(resource)
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.25".parse().unwrap(),
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        )
        .build()
        .unwrap();
    let paywall =
        X402Layer::new(SandboxFacilitator::new(), Arc::new(offer)).paywall_page(PaywallPage::new());
    let app = axum::Router::new().route("/report", get(|| async { "paid" }).layer(paywall));
    let address = serve(app).await;

    let found = run_node(
        "hostile",
        &[("PAGE_URL", format!("http://{address}/report"))],
    )
    .await;
    assert_eq!(found["status"], 402, "{found}");
    assert_eq!(found["contentType"], "text/html; charset=utf-8", "{found}");
    assert_eq!(found["pwned"], false, "{found}");
    // Shown verbatim, as text, in the title and the heading.
    assert_eq!(
        found["title"],
        format!("Payment required — {HOSTILE_DESCRIPTION}"),
        "{found}"
    );
    assert_eq!(found["heading"], HOSTILE_DESCRIPTION, "{found}");
    // The page's own two script elements; no injected script or image became an element.
    assert_eq!(found["scripts"], 2, "{found}");
    assert_eq!(found["images"], 0, "{found}");
    assert_eq!(found["dialogs"], serde_json::json!([]), "{found}");
}
