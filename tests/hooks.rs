//! The lifecycle hooks against the sandbox facilitator, counting its calls: each outcome a hook
//! may choose, on the HTTP layer's paths.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::{Map, Value, json};
use tower::{ServiceBuilder, ServiceExt};
use tower_x402::payment::{
    Decision, HookStages, PaymentContext, PaymentHooks, Payments, ProtectedRequest, Refusal,
    RefusalKind, Scheme,
};
use tower_x402::settlement::PaymentKey;
use tower_x402::{
    BoxFuture, Facilitator, FacilitatorError, MemorySettlementStore, Offer, SettlementMode,
    VerifiedPayment, X402Layer,
};
use x402_wire::{FacilitatorRequest, SettleResponse, VerifyResponse};

const URL: &str = "https://shop.example/report";

/// What the hooks of one test saw.
#[derive(Default)]
struct Seen {
    settled: Mutex<Vec<PaymentKey>>,
    cancelled: AtomicUsize,
    verify_failures: AtomicUsize,
    settle_failures: AtomicUsize,
}

/// A hook whose every decision a test sets.
#[derive(Clone, Default)]
struct Scripted {
    seen: Arc<Seen>,
    grant_header: Option<&'static str>,
    abort_before_verify: bool,
    recover_verify: bool,
    abort_before_settle: Arc<AtomicBool>,
    enrich: bool,
    /// The stages it declares; every one when `None`.
    stages: Option<HookStages>,
}

impl PaymentHooks for Scripted {
    fn stages(&self) -> HookStages {
        self.stages.unwrap_or(HookStages::ALL)
    }

    fn on_protected_request<'a>(
        &'a self,
        request: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, Decision<http::Extensions>> {
        Box::pin(async move {
            match self.grant_header {
                Some(name) if request.field(name) == Some(b"let-me-in") => {
                    let mut extensions = http::Extensions::new();
                    extensions.insert(Granted("by the hook"));
                    Decision::Handled(extensions)
                }
                _ => Decision::Continue,
            }
        })
    }

    fn challenge_extension(
        &self,
        request: &ProtectedRequest<'_>,
    ) -> Option<(String, Box<serde_json::value::RawValue>)> {
        self.enrich.then(|| {
            let value = json!({ "path": request.path() });
            (
                "hooked".to_owned(),
                serde_json::value::to_raw_value(&value).unwrap(),
            )
        })
    }

    fn before_verify<'a>(
        &'a self,
        _: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<VerifyResponse>> {
        Box::pin(async move {
            if self.abort_before_verify {
                Decision::Abort(Refusal::Hook {
                    kind: RefusalKind::Conflict,
                    reason: "this buyer is blocked".to_owned(),
                })
            } else {
                Decision::Continue
            }
        })
    }

    fn on_verify_failure<'a>(
        &'a self,
        _: &'a PaymentContext<'a>,
        failure: Result<&'a VerifyResponse, &'a FacilitatorError>,
    ) -> BoxFuture<'a, Option<VerifyResponse>> {
        self.seen.verify_failures.fetch_add(1, Ordering::SeqCst);
        let recovered = self.recover_verify && failure.is_ok();
        Box::pin(async move {
            recovered.then(|| VerifyResponse {
                is_valid: true,
                payer: Some(PAYER.to_owned()),
                ..Default::default()
            })
        })
    }

    fn before_settle<'a>(
        &'a self,
        _: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<SettleResponse>> {
        Box::pin(async move {
            if self.abort_before_settle.load(Ordering::SeqCst) {
                Decision::Abort(Refusal::Hook {
                    kind: RefusalKind::PaymentRequired,
                    reason: "not settling this one".to_owned(),
                })
            } else {
                Decision::Continue
            }
        })
    }

    fn settlement_extensions(
        &self,
        _: &PaymentContext<'_>,
        _: &SettleResponse,
    ) -> Option<Map<String, Value>> {
        self.enrich.then(|| {
            let mut extensions = Map::new();
            extensions.insert("receipt".to_owned(), json!("r-1"));
            extensions
        })
    }

    fn after_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        _: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        self.seen.settled.lock().unwrap().push(payment.key.clone());
        Box::pin(async {})
    }
}

/// What the [`Stepped`] scheme notes on a payment it verified.
#[derive(Clone)]
struct Noted;

/// `exact` registered again with steps of its own, in place of the hook methods that once did
/// this: it notes each payment it verifies, completes the `/settle` request from that note
/// (when `enrich`), answers a settlement of its own after a refused `/settle` (when
/// `recover_settle`), and counts the payments it releases.
#[derive(Clone, Default)]
struct Stepped {
    seen: Arc<Seen>,
    recover_settle: bool,
    enrich: bool,
}

impl Scheme for Stepped {
    fn name(&self) -> &str {
        "exact"
    }

    fn verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut http::Extensions,
    ) -> Option<BoxFuture<'a, Result<VerifyResponse, Refusal>>> {
        Some(Box::pin(async move {
            let verified = payment.verify_at_facilitator().await?;
            notes.insert(Noted);
            Ok(verified)
        }))
    }

    fn completed_request(
        &self,
        request: &FacilitatorRequest,
        notes: &http::Extensions,
    ) -> Option<FacilitatorRequest> {
        (self.enrich && notes.get::<Noted>().is_some()).then(|| {
            let mut fields = Map::new();
            fields.insert("voucher".to_owned(), json!({ "id": 7 }));
            request.with_fields(fields)
        })
    }

    fn settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        _: &'a mut http::Extensions,
    ) -> Option<BoxFuture<'a, Result<SettleResponse, Refusal>>> {
        Some(Box::pin(async move {
            match payment.settle_at_facilitator().await {
                Err(Refusal::SettlementRefused(refused)) => {
                    self.seen.settle_failures.fetch_add(1, Ordering::SeqCst);
                    if !self.recover_settle {
                        return Err(Refusal::SettlementRefused(refused));
                    }
                    let mut settled = SettleResponse::failure(refused.network.clone(), "");
                    settled.success = true;
                    settled.error_reason = None;
                    settled.transaction = "0xsettled-by-the-scheme".to_owned();
                    Ok(settled)
                }
                answered => answered,
            }
        }))
    }

    fn release(&self, _: &PaymentKey, notes: http::Extensions) -> Option<BoxFuture<'static, ()>> {
        notes.get::<Noted>()?;
        let seen = Arc::clone(&self.seen);
        Some(Box::pin(async move {
            seen.cancelled.fetch_add(1, Ordering::SeqCst);
        }))
    }
}

/// What a granting hook puts in the request's extensions.
#[derive(Clone, Debug)]
struct Granted(&'static str);

/// The inner service: 200 with what the layer said, or 500 when told to fail.
async fn inner(
    request: Request<Full<Bytes>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if request.headers().contains_key("x-fail") {
        let mut failed = Response::new(Full::new(Bytes::from_static(b"broken")));
        *failed.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        return Ok(failed);
    }
    let granted = request
        .extensions()
        .get::<Granted>()
        .map(|granted| granted.0);
    let paid = request.extensions().get::<VerifiedPayment>().is_some();
    let body = json!({ "granted": granted, "paid": paid });
    Ok(Response::new(Full::new(Bytes::from(body.to_string()))))
}

/// A paid request for `/report` whose handler fails (`x-fail`), its payment made from `seed`.
fn failing(offer: &Offer, seed: u8) -> Request<Full<Bytes>> {
    let mut request = paid_get("/report", &payment(offer, seed));
    request
        .headers_mut()
        .insert("x-fail", http::HeaderValue::from_static("1"));
    request
}

type Answer = Response<tower_x402::layer::ResponseBody<Full<Bytes>>>;

/// Sends `request` through a layer built on `payments` with `offer`.
async fn send(payments: &Payments, offer: &Arc<Offer>, request: Request<Full<Bytes>>) -> Answer {
    let layer = X402Layer::with_payments(payments.clone(), Arc::clone(offer));
    ServiceBuilder::new()
        .layer(layer)
        .service_fn(inner)
        .oneshot(request)
        .await
        .unwrap()
}

/// Records the fields of each `/settle` request before the sandbox answers it.
#[derive(Clone)]
struct Recording {
    sandbox: SandboxFacilitator,
    settle_fields: Arc<Mutex<Vec<Option<Map<String, Value>>>>>,
}

impl Facilitator for Recording {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.sandbox.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.settle_fields
            .lock()
            .unwrap()
            .push(request.fields().cloned());
        self.sandbox.settle(request)
    }
}

fn calls(sandbox: &SandboxFacilitator) -> (usize, usize) {
    (sandbox.verify_calls(), sandbox.settle_calls())
}

#[tokio::test]
async fn a_granted_request_is_served_without_any_verify() {
    let sandbox = accepting();
    let hook = Scripted {
        grant_header: Some("x-pass"),
        ..Scripted::default()
    };
    let payments = Payments::new(sandbox.clone()).hook(hook);
    let offer = offer(URL, SettlementMode::After);

    let granted = Request::get("/report")
        .header("x-pass", "let-me-in")
        .body(Full::default())
        .unwrap();
    let response = send(&payments, &offer, granted).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(!response.headers().contains_key("payment-response"));
    assert_eq!(
        body_json(response).await,
        json!({ "granted": "by the hook", "paid": false })
    );
    assert_eq!(calls(&sandbox), (0, 0), "(/verify, /settle)");

    // Without the field the hook lets the request go on to the challenge.
    let response = send(&payments, &offer, get("/report")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(calls(&sandbox), (0, 0));
}

/// A hook that grants requests whose `x-pass` says so, considers only requests carrying
/// `x-pass`, and counts how often it is asked whether it considers a request and how often
/// to decide one.
#[derive(Clone, Default)]
struct Picky {
    considered: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
}

impl Picky {
    /// (asked whether it considers a request, asked to decide one)
    fn counts(&self) -> (usize, usize) {
        (
            self.considered.load(Ordering::SeqCst),
            self.asked.load(Ordering::SeqCst),
        )
    }
}

impl PaymentHooks for Picky {
    fn stages(&self) -> HookStages {
        HookStages::REQUEST
    }

    fn considers_request(&self, request: &ProtectedRequest<'_>) -> bool {
        self.considered.fetch_add(1, Ordering::SeqCst);
        request.field("x-pass").is_some()
    }

    fn on_protected_request<'a>(
        &'a self,
        request: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, Decision<http::Extensions>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if request.field("x-pass") == Some(b"let-me-in") {
                let mut extensions = http::Extensions::new();
                extensions.insert(Granted("by the picky hook"));
                Decision::Handled(extensions)
            } else {
                Decision::Continue
            }
        })
    }
}

/// `GET /report` carrying `x-pass: pass`, the field [`Picky`] considers.
fn with_pass(pass: &str) -> Request<Full<Bytes>> {
    Request::get("/report")
        .header("x-pass", pass)
        .body(Full::default())
        .unwrap()
}

#[tokio::test]
async fn a_hook_is_asked_only_about_the_requests_it_considers() {
    let sandbox = accepting();
    let picky = Picky::default();
    let payments = Payments::new(sandbox.clone()).hook(picky.clone());
    let offer = offer(URL, SettlementMode::After);
    let asked = || picky.asked.load(Ordering::SeqCst);

    // Neither the challenge nor a payment without the field asks the hook.
    let response = send(&payments, &offer, get("/report")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 1))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        body_json(response).await,
        json!({ "granted": null, "paid": true })
    );
    assert_eq!(asked(), 0);
    assert_eq!(calls(&sandbox), (1, 1), "(/verify, /settle)");

    // With the field it is asked, and decides.
    let response = send(&payments, &offer, with_pass("let-me-in")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        body_json(response).await,
        json!({ "granted": "by the picky hook", "paid": false })
    );
    let response = send(&payments, &offer, with_pass("no")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(asked(), 2);
    assert_eq!(calls(&sandbox), (1, 1));
}

#[tokio::test]
async fn each_hook_is_asked_once_per_request_whether_it_considers_it() {
    let sandbox = accepting();
    let (first, second) = (Picky::default(), Picky::default());
    let payments = Payments::new(sandbox.clone())
        .hook(first.clone())
        .hook(second.clone());
    let offer = offer(URL, SettlementMode::After);

    // Both consider it and neither grants it: each is asked once of each.
    let response = send(&payments, &offer, with_pass("no")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!((first.counts(), second.counts()), ((1, 1), (1, 1)));

    // The first grants it: the second is asked nothing.
    let response = send(&payments, &offer, with_pass("let-me-in")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!((first.counts(), second.counts()), ((2, 2), (1, 1)));

    // Neither considers it: each is asked that once, and nothing else.
    let response = send(&payments, &offer, get("/report")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!((first.counts(), second.counts()), ((3, 2), (2, 1)));
    assert_eq!(calls(&sandbox), (0, 0), "(/verify, /settle)");
}

#[tokio::test]
async fn a_hook_aborts_before_verify_with_its_refusal() {
    let sandbox = accepting();
    let hook = Scripted {
        abort_before_verify: true,
        ..Scripted::default()
    };
    let payments = Payments::new(sandbox.clone()).hook(hook);
    let offer = offer(URL, SettlementMode::Before);
    let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 1))).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(
        body_json(response).await,
        json!({ "x402Version": 2, "error": "this buyer is blocked" })
    );
    assert_eq!(calls(&sandbox), (0, 0), "(/verify, /settle)");
}

#[tokio::test]
async fn a_verify_failure_is_recovered_by_the_hook() {
    let sandbox = scripted(Step::Refuse("insufficient_funds".to_owned()), Step::Trust);
    let seen = Arc::new(Seen::default());
    let hook = Scripted {
        seen: Arc::clone(&seen),
        recover_verify: true,
        ..Scripted::default()
    };
    let payments = Payments::new(sandbox.clone()).hook(hook);
    let offer = offer(URL, SettlementMode::After);
    let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 1))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(decode_settlement(&response).success);
    assert_eq!(calls(&sandbox), (1, 1), "(/verify, /settle)");
    assert_eq!(seen.verify_failures.load(Ordering::SeqCst), 1);
    assert_eq!(seen.settled.lock().unwrap().len(), 1);

    // Without the recovery the same refusal is a 402.
    let plain = Payments::new(sandbox.clone());
    let response = send(&plain, &offer, paid_get("/report", &payment(&offer, 2))).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
}

#[tokio::test]
async fn aborted_before_settle_sends_no_settle_and_releases_the_payment() {
    for mode in [SettlementMode::Before, SettlementMode::After] {
        let sandbox = accepting();
        let abort = Arc::new(AtomicBool::new(true));
        let seen = Arc::new(Seen::default());
        let hook = Scripted {
            seen: Arc::clone(&seen),
            abort_before_settle: Arc::clone(&abort),
            ..Scripted::default()
        };
        let store = MemorySettlementStore::default();
        let payments = Payments::new(sandbox.clone())
            .settlement_store(store.clone())
            .hook(hook);
        let offer = offer(URL, mode);
        let paid = payment(&offer, 1);
        let response = send(&payments, &offer, paid_get("/report", &paid)).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{mode:?}");
        assert_eq!(
            decode_required(&response).error.as_deref(),
            Some("not settling this one")
        );
        assert_eq!(calls(&sandbox), (1, 0), "{mode:?}: (/verify, /settle)");
        assert!(
            store.entry(&PaymentKey::of(&paid)).is_none(),
            "{mode:?}: released"
        );
        assert!(seen.settled.lock().unwrap().is_empty());

        // Released: the same payment is usable again once the hook lets it settle.
        abort.store(false, Ordering::SeqCst);
        let response = send(&payments, &offer, paid_get("/report", &paid)).await;
        assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
        assert_eq!(calls(&sandbox), (2, 1), "{mode:?}");
        assert_eq!(seen.settled.lock().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn after_settle_is_called_once_for_a_payment_sent_twenty_times_at_once() {
    for mode in [SettlementMode::Before, SettlementMode::After] {
        let sandbox = accepting();
        let seen = Arc::new(Seen::default());
        let hook = Scripted {
            seen: Arc::clone(&seen),
            ..Scripted::default()
        };
        let payments = Payments::new(sandbox.clone()).hook(hook);
        let offer = offer(URL, mode);
        let paid = payment(&offer, 1);
        let service = ServiceBuilder::new()
            .layer(X402Layer::with_payments(payments, Arc::clone(&offer)))
            .service_fn(inner);
        let sends: Vec<_> = (0..20)
            .map(|_| tokio::spawn(service.clone().oneshot(paid_get("/report", &paid))))
            .collect();
        for send in sends {
            assert_eq!(
                send.await.unwrap().unwrap().status(),
                StatusCode::OK,
                "{mode:?}"
            );
        }
        assert_eq!(sandbox.settle_calls(), 1, "{mode:?}");
        assert_eq!(
            *seen.settled.lock().unwrap(),
            [PaymentKey::of(&paid)],
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn after_settle_is_called_once_for_a_payment_recovered_after_a_restart() {
    let sandbox = accepting();
    sandbox.queue_settle(Step::AnswerLost);
    let store = MemorySettlementStore::default();
    let offer = offer(URL, SettlementMode::After);
    let paid = payment(&offer, 1);

    let before = Arc::new(Seen::default());
    let first = Payments::new(sandbox.clone())
        .settlement_store(store.clone())
        .hook(Scripted {
            seen: Arc::clone(&before),
            ..Scripted::default()
        });
    let response = send(&first, &offer, paid_get("/report", &paid)).await;
    assert_eq!(
        response.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "in doubt"
    );
    assert!(
        before.settled.lock().unwrap().is_empty(),
        "nothing known settled yet"
    );
    drop(first);

    // A new process on the same store: the retry recovers the payment, proven by the chain.
    let after = Arc::new(Seen::default());
    let restarted = Payments::new(sandbox.clone())
        .settlement_store(store.clone())
        .reconciler(sandbox.clone())
        .hook(Scripted {
            seen: Arc::clone(&after),
            ..Scripted::default()
        });
    let response = send(&restarted, &offer, paid_get("/report", &paid)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let again = send(&restarted, &offer, paid_get("/report", &paid)).await;
    assert_eq!(again.status(), StatusCode::OK, "answered from the record");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    assert_eq!(*after.settled.lock().unwrap(), [PaymentKey::of(&paid)]);
}

#[tokio::test]
async fn a_settle_failure_is_recovered_by_the_schemes_settle_step() {
    let sandbox = scripted(Step::Trust, Step::Refuse("insufficient_funds".to_owned()));
    let seen = Arc::new(Seen::default());
    let hook = Scripted {
        seen: Arc::clone(&seen),
        ..Scripted::default()
    };
    let scheme = Stepped {
        seen: Arc::clone(&seen),
        recover_settle: true,
        ..Stepped::default()
    };
    let payments = Payments::new(sandbox.clone()).scheme(scheme).hook(hook);
    let offer = offer(URL, SettlementMode::After);
    let paid = payment(&offer, 1);
    let response = send(&payments, &offer, paid_get("/report", &paid)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        decode_settlement(&response).transaction,
        "0xsettled-by-the-scheme"
    );
    assert_eq!(calls(&sandbox), (1, 1), "(/verify, /settle)");
    assert_eq!(seen.settle_failures.load(Ordering::SeqCst), 1);
    // The scheme's own key (its default identity), heard once by the hook.
    assert_eq!(seen.settled.lock().unwrap().len(), 1);

    // Recorded: the repeat is answered with the scheme's settlement, nothing sent.
    let again = send(&payments, &offer, paid_get("/report", &paid)).await;
    assert_eq!(
        decode_settlement(&again).transaction,
        "0xsettled-by-the-scheme"
    );
    assert_eq!(calls(&sandbox), (1, 1));
}

#[tokio::test]
async fn the_scheme_releases_a_payment_whose_handler_fails_under_settle_after() {
    let sandbox = accepting();
    let seen = Arc::new(Seen::default());
    let scheme = Stepped {
        seen: Arc::clone(&seen),
        ..Stepped::default()
    };
    let payments = Payments::new(sandbox.clone()).scheme(scheme);
    let offer = offer(URL, SettlementMode::After);
    let response = send(&payments, &offer, failing(&offer, 1)).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(calls(&sandbox), (1, 0), "(/verify, /settle)");
    assert_eq!(seen.cancelled.load(Ordering::SeqCst), 1);
    assert!(seen.settled.lock().unwrap().is_empty());

    // A handler that succeeds is settled, not cancelled.
    let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 2))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(seen.cancelled.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_scheme_releases_a_payment_whose_client_goes_away_before_settlement() {
    let sandbox = accepting();
    let seen = Arc::new(Seen::default());
    let scheme = Stepped {
        seen: Arc::clone(&seen),
        ..Stepped::default()
    };
    let payments = Payments::new(sandbox.clone()).scheme(scheme);
    let offer = offer(URL, SettlementMode::After);
    let slow = tower::service_fn(|_: Request<Full<Bytes>>| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default()))
    });
    let service = ServiceBuilder::new()
        .layer(X402Layer::with_payments(payments, Arc::clone(&offer)))
        .service(slow);
    let call = service.oneshot(paid_get("/report", &payment(&offer, 1)));
    // The handler is running when the client hangs up.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), call)
            .await
            .is_err()
    );
    for _ in 0..50 {
        if seen.cancelled.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(calls(&sandbox), (1, 0));
}

#[tokio::test]
async fn enrichment_reaches_the_challenge_the_settle_request_and_the_payment_response() {
    let sandbox = accepting();
    let recording = Recording {
        sandbox: sandbox.clone(),
        settle_fields: Arc::default(),
    };
    let hook = Scripted {
        enrich: true,
        ..Scripted::default()
    };
    // The hook decorates the challenge and the response; the scheme completes the request.
    let scheme = Stepped {
        enrich: true,
        ..Stepped::default()
    };
    let payments = Payments::new(recording.clone()).scheme(scheme).hook(hook);
    let offer = offer(URL, SettlementMode::Before);

    let challenge = send(&payments, &offer, get("/report?x=1")).await;
    assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
    let required = decode_required(&challenge);
    assert_eq!(
        required.extensions.unwrap()["hooked"],
        json!({ "path": "/report?x=1" })
    );
    let body = body_json(challenge).await;
    assert_eq!(body["extensions"]["hooked"]["path"], "/report?x=1");

    let paid = payment(&offer, 1);
    let response = send(&payments, &offer, paid_get("/report", &paid)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let settlement = decode_settlement(&response);
    assert_eq!(settlement.extensions.unwrap()["receipt"], "r-1");
    let fields = recording.settle_fields.lock().unwrap().clone();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].as_ref().unwrap()["voucher"], json!({ "id": 7 }));

    // A repeat is answered from the record, with the same extensions.
    let again = send(&payments, &offer, paid_get("/report", &paid)).await;
    assert_eq!(
        decode_settlement(&again).extensions.unwrap()["receipt"],
        "r-1"
    );
    assert_eq!(sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn a_hook_is_asked_only_at_the_stages_it_declares() {
    for mode in [SettlementMode::Before, SettlementMode::After] {
        let sandbox = accepting();
        let recording = Recording {
            sandbox: sandbox.clone(),
            settle_fields: Arc::default(),
        };
        let seen = Arc::new(Seen::default());
        // It would refuse every payment before `/verify` and before `/settle`, but declares only
        // the settlement's end: none of that is asked.
        let hook = Scripted {
            seen: Arc::clone(&seen),
            abort_before_verify: true,
            abort_before_settle: Arc::new(AtomicBool::new(true)),
            enrich: true,
            stages: Some(HookStages::AFTER_SETTLE),
            ..Scripted::default()
        };
        let payments = Payments::new(recording.clone()).hook(hook);
        let offer = offer(URL, mode);
        let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 1))).await;
        assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
        let settlement = decode_settlement(&response);
        assert!(settlement.success);
        // Its synchronous methods are always called: the settlement carries its extension.
        assert_eq!(settlement.extensions.unwrap()["receipt"], "r-1");
        // Settled before the work: `/settle` alone.
        let verified = usize::from(mode == SettlementMode::After);
        assert_eq!(calls(&sandbox), (verified, 1), "(/verify, /settle)");
        assert_eq!(*recording.settle_fields.lock().unwrap(), vec![None]);
        assert_eq!(seen.settled.lock().unwrap().len(), 1, "after_settle asked");
    }

    // Declaring no stage: a failing handler's payment is released without asking it, and a
    // settled one is not reported to it.
    let sandbox = accepting();
    let seen = Arc::new(Seen::default());
    let hook = Scripted {
        seen: Arc::clone(&seen),
        stages: Some(HookStages::NONE),
        ..Scripted::default()
    };
    let payments = Payments::new(sandbox.clone()).hook(hook);
    let offer = offer(URL, SettlementMode::After);
    let response = send(&payments, &offer, failing(&offer, 1)).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 2))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls(&sandbox), (2, 1), "(/verify, /settle)");
    assert!(seen.settled.lock().unwrap().is_empty());
}

/// Overrides the request's gate and the settlement's end but declares no stage: the defaults
/// must keep it out of both.
#[derive(Clone, Default)]
struct Undeclared {
    considered: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
    settled: Arc<AtomicUsize>,
}

impl PaymentHooks for Undeclared {
    fn considers_request(&self, _: &ProtectedRequest<'_>) -> bool {
        self.considered.fetch_add(1, Ordering::SeqCst);
        true
    }

    fn on_protected_request<'a>(
        &'a self,
        _: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, Decision<http::Extensions>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Decision::Continue })
    }

    fn after_settle<'a>(
        &'a self,
        _: &'a PaymentContext<'a>,
        _: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        self.settled.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {})
    }
}

#[tokio::test]
async fn a_hook_that_declares_no_stage_is_asked_nothing_but_its_synchronous_methods() {
    let sandbox = accepting();
    let hook = Undeclared::default();
    let payments = Payments::new(sandbox.clone()).hook(hook.clone());
    let offer = offer(URL, SettlementMode::After);

    let response = send(&payments, &offer, get("/report")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let response = send(&payments, &offer, paid_get("/report", &payment(&offer, 1))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls(&sandbox), (1, 1), "(/verify, /settle)");
    // The default stages are none: not asked whether it considers a request, nor to decide
    // one, nor told of the settlement.
    assert_eq!(
        hook.considered.load(Ordering::SeqCst),
        0,
        "considers_request"
    );
    assert_eq!(hook.asked.load(Ordering::SeqCst), 0, "on_protected_request");
    assert_eq!(hook.settled.load(Ordering::SeqCst), 0, "after_settle");
}
