//! The storefront in Chromium at a desktop (1280 px) and a phone (390 px) width: screenshots
//! under `target/browser-screenshots/`, every product shown, no horizontal scrolling, the tag
//! and text filter, a product page, and axe-core finding no serious or critical violation.

use serde_json::Value;

use super::browser_payments::{require_browser_tools, run_node, served_store};

fn serious(violations: &Value) -> Vec<&Value> {
    violations
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .collect()
}

#[tokio::test]
async fn storefront_renders_filters_and_passes_axe_at_desktop_and_phone_width() {
    require_browser_tools();
    let (store, base) = served_store(|_| {}).await;
    let out =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/browser-screenshots");
    let found = run_node(
        "storefront",
        &[("STORE_URL", base), ("OUT_DIR", out.display().to_string())],
    )
    .await;
    let software = store
        .state
        .catalog
        .iter()
        .filter(|s| s.tag == "software")
        .count();
    let receipts = store
        .state
        .catalog
        .iter()
        .filter(|s| {
            format!("{} {} {} {}", s.slug, s.summary, s.description, s.tag)
                .to_lowercase()
                .contains("receipt")
        })
        .count();
    assert!(software > 0 && receipts > 0);
    for width in ["1280", "390"] {
        let view = &found["widths"][width];
        assert_eq!(view["title"], "x402 example store — catalog", "{view}");
        assert_eq!(view["cards"], 45, "{view}");
        assert!(
            view["scrollWidth"].as_u64().unwrap() <= width.parse().unwrap(),
            "{view}"
        );
        assert_eq!(view["afterTag"], software, "{view}");
        assert_eq!(view["afterTagCount"], format!("{software} of 45 products"));
        assert_eq!(view["afterText"], receipts, "{view}");
        assert!(
            view["screenshot"]["bytes"].as_u64().unwrap() > 10_000,
            "{view}"
        );
        assert!(view["product"]["bytes"].as_u64().unwrap() > 5_000, "{view}");
        assert!(
            view["product"]["title"]
                .as_str()
                .unwrap()
                .ends_with("— x402 example store")
        );
        assert!(serious(&view["axe"]).is_empty(), "{}", view["axe"]);
        assert!(
            serious(&view["productAxe"]).is_empty(),
            "{}",
            view["productAxe"]
        );
        println!("{width} px: {view}");
    }
}
