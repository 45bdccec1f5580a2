//! `GET /api/x402/{sku}`: the purchase handler behind the x402 paywall.
//!
//! The price of a request is decided from its path alone: the last segment, percent-decoded
//! as axum's `Path` extractor decodes it ([`Catalog::for_path`], which the handler reads its
//! product with too), names the product. So every spelling of a known slug
//! (`store-rail%2Dreceipt`) is priced, and a
//! slug the catalog does not know is [`Price::NotSold`]: the paywall answers 404 itself and the
//! handler never runs — an unknown product never gets a challenge and a known one never runs
//! unpaid. The request body is never looked at, so a body on the GET cannot stand between a
//! client and its 402.
//!
//! An unusable `PAYMENT-SIGNATURE` (not base64, not JSON, not version 2, too large) is answered
//! 402 with the challenge whose `error` says what was wrong with the header, as the
//! specification's error table and the reference servers do.
//!
//! Payments settle before the handler runs ([`SettlementMode::Before`](tower_x402::SettlementMode)),
//! because the handler issues a Passport: that must never happen without the money.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRef;
use axum::extract::Request;
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{MethodRouter, get_service};
use tower::Layer as _;
use tower::layer::util::Stack;
use tower::{ServiceExt, service_fn};
use tower_http::cors::CorsLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_x402::cors::PAYMENT_REQUEST_HEADERS;
use tower_x402::facilitator::Facilitators;
use tower_x402::payment::Payments;
use tower_x402::settlement::Reconciler;
use tower_x402::{PaywallPage, Price, X402Layer, payment_cors};
use tower_x402_evm::{AccountCode, EvmExact};
use tower_x402_metrics::{self as metrics, Metered, PaymentMetrics};
use tower_x402_siwx::SignInWithX;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::sales::purchase::purchase;
use crate::sales::standing::Standing;
use crate::state::PaymentsInProgress;
use crate::storage::Store;

use shared::Shared;

pub mod doors;
mod shared;

/// The paid GET (mounted by the app at each product's path and at `/api/x402/{sku}`): the
/// purchase handler behind the paywall, priced from the state's [`Catalog`], paying through its
/// [`Facilitators`], recording settlements in its [`Store`] and reporting payment events to its
/// [`Standing`].
pub fn paid_get<S>(state: &S) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Catalog>: FromRef<S>,
    Arc<Config>: FromRef<S>,
    Store: FromRef<S>,
    Standing: FromRef<S>,
    Facilitators: FromRef<S>,
    Option<Arc<dyn Reconciler>>: FromRef<S>,
    Option<Arc<dyn AccountCode>>: FromRef<S>,
    PaymentsInProgress: FromRef<S>,
{
    let catalog = Arc::<Catalog>::from_ref(state);
    let config = Arc::<Config>::from_ref(state);
    let site_name = if catalog.is_demo() {
        "x402 example store — demo mode: sandbox payments, no real money"
    } else {
        "x402 example store"
    };
    let checkout = Arc::clone(&catalog);
    let names = Arc::clone(&catalog);
    let checkout_config = Arc::clone(&config);
    let pricing = move |parts: &Parts| match catalog.for_path(parts.uri.path()) {
        Some(sku) => Price::Charge(sku.offer.clone()),
        None => Price::not_found("unknown SKU: no product is sold at this path"),
    };
    let page = PaywallPage::new()
        .site_name(site_name)
        .product_name(move |offer| {
            let slug = offer.resource().url.rsplit('/').next()?;
            Some(names.get(slug)?.summary.to_owned())
        })
        .checkout(move |offer| {
            let slug = offer.resource().url.rsplit('/').next()?;
            let sku = checkout.get(slug)?;
            checkout_config.checkout_link(&sku.slug)
        });
    // Every part of the payment core reports to the metrics: each facilitator's calls and
    // breaker, the ledger's failures, the reconciler's answers and the payments' outcomes.
    let mut payments =
        Payments::with_facilitators(metrics::facilitators(Facilitators::from_ref(state)))
            .settlement_store(Metered(Store::from_ref(state)))
            .settlement_lease(Duration::from_secs(config.settlement_lease))
            .verify_before_settling(config.verify_before_settling)
            .hook(PaymentMetrics)
            .hook(Standing::from_ref(state))
            // Solana payments keyed by the message their payer signed.
            .scheme(tower_x402_solana::SolanaExact::new())
            // EVM payments whose signature is not their payer's refused before the facilitator.
            .scheme(evm_exact(Option::<Arc<dyn AccountCode>>::from_ref(state)));
    if let Some(reconciler) = Option::<Arc<dyn Reconciler>>::from_ref(state) {
        payments = payments.reconciler(Metered(reconciler));
    }
    match sign_in(&config, &Store::from_ref(state)) {
        Ok(siwx) => payments = payments.hook(siwx),
        Err(error) => {
            tracing::error!(%error, "sign-in-with-x is off: its settings are unusable");
        }
    }
    let paywall = X402Layer::with_payments(payments, pricing)
        // The specification's answer to a paid resource requested without a valid payment.
        .invalid_header_payment_required()
        // The route's CORS writes `Access-Control-Expose-Headers` on every answer.
        .expose_headers(None)
        .paywall_page(page);
    PaymentsInProgress::from_ref(state).keep(paywall.payments());
    // The service is built once: the handler with the three parts of the state it reads, the
    // paywall around it, CORS around both. The paywall wraps the GET's handler only, so other
    // methods get 405.
    let purchase_state = PurchaseState {
        catalog: Arc::<Catalog>::from_ref(state),
        config: Arc::clone(&config),
        store: Store::from_ref(state),
    };
    let handler = Handler::<_, PurchaseState>::with_state(purchase, purchase_state);
    let cors = cors(&config.cors_origins);
    // (CORS writes a preflight's body itself: the paywall's body is made axum's for it.)
    let paid =
        ServiceExt::<Request>::map_response(paywall.layer(handler), |answer| answer.map(Body::new));
    // Shared: the layers the app mounts around every route clone a reference, and each request
    // clones the paywall, CORS and handler once. When any origin may pay, a GET's CORS headers
    // are the same for every request: set as they are, without the header map tower-http's
    // CORS builds for each request. Other methods, the preflight (OPTIONS) among them, go
    // through tower-http's CORS, which answers the preflight itself; other methods get 405.
    let get = if config.cors_origins.is_empty() {
        get_service(Shared::new(any_origin_headers().layer(paid)))
    } else {
        get_service(Shared::new(cors.layer(paid)))
    };
    get.fallback_service(cors.layer(service_fn(method_not_allowed)))
}

/// The CORS headers of every answer to a GET when any origin may pay: the ones [`cors`] writes
/// on an answer that is not a preflight's (`Access-Control-Allow-Origin: *` and the exposed
/// payment headers; no `Vary`).
fn any_origin_headers()
-> Stack<SetResponseHeaderLayer<HeaderValue>, SetResponseHeaderLayer<HeaderValue>> {
    Stack::new(
        SetResponseHeaderLayer::overriding(header::ACCESS_CONTROL_ALLOW_ORIGIN, ANY_ORIGIN),
        SetResponseHeaderLayer::overriding(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSED),
    )
}

/// `Access-Control-Allow-Origin` when any origin may pay.
const ANY_ORIGIN: HeaderValue = HeaderValue::from_static("*");

/// `Access-Control-Expose-Headers` as tower-http joins [`payment_cors`]'s list.
const EXPOSED: HeaderValue = HeaderValue::from_static("payment-required,payment-response");

/// Any method but GET and HEAD; the router adds `Allow`, the app's JSON errors the body.
async fn method_not_allowed(_: Request) -> Result<Response, Infallible> {
    Ok(StatusCode::METHOD_NOT_ALLOWED.into_response())
}

/// What the purchase handler reads of the app's state, and nothing more: the route's service is
/// cloned for every request, and so is this.
#[derive(Clone)]
struct PurchaseState {
    catalog: Arc<Catalog>,
    config: Arc<Config>,
    store: Store,
}

impl FromRef<PurchaseState> for Arc<Catalog> {
    fn from_ref(state: &PurchaseState) -> Self {
        Arc::clone(&state.catalog)
    }
}

impl FromRef<PurchaseState> for Arc<Config> {
    fn from_ref(state: &PurchaseState) -> Self {
        Arc::clone(&state.config)
    }
}

impl FromRef<PurchaseState> for Store {
    fn from_ref(state: &PurchaseState) -> Self {
        state.store.clone()
    }
}

/// Sign-in-with-x on every SKU: the challenge bound to the store's public origin (the base
/// URL's), nonces derived from the fulfillment secret (shared by every instance), entitlements
/// and consumed nonces in the store's database ([`Store::entitlements`]), smart-contract
/// wallets checked through `STORE_RPC_URL` when it is set.
fn sign_in(config: &Config, store: &Store) -> Result<SignInWithX, tower_x402::BoxError> {
    use hmac::{Hmac, Mac as _};
    let secret = config
        .fulfillment_secret
        .as_deref()
        .ok_or("no fulfillment secret to derive the sign-in secret from")?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret)?;
    mac.update(b"x402-store sign-in-with-x nonces");
    let mut siwx = SignInWithX::new(&config.origin(), mac.finalize().into_bytes())?
        .statement("Sign in with the wallet that paid to get your purchase again")
        .entitlement_store(store.entitlements())
        .entitlement_lifetime(config.siwx_entitlement);
    if let Some(rpc) = &config.rpc_url {
        siwx = siwx.evm_rpc(rpc)?;
    }
    Ok(siwx)
}

/// Any origin may pay unless `STORE_CORS_ORIGINS` names the allowed ones; pages may send the
/// referral and sign-in headers beside the payment's.
///
/// Open to any origin, every answer carries the same CORS headers whatever the request's
/// `Origin`, and every answer of the route is `Cache-Control: no-store`: no `Vary` (a cache's
/// key) is sent. With named origins the allowed origin is echoed, and tower-http's `Vary` says so.
fn cors(origins: &[String]) -> CorsLayer {
    let headers: Vec<HeaderName> = PAYMENT_REQUEST_HEADERS
        .into_iter()
        .chain([
            crate::sales::referral::HEADER,
            tower_x402_siwx::SIGN_IN_WITH_X,
        ])
        .collect();
    let cors = payment_cors().allow_headers(headers);
    if origins.is_empty() {
        return cors.vary([]);
    }
    let allowed: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|origin| HeaderValue::try_from(origin.as_str()).ok())
        .collect();
    cors.allow_origin(allowed)
}

/// The EVM `exact` scheme, asking `code` (when there is a source) whether a payer whose
/// signature is not its key's is a contract wallet.
fn evm_exact(code: Option<Arc<dyn AccountCode>>) -> EvmExact {
    match code {
        Some(code) => EvmExact::new().account_code(code),
        None => EvmExact::new(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;

    /// An answer to `method` from `layer` around a handler that sets no header.
    async fn headers_of<L>(layer: L, method: Method) -> axum::http::HeaderMap
    where
        L: tower::Layer<tower::util::BoxCloneSyncService<Request, Response, Infallible>>,
        L::Service: tower::Service<Request, Response = Response, Error = Infallible>,
    {
        let inner = tower::util::BoxCloneSyncService::new(service_fn(|_: Request| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        }));
        let request = Request::builder()
            .method(method)
            .uri("/api/x402/store-rail-receipt")
            .header(header::ORIGIN, "https://shop.example")
            .body(Body::empty())
            .unwrap();
        layer
            .layer(inner)
            .oneshot(request)
            .await
            .unwrap()
            .headers()
            .clone()
    }

    #[tokio::test]
    async fn a_get_carries_the_cors_headers_tower_http_writes() {
        for method in [Method::GET, Method::HEAD] {
            let by_cors = headers_of(cors(&[]), method.clone()).await;
            assert_eq!(by_cors.len(), 2, "{by_cors:?}");
            assert_eq!(headers_of(any_origin_headers(), method).await, by_cors);
        }
    }
}
