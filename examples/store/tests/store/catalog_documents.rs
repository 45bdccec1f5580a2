//! The free catalog documents: shapes, headers, and byte-for-byte agreement with the live 402.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use x402_store::documents::caching::weak_etag;

use super::support::{Answer, store};

fn assert_json_200(answer: &Answer, what: &str) {
    assert_eq!(answer.status, StatusCode::OK, "{what}: {}", answer.text);
    assert!(
        answer
            .header("content-type")
            .unwrap()
            .starts_with("application/json"),
        "{what}"
    );
    assert!(
        answer.header("payment-required").is_none(),
        "{what} must never be a paywall"
    );
}

async fn accepts_agree_byte_for_byte_across_every_surface() {
    let store = store().await;
    let v2 = store.get("/.well-known/x402.json").await;
    assert_json_200(&v2, "x402.json");
    let openapi = store.get("/openapi.json").await;
    assert_json_200(&openapi, "openapi");
    let resources = v2.json["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 45);

    for (entry, sku) in resources.iter().zip(store.state.catalog.iter()) {
        let live = store.get(&format!("/api/x402/{}", sku.slug)).await;
        assert_eq!(live.status, StatusCode::PAYMENT_REQUIRED);
        let mut challenge = live.challenge();
        // Each 402 adds its own sign-in challenge (a fresh nonce) to the published extensions.
        let sign_in = challenge["extensions"]
            .as_object_mut()
            .unwrap()
            .remove("sign-in-with-x");
        assert!(
            sign_in.is_some_and(|sign_in| sign_in["info"]["nonce"].is_string()),
            "{}",
            sku.slug
        );
        let live_accepts = serde_json::to_string(&challenge["accepts"]).unwrap();
        let live_extensions = serde_json::to_string(&challenge["extensions"]).unwrap();

        // The v2 catalog: the same bytes, verbatim inside the served document.
        assert_eq!(entry["resource"], challenge["resource"]["url"]);
        assert_eq!(
            serde_json::to_string(&entry["accepts"]).unwrap(),
            live_accepts
        );
        assert_eq!(
            serde_json::to_string(&entry["extensions"]).unwrap(),
            live_extensions
        );
        assert!(v2.text.contains(&live_accepts), "{}", sku.slug);
        assert_eq!(entry["sku"], sku.record());

        // MCP get_payment_required: exactly the object of the header, text and structured.
        let result = store
            .tool("get_payment_required", json!({"slug": sku.slug}))
            .await;
        assert_eq!(result["isError"], false);
        assert_eq!(result["structuredContent"], challenge);
        assert_eq!(
            serde_json::to_string(&result["structuredContent"]["accepts"]).unwrap(),
            live_accepts
        );
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, challenge);

        // OpenAPI: the decimal USD price equals the atomic amount of the canonical accept.
        let operation = &openapi.json["paths"][format!("/api/x402/{}", sku.slug)]["get"];
        let info = &operation["x-payment-info"];
        assert_eq!(info["protocols"], json!([{"x402": {"version": 2}}]));
        assert_eq!(info["price"]["mode"], "fixed");
        assert_eq!(info["price"]["currency"], "USD");
        let amount: x402_wire::UsdAmount =
            info["price"]["amount"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            json!(amount.to_atomic(6).unwrap()),
            challenge["accepts"][0]["amount"]
        );
        assert_eq!(info["price"], entry["sku"]["price"]);
    }
}

async fn well_known_x402_is_the_v1_url_list_with_a_pointer() {
    let store = store().await;
    let answer = store.get("/.well-known/x402").await;
    assert_json_200(&answer, "/.well-known/x402");
    assert_eq!(answer.json["version"], 1);
    let urls: Vec<&str> = answer.json["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    let expected: Vec<&str> = store
        .state
        .catalog
        .iter()
        .map(|sku| sku.resource_url.as_str())
        .collect();
    assert_eq!(urls, expected);
    assert!(
        urls.iter()
            .all(|url| url.starts_with("http://127.0.0.1:4020/api/x402/store-"))
    );
    assert_eq!(
        answer.json["v2"],
        "http://127.0.0.1:4020/.well-known/x402.json"
    );
    assert_eq!(answer.header("access-control-allow-origin"), Some("*"));
}

async fn openapi_lists_each_product_and_the_free_routes() {
    let store = store().await;
    let doc = store.get("/openapi.json").await.json;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], "2026-09-08");
    assert!(doc["info"]["x-guidance"].as_str().unwrap().len() <= 4000);
    assert_eq!(doc["servers"], json!([{"url": "http://127.0.0.1:4020"}]));
    let paths = doc["paths"].as_object().unwrap();
    let mut paid = 0;
    for (path, item) in paths {
        assert!(!path.starts_with("/api/x402/{"), "no templated paid path");
        for (method, operation) in item.as_object().unwrap() {
            assert_eq!(operation["security"], json!([]), "{method} {path}");
            if path.starts_with("/api/x402/") {
                paid += 1;
                let slug = path.trim_start_matches("/api/x402/");
                assert_eq!(method, "get");
                assert_eq!(operation["operationId"], slug);
                assert!(operation["summary"].is_string() && operation["tags"].is_array());
                assert_eq!(
                    operation["responses"]["402"]["description"],
                    "Payment Required"
                );
                assert_eq!(
                    operation["responses"]["200"]["content"]["application/json"]["schema"]["type"],
                    "object"
                );
            } else {
                assert!(
                    operation.get("x-payment-info").is_none(),
                    "free route {path} has no price"
                );
            }
        }
    }
    assert_eq!(paid, 45);
    for free in [
        "/.well-known/x402",
        "/.well-known/x402.json",
        "/llms.txt",
        "/mcp",
        "/api/bazaar",
        "/api/discovery",
    ] {
        assert!(paths.contains_key(free), "{free}");
    }
}

async fn bazaar_json_groups_by_tag_with_doors_and_standing() {
    let store = store().await;
    let answer = store.get("/api/bazaar").await;
    assert_json_200(&answer, "/api/bazaar");
    let doc = &answer.json;
    assert_eq!(doc["kind"], "first_party");
    assert_eq!(doc["count"], 45);
    let counted: usize = ["data", "credentials", "software", "desk"]
        .iter()
        .map(|tag| doc["tags"][tag].as_array().unwrap().len())
        .sum();
    assert_eq!(counted, 45);
    assert_eq!(doc["tags"]["desk"][0]["slug"], "store-desk-credits");
    assert_eq!(doc["tags"]["desk"][0]["price"]["amount"], "199.00");
    assert_eq!(doc["tags"]["desk"][0]["amountAtomic"], "199000000");
    let doors = doc["doors"].as_array().unwrap();
    assert_eq!(doors.len(), 3);
    for door in doors {
        for field in [
            "id",
            "name",
            "caip2",
            "asset",
            "assetId",
            "status",
            "treasury",
            "facilitator",
            "how",
            "notes",
        ] {
            assert!(door[field].is_string(), "door field {field}");
        }
    }
    let stages: Vec<&str> = doc["standing"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        stages,
        [
            "indexed",
            "retrieved",
            "considered",
            "selected",
            "purchased",
            "used",
            "returned",
            "referred"
        ]
    );
    assert_eq!(answer.header("access-control-allow-origin"), Some("*"));
}

async fn llms_txt_follows_the_llmstxt_layout() {
    let store = store().await;
    let answer = store.get("/llms.txt").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(
        answer
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    let text = &answer.text;
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# x402 example store"));
    assert_eq!(lines.next(), Some(""));
    assert!(lines.next().unwrap().starts_with("> "));
    assert!(text.contains("proof of purchase only"));
    assert!(text.contains("PAYMENT-SIGNATURE"));
    assert!(text.contains("SIGN-IN-WITH-X"));
    // Only the H1 and `##` headings; under each `##`, only link items.
    let mut in_section = false;
    let mut products = 0;
    for line in text.lines().skip(1) {
        assert!(
            !line.starts_with("# ") && !line.starts_with("###"),
            "{line}"
        );
        if line.starts_with("## ") {
            in_section = true;
        } else if in_section && !line.is_empty() {
            assert!(
                line.starts_with("- [") && line.contains("]("),
                "not a link item: {line}"
            );
            if line.contains("/api/x402/") {
                products += 1;
            }
        }
    }
    assert_eq!(products, 45);
    assert!(text.contains("- [store-desk-credits](http://127.0.0.1:4020/api/x402/store-desk-credits): 199.00 USD (199000000 atomic USDC)"));
    assert!(text.contains("## Machine-readable"));
    assert!(text.contains("(http://127.0.0.1:4020/openapi.json)"));
    assert!(text.contains("word-of-mouth/0.1"), "referral schema");
    assert!(text.contains("X-REFERRER-PASSPORT"));
}

async fn did_json_and_unknown_routes_answer_404_json() {
    let store = store().await;
    for path in ["/.well-known/did.json", "/no/such/route"] {
        let answer = store.get(path).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert!(answer.json["error"].is_string(), "{path}");
        assert!(answer.header("payment-required").is_none());
    }
}

async fn catalog_documents_have_open_cors_and_count_as_retrieved() {
    let store = store().await;
    let documents = [
        "/.well-known/x402.json",
        "/.well-known/x402",
        "/openapi.json",
        "/api/bazaar",
        "/llms.txt",
        "/bazaar",
    ];
    for path in documents {
        let answer = store.get(path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        if path != "/bazaar" {
            assert_eq!(
                answer.header("access-control-allow-origin"),
                Some("*"),
                "{path}"
            );
        }
    }
    let preflight = store
        .send(
            Request::options("/.well-known/x402.json")
                .header("origin", "https://elsewhere.example")
                .header("access-control-request-method", "GET")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(preflight.header("access-control-allow-origin"), Some("*"));
    // The paid route has its own policy (the payment headers), not the catalog documents' one.
    let paid = store.get("/api/x402/store-rail-receipt").await;
    assert!(
        paid.header("access-control-expose-headers")
            .is_some_and(|exposed| exposed.to_ascii_uppercase().contains("PAYMENT-REQUIRED"))
    );

    let manifest = store.get("/.well-known/mcp.json").await;
    assert_json_200(&manifest, "mcp.json");
    assert_eq!(manifest.json["endpoint"], "http://127.0.0.1:4020/mcp");
    assert_eq!(manifest.json["transport"], "streamable-http");
    assert_eq!(manifest.json["tools"].as_array().unwrap().len(), 6);

    let report = store.state.standing.snapshot().await.unwrap();
    assert_eq!(report.demo("retrieved"), Some(documents.len() as u64));
}

/// The indexers' schema for `x-payment-info.protocols`: an array of objects, the x402 entry an
/// object (any fields); the store's entry names version 2.
#[tokio::test]
async fn openapi_payment_info_names_x402_version_2_in_the_indexers_shape() {
    let store = super::support::store().await;
    let openapi = store.get("/openapi.json").await;
    let paths = openapi.json["paths"].as_object().unwrap();
    let mut paid = 0;
    for (path, item) in paths {
        let Some(info) = item["get"].get("x-payment-info") else {
            continue;
        };
        paid += 1;
        let protocols = info["protocols"].as_array().unwrap();
        assert!(protocols.iter().all(Value::is_object), "{path}");
        let x402 = protocols
            .iter()
            .find_map(|entry| entry.get("x402"))
            .unwrap_or_else(|| panic!("{path}: no x402 entry"));
        assert!(x402.is_object(), "{path}");
        assert_eq!(x402["version"], 2, "{path}");
        assert_eq!(info["price"]["mode"], "fixed", "{path}");
        assert!(info["price"]["amount"].is_string(), "{path}");
    }
    assert_eq!(paid, 45);
}

/// Who settles follows the mode: the sandbox in demo mode, an external facilitator otherwise.
#[tokio::test]
async fn the_doctrine_names_the_settler_of_the_mode() {
    for demo in [true, false] {
        let shop = super::support::Shop::open(demo).await;
        let llms = shop.get("/llms.txt", &[]).await.text;
        let openapi = shop.get("/openapi.json", &[]).await;
        let description = openapi.json["info"]["description"]
            .as_str()
            .unwrap()
            .to_owned();
        let page = shop.get("/bazaar", &[]).await.text;
        for (surface, text) in [
            ("llms.txt", &llms),
            ("openapi", &description),
            ("bazaar", &page),
        ] {
            let says_sandbox = text.contains("in-process sandbox");
            let says_external = text.contains("external facilitator");
            assert_eq!(says_sandbox, demo, "{surface} (demo: {demo})");
            assert_eq!(says_external, !demo, "{surface} (demo: {demo})");
        }
    }
}

#[tokio::test]
async fn the_origin_lands_on_the_storefront_and_trailing_slashes_redirect() {
    let store = store().await;
    let root = store.get("/").await;
    assert_eq!(root.status, StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(
        root.header("location"),
        Some("http://127.0.0.1:4020/bazaar")
    );
    for (path, location) in [
        ("/bazaar/", "http://127.0.0.1:4020/bazaar"),
        ("/openapi.json//", "http://127.0.0.1:4020/openapi.json"),
        (
            "/api/bazaar/?tag=x",
            "http://127.0.0.1:4020/api/bazaar?tag=x",
        ),
        ("/llms.txt/", "http://127.0.0.1:4020/llms.txt"),
    ] {
        let answer = store.get(path).await;
        assert_eq!(answer.status, StatusCode::PERMANENT_REDIRECT, "{path}");
        assert_eq!(answer.header("location"), Some(location), "{path}");
    }
    // Not a known route with a slash: still a JSON 404.
    let unknown = store.get("/no/such/route/").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.json["error"].is_string());
}

#[tokio::test]
async fn catalog_documents_are_compressed_tagged_and_cacheable() {
    let store = store().await;
    for (path, control) in [
        ("/.well-known/x402.json", "public, max-age=300"),
        ("/openapi.json", "public, max-age=300"),
        ("/api/bazaar", "public, max-age=60"),
        ("/llms.txt", "public, max-age=3600"),
        ("/.well-known/mcp.json", "public, max-age=3600"),
        ("/.well-known/x402", "public, max-age=300"),
    ] {
        let plain = store.get(path).await;
        assert_eq!(plain.status, StatusCode::OK, "{path}");
        assert_eq!(plain.header("cache-control"), Some(control), "{path}");
        let tag = plain
            .header("etag")
            .unwrap_or_else(|| panic!("{path}: no ETag"))
            .to_owned();
        // Prebuilt or hashed per request, the tag names the body served.
        assert_eq!(
            Some(tag.as_str()),
            weak_etag(&plain.bytes).to_str().ok(),
            "{path}"
        );

        let gzip = store
            .send(
                Request::get(path)
                    .header("accept-encoding", "gzip")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(gzip.header("content-encoding"), Some("gzip"), "{path}");
        assert!(gzip.bytes.len() < plain.bytes.len(), "{path}");
        assert_eq!(&gzip.bytes[..2], &[0x1f, 0x8b], "{path}: not gzip");

        let revalidate = store
            .send(
                Request::get(path)
                    .header("if-none-match", &tag)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        if path == "/api/bazaar" {
            // Carries the live funnel counts, which each retrieval moves: a new tag, a 200.
            assert_eq!(revalidate.status, StatusCode::OK, "{path}");
            assert_ne!(revalidate.header("etag"), Some(tag.as_str()), "{path}");
            continue;
        }
        assert_eq!(revalidate.status, StatusCode::NOT_MODIFIED, "{path}");
        assert!(revalidate.bytes.is_empty(), "{path}");
        assert_eq!(revalidate.header("etag"), Some(tag.as_str()), "{path}");

        let stale = store
            .send(
                Request::get(path)
                    .header("if-none-match", "W/\"other\"")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(stale.status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn openapi_describes_the_payment_headers_and_the_fulfillment_route() {
    let store = store().await;
    let openapi = store.get("/openapi.json").await;
    let paths = &openapi.json["paths"];
    let operation = &paths["/api/x402/store-rail-receipt"]["get"];
    let headers: Vec<&str> = operation["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["in"] == "header")
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        headers,
        ["PAYMENT-SIGNATURE", "SIGN-IN-WITH-X", "X-REFERRER-PASSPORT"]
    );
    assert!(operation["responses"]["200"]["headers"]["PAYMENT-RESPONSE"].is_object());
    let download = &paths["/api/fulfillment/{passport}/{file}"]["get"];
    let names: Vec<&str> = download["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["passport", "file", "key"]);
    assert!(download.get("x-payment-info").is_none());

    let llms = store.get("/llms.txt").await.text;
    // The referral schema names the path template as text; no link points at it.
    assert!(!llms.contains("/api/passport/{id})"), "{llms}");
    assert!(
        !llms.contains("](http://127.0.0.1:4020/api/passport/"),
        "{llms}"
    );
}

#[tokio::test]
async fn the_output_example_uses_visible_example_values() {
    let store = store().await;
    let openapi: serde_json::Value =
        serde_json::from_str(&store.get("/openapi.json").await.text).unwrap();
    let example = openapi["paths"]["/api/x402/store-rail-receipt"]["get"]["responses"]["200"]
        ["content"]["application/json"]["example"]
        .to_string();
    assert!(example.contains("pp_EXAMPLE"), "{example}");
    assert!(
        example.contains("key=EXAMPLE_KEY_NOT_A_SECRET"),
        "{example}"
    );
    let catalog = store.get("/openapi.json").await.text;
    let keys: Vec<&str> = catalog
        .match_indices("?key=")
        .map(|(at, _)| &catalog[at + 5..at + 5 + 43])
        .collect();
    assert!(!keys.is_empty());
    assert!(
        keys.iter()
            .all(|key| key.starts_with("EXAMPLE_KEY_NOT_A_SECRET")),
        "{keys:?}"
    );
}

super::support::on_both_backends!(
    accepts_agree_byte_for_byte_across_every_surface,
    well_known_x402_is_the_v1_url_list_with_a_pointer,
    openapi_lists_each_product_and_the_free_routes,
    bazaar_json_groups_by_tag_with_doors_and_standing,
    llms_txt_follows_the_llmstxt_layout,
    did_json_and_unknown_routes_answer_404_json,
    catalog_documents_have_open_cors_and_count_as_retrieved,
);
