//! Paths that differ from a priced route only in spelling must never reach paid content unpaid,
//! when the layer is used as the docs show: on the route itself, or as a path table on an axum
//! router (both match the raw path).

mod common;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::routing::get;
use common::*;
use http::{Request, StatusCode};
use tower::ServiceExt;
use tower_x402::{SettlementMode, VerifiedPayment, X402Layer};

const SECRET: &str = "paid content";

const VARIANTS: &[&str] = &[
    "/premium/report",
    "/premium/report/",
    "//premium/report",
    "/premium//report",
    "/premium%2Freport",
    "/premium/%72eport",
    "/premium/rep%6Frt",
    "/premium/./report",
    "/premium/x/../report",
    "/premium/report%2F",
    "/premium/report%00",
    "/premium/report?x=1",
    "/premium/report#frag",
    "/PREMIUM/report",
    "/premium/report\\",
];

/// Sends every variant unpaid and checks that none is served the paid content. With
/// `free_siblings`, a variant may legitimately reach another, free route of the router.
async fn assert_no_variant_is_free(app: Router, free_siblings: bool) {
    for path in VARIANTS {
        let Ok(request) = Request::get(*path).body(Body::empty()) else {
            continue; // not even a valid request target: cannot reach anything
        };
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&body).contains(SECRET),
            "{path} served paid content unpaid ({status})"
        );
        let expected = matches!(status, StatusCode::PAYMENT_REQUIRED | StatusCode::NOT_FOUND)
            || (free_siblings && status == StatusCode::OK);
        assert!(expected, "{path}: {status}");
    }
}

#[tokio::test]
async fn layer_on_a_route_cannot_be_bypassed_by_spelling() {
    let offer = offer(
        "https://shop.example/premium/report",
        SettlementMode::Before,
    );
    let app = Router::new().route(
        "/premium/report",
        get(|| async { SECRET }).layer(X402Layer::new(accepting(), offer)),
    );
    assert_no_variant_is_free(app, false).await;
}

#[tokio::test]
async fn price_table_on_a_router_cannot_be_bypassed_by_spelling() {
    let offer = offer(
        "https://shop.example/premium/report",
        SettlementMode::Before,
    );
    let table = std::collections::HashMap::from([("/premium/report".to_owned(), offer)]);
    let app = Router::new()
        .route("/premium/report", get(|| async { SECRET }))
        .route(
            "/premium/{other}",
            get(|Path(other): Path<String>| async move { format!("free page {other}") }),
        )
        .layer(X402Layer::new(accepting(), table));
    assert_no_variant_is_free(app.clone(), true).await;

    // The free sibling route stays free, and the priced one is a 402.
    let free = app
        .clone()
        .oneshot(Request::get("/premium/other").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(free.status(), StatusCode::OK);
    let priced = app
        .oneshot(Request::get("/premium/report").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(priced.status(), StatusCode::PAYMENT_REQUIRED);
}

#[tokio::test]
async fn a_templated_route_priced_by_decoded_segment_cannot_be_bypassed() {
    // The documented way to price a route with a parameter: decode the segment the way the
    // router's `Path` extractor will, and require the payment in the handler.
    let offer = offer(
        "https://shop.example/premium/report",
        SettlementMode::Before,
    );
    let pricing = move |parts: &http::request::Parts| {
        let segment = parts.uri.path().strip_prefix("/premium/")?;
        let decoded = percent_encoding::percent_decode_str(segment)
            .decode_utf8()
            .ok()?;
        (decoded == "report").then(|| offer.clone())
    };
    let app = Router::new().route(
        "/premium/{item}",
        get(
            |Path(item): Path<String>, payment: Option<VerifiedPayment>| async move {
                match (item.as_str(), payment) {
                    ("report", Some(_)) => (StatusCode::OK, SECRET.to_owned()),
                    ("report", None) => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "unpriced request reached a paid item".to_owned(),
                    ),
                    (_, _) => (StatusCode::NOT_FOUND, "no such item".to_owned()),
                }
            },
        )
        .layer(X402Layer::new(accepting(), pricing)),
    );
    assert_no_variant_is_free(app.clone(), false).await;
    let encoded = app
        .oneshot(
            Request::get("/premium/%72eport")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        encoded.status(),
        StatusCode::PAYMENT_REQUIRED,
        "an encoded spelling of a priced item is priced"
    );
}
