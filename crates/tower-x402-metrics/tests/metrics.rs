//! A payment core wired with these metrics, driven through the HTTP layer against the sandbox
//! facilitator served on loopback, read back from a Prometheus recorder: the challenge, a
//! payment settled, its repeat answered from the record, a refused payment and the
//! facilitator's timings.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use metrics_exporter_prometheus::PrometheusBuilder;
use tower::{ServiceBuilder, ServiceExt};
use tower_x402::facilitator::{DEFAULT_LABEL, Facilitators};
use tower_x402::payment::Payments;
use tower_x402::{HttpFacilitator, MemorySettlementStore, Offer, X402Layer};
use tower_x402_metrics::{Metered, PaymentMetrics};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{PaymentPayload, PaymentRequired, ResourceInfo, UsdcDeployment, header};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn request(payment: Option<&PaymentPayload>) -> Request<Full<Bytes>> {
    let mut request = Request::get("/report").body(Full::default()).unwrap();
    if let Some(payment) = payment {
        let value = header::encode(payment).unwrap();
        request.headers_mut().insert("payment-signature", value);
    }
    request
}

/// The value of the series `name` (with its labels, as rendered) in `scrape`.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

#[tokio::test]
async fn a_core_wired_with_the_metrics_reports_each_outcome() {
    let recorder = PrometheusBuilder::new().install_recorder().unwrap();
    tower_x402_metrics::describe();

    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    let facilitator = Arc::new(HttpFacilitator::new(&url).unwrap());
    let facilitators = Facilitators::new(DEFAULT_LABEL, facilitator);
    let payments = Payments::with_facilitators(tower_x402_metrics::facilitators(facilitators))
        .settlement_store(Metered(MemorySettlementStore::default()))
        .hook(PaymentMetrics);
    let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
        .usdc(&UsdcDeployment::BASE, "0.10".parse().unwrap(), PAY_TO)
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(X402Layer::with_payments(payments, Arc::new(offer)))
        .service_fn(|_: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"the report"))))
        });

    let challenge = service.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    let payment = SandboxWallet::random().pay(&required).unwrap();
    for _ in 0..2 {
        let paid = service
            .clone()
            .oneshot(request(Some(&payment)))
            .await
            .unwrap();
        assert_eq!(paid.status(), StatusCode::OK);
    }
    let mut cheap = SandboxWallet::random().pay(&required).unwrap();
    cheap.accepted.amount = 5u128.into();
    let refused = service
        .clone()
        .oneshot(request(Some(&cheap)))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    tower_x402_metrics::refresh();

    let scrape = recorder.render();
    let payments = |labels: &str| value(&scrape, &format!("x402_payments_total{{{labels}}}"));
    assert_eq!(
        value(&scrape, "x402_challenges_total"),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        payments(r#"outcome="settled",refusal="none""#),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        payments(r#"outcome="replayed",refusal="none""#),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        payments(r#"outcome="refused",refusal="no_matching_requirement""#),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        value(
            &scrape,
            r#"x402_facilitator_request_duration_seconds_count{facilitator="default",endpoint="settle",outcome="ok"}"#
        ),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        value(
            &scrape,
            r#"x402_facilitator_circuit_open{facilitator="default"}"#
        ),
        Some(0.0),
        "{scrape}"
    );
    assert_eq!(
        value(&scrape, "x402_payments_in_doubt"),
        Some(0.0),
        "{scrape}"
    );
    assert!(scrape.contains("# HELP x402_payments_total"), "{scrape}");
}
