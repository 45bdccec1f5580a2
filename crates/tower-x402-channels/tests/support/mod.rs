//! A server selling `/rows` with `batch-settlement` over loopback HTTP against the sandbox
//! facilitator, and a buyer with a channel to it: shared by the scheme's tests here and in
//! tower-x402-postgres.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Query;
use axum::routing::get;
use axum::{Extension, Router};
use http::StatusCode;
use serde_json::Value;
use tower_x402::facilitator::Facilitators;
use tower_x402::payment::{PaymentHooks, Payments};
use tower_x402::proto::{
    AtomicAmount, PaymentPayload, PaymentRequirements, ResourceInfo, SettleResponse,
    UsdcDeployment, header,
};
use tower_x402::{BoxError, BoxFuture};
use tower_x402::{Charge, Facilitator, HttpFacilitator, Offer, Price, SettlementMode, X402Layer};
use tower_x402_channels::{
    BatchSettlement, ChannelConfig, ChannelOffer, ChannelStore, ClaimAuthorizer, VoucherClaim,
};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::Network;

pub(crate) const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// At most 0.01 USDC a request; 0.001 USDC a row.
pub(crate) const AMOUNT: u128 = 10_000;
pub(crate) const ROW: u128 = 1_000;
pub(crate) const DEPOSIT: u128 = 1_000_000;

pub(crate) async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

#[derive(serde::Deserialize)]
pub(crate) struct Rows {
    pub(crate) count: u64,
}

pub(crate) async fn rows(Query(rows): Query<Rows>, Extension(charge): Extension<Charge>) -> String {
    charge.add(AtomicAmount(u128::from(rows.count) * ROW));
    format!("{} rows", rows.count)
}

pub(crate) async fn broken() -> StatusCode {
    StatusCode::INTERNAL_SERVER_ERROR
}

/// A server selling `/rows` and `/broken` with `batch-settlement`, over the sandbox.
pub(crate) struct Server {
    pub(crate) sandbox: SandboxFacilitator,
    pub(crate) sandbox_url: String,
    pub(crate) base: String,
    pub(crate) accept: PaymentRequirements,
    pub(crate) channels: Arc<dyn ChannelStore>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// A server keeping channels in `channels`, with a sandbox of its own.
    pub(crate) async fn start(channels: Arc<dyn ChannelStore>) -> Self {
        Self::configured(channels, Box::new(|scheme| scheme)).await
    }

    /// A server whose scheme is set up by `configure`, with a sandbox of its own.
    pub(crate) async fn configured(channels: Arc<dyn ChannelStore>, configure: Configure) -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        Self::with_sandbox(sandbox, url, channels, None, configure, None, None).await
    }

    /// A server with `hook` registered after the scheme, with a sandbox of its own.
    pub(crate) async fn hooked(
        channels: Arc<dyn ChannelStore>,
        hook: impl PaymentHooks + 'static,
    ) -> Self {
        Self::extended(channels, Box::new(move |payments| payments.hook(hook))).await
    }

    /// A server whose payments are extended by `after` once the scheme is registered, with a
    /// sandbox of its own.
    pub(crate) async fn extended(channels: Arc<dyn ChannelStore>, after: After) -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        Self::with_sandbox(
            sandbox,
            url,
            channels,
            None,
            Box::new(|scheme| scheme),
            Some(after),
            None,
        )
        .await
    }

    /// A server extended by `after`, which is given the server's sandbox.
    pub(crate) async fn extended_with(
        channels: Arc<dyn ChannelStore>,
        after: impl FnOnce(&SandboxFacilitator) -> After,
    ) -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        let after = after(&sandbox);
        Self::with_sandbox(
            sandbox,
            url,
            channels,
            None,
            Box::new(|scheme| scheme),
            Some(after),
            None,
        )
        .await
    }

    /// A server owning its receiver-authorizer key, `key`: its accepts name it, and its
    /// refunds are signed with it.
    pub(crate) async fn owning(channels: Arc<dyn ChannelStore>, key: SandboxWallet) -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        let key = Arc::new(key);
        let terms = ChannelOffer::new(key.address());
        let key = Arc::clone(&key);
        let configure: Configure =
            Box::new(move |scheme| scheme.authorizer(OwnKey(Arc::clone(&key), key.address())));
        Self::with_sandbox(sandbox, url, channels, Some(terms), configure, None, None).await
    }

    /// Another server (an instance beside `self`, or after it stopped) on the same sandbox.
    pub(crate) async fn beside(&self, channels: Arc<dyn ChannelStore>) -> Self {
        Self::with_sandbox(
            self.sandbox.clone(),
            self.sandbox_url.clone(),
            channels,
            None,
            Box::new(|scheme| scheme),
            None,
            None,
        )
        .await
    }

    /// Stops serving (the process is gone; its state is what the store kept).
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// A server on its own sandbox with the scheme configured and its payments extended.
    pub(crate) async fn configured_and_extended(
        channels: Arc<dyn ChannelStore>,
        configure: Configure,
        after: impl FnOnce(&SandboxFacilitator) -> After,
    ) -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        let after = after(&sandbox);
        Self::with_sandbox(sandbox, url, channels, None, configure, Some(after), None).await
    }

    /// This server stopped and started again at the same address (so at the same resource
    /// URLs) against the same sandbox, with `channels`, the scheme configured and the payments
    /// extended anew: a restarted process keeps only what its stores kept.
    pub(crate) async fn restarted(
        self,
        channels: Arc<dyn ChannelStore>,
        configure: Configure,
        after: After,
    ) -> Self {
        let address: SocketAddr = self.base.trim_start_matches("http://").parse().unwrap();
        self.task.abort();
        let _ = self.task.await;
        let listener = tokio::net::TcpListener::bind(address).await.unwrap();
        Self::with_listener(
            self.sandbox,
            self.sandbox_url,
            channels,
            None,
            configure,
            Some(after),
            None,
            listener,
        )
        .await
    }

    /// A server whose core asks `first` before the sandbox (its facilitator pool: `first`,
    /// then the sandbox), with a sandbox of its own.
    pub(crate) async fn pooled(
        channels: Arc<dyn ChannelStore>,
        first: Arc<dyn Facilitator>,
    ) -> Self {
        let sandbox = SandboxFacilitator::new();
        let url = format!("http://{}", serve(sandbox.router()).await);
        let configure: Configure = Box::new(|scheme| scheme);
        Self::with_sandbox(sandbox, url, channels, None, configure, None, Some(first)).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn with_sandbox(
        sandbox: SandboxFacilitator,
        url: String,
        channels: Arc<dyn ChannelStore>,
        terms: Option<ChannelOffer>,
        configure: Configure,
        after: Option<After>,
        first: Option<Arc<dyn Facilitator>>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::with_listener(
            sandbox, url, channels, terms, configure, after, first, listener,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn with_listener(
        sandbox: SandboxFacilitator,
        url: String,
        channels: Arc<dyn ChannelStore>,
        terms: Option<ChannelOffer>,
        configure: Configure,
        after: Option<After>,
        first: Option<Arc<dyn Facilitator>>,
        listener: tokio::net::TcpListener,
    ) -> Self {
        let facilitator = HttpFacilitator::new(&url).unwrap();
        let usdc = UsdcDeployment::BASE;
        let terms = match terms {
            Some(terms) => terms,
            None => ChannelOffer::from_facilitator(&facilitator, &usdc.network)
                .await
                .unwrap(),
        };
        let accept = terms.usdc(&usdc, AtomicAmount(AMOUNT), PAY_TO);
        let core = match first {
            Some(first) => Payments::with_facilitators(
                Facilitators::new("first", first).then("sandbox", Arc::new(facilitator)),
            ),
            None => Payments::new(facilitator),
        };
        let payments = configure(BatchSettlement::new(Arc::clone(&channels))).register(core);
        let payments = match after {
            Some(after) => after(payments),
            None => payments,
        };
        let address = listener.local_addr().unwrap();
        let base = format!("http://{address}");
        let offer = |path: &str| {
            Arc::new(
                Offer::builder(ResourceInfo::new(format!("{base}{path}")))
                    .accept(accept.clone())
                    .settlement(SettlementMode::After)
                    .build()
                    .unwrap(),
            )
        };
        let (rows_offer, broken_offer) = (offer("/rows"), offer("/broken"));
        let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
            "/rows" => Price::Charge(Arc::clone(&rows_offer)),
            _ => Price::Charge(Arc::clone(&broken_offer)),
        };
        let app = Router::new()
            .route("/rows", get(rows))
            .route("/broken", get(broken))
            .layer(X402Layer::with_payments(payments, pricing));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            sandbox,
            sandbox_url: url,
            base,
            accept,
            channels,
            task,
        }
    }

    pub(crate) async fn get(&self, path: &str, payment: &PaymentPayload) -> Answer {
        let value = header::encode(payment).unwrap();
        let response = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .header("PAYMENT-SIGNATURE", value.to_str().unwrap())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let settlement = response
            .headers()
            .get("PAYMENT-RESPONSE")
            .map(|value| header::decode::<SettleResponse>(value.as_bytes()).unwrap());
        let required = response.headers().get("PAYMENT-REQUIRED").map(|value| {
            let json =
                header::decode::<tower_x402::proto::PaymentRequired>(value.as_bytes()).unwrap();
            serde_json::to_value(json).unwrap()
        });
        let body = response.text().await.unwrap();
        Answer {
            status,
            settlement,
            required,
            body,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) settlement: Option<SettleResponse>,
    pub(crate) required: Option<Value>,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn extra(&self) -> &serde_json::Map<String, Value> {
        self.settlement
            .as_ref()
            .and_then(|settlement| settlement.extra.as_ref())
            .unwrap_or_else(|| panic!("no PAYMENT-RESPONSE extra: {self:?}"))
    }

    pub(crate) fn error(&self) -> String {
        let body: Value = serde_json::from_str(&self.body).unwrap_or(Value::Null);
        body["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// A buyer with one channel to the server.
pub(crate) struct Buyer {
    pub(crate) wallet: SandboxWallet,
    pub(crate) config: ChannelConfig,
    pub(crate) id: String,
}

impl Buyer {
    pub(crate) fn new(server: &Server) -> Self {
        let wallet = SandboxWallet::random();
        let config = wallet
            .channel_config(&server.accept, rand::random())
            .unwrap();
        let id = SandboxWallet::channel_id(&config, &server.accept.network).unwrap();
        let config = serde_json::from_value(serde_json::to_value(config).unwrap()).unwrap();
        Self { wallet, config, id }
    }

    pub(crate) fn sandbox_config(&self) -> tower_x402_sandbox::batch::ChannelConfig {
        serde_json::from_value(serde_json::to_value(&self.config).unwrap()).unwrap()
    }

    pub(crate) fn deposit(&self, server: &Server, charged: u128) -> PaymentPayload {
        self.deposit_of(server, charged, DEPOSIT)
    }

    /// A deposit (or top-up) of `deposit` with the request's voucher on `charged`.
    pub(crate) fn deposit_of(
        &self,
        server: &Server,
        charged: u128,
        deposit: u128,
    ) -> PaymentPayload {
        self.wallet
            .deposit_payment_at(
                &server.accept,
                &self.sandbox_config(),
                deposit,
                charged + AMOUNT,
                server.sandbox.now(),
            )
            .unwrap()
    }

    pub(crate) fn refund(
        &self,
        server: &Server,
        charged: u128,
        amount: Option<u128>,
    ) -> PaymentPayload {
        self.wallet
            .refund_payment(&server.accept, &self.sandbox_config(), charged, amount)
            .unwrap()
    }

    pub(crate) fn voucher(&self, server: &Server, ceiling: u128) -> PaymentPayload {
        self.wallet
            .voucher_payment(&server.accept, &self.sandbox_config(), ceiling)
            .unwrap()
    }
}

/// How a test sets up its server's scheme.
pub(crate) type Configure = Box<dyn FnOnce(BatchSettlement) -> BatchSettlement + Send>;

/// What a test adds to its server's payments after the scheme.
pub(crate) type After = Box<dyn FnOnce(Payments) -> Payments + Send>;

/// The server's own receiver-authorizer key.
pub(crate) struct OwnKey(pub(crate) Arc<SandboxWallet>, pub(crate) String);

impl ClaimAuthorizer for OwnKey {
    fn address(&self) -> &str {
        &self.1
    }

    fn sign<'a>(
        &'a self,
        network: &'a Network,
        claims: &'a [VoucherClaim],
    ) -> BoxFuture<'a, Result<String, BoxError>> {
        Box::pin(async move {
            let rows: Vec<tower_x402_sandbox::batch::VoucherClaim> =
                serde_json::from_value(serde_json::to_value(claims)?)?;
            Ok(self.0.sign_claim_batch(network, &rows)?)
        })
    }

    fn sign_refund<'a>(
        &'a self,
        network: &'a Network,
        channel_id: &'a str,
        nonce: u128,
        amount: u128,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>> {
        Box::pin(async move {
            Ok(Some(
                self.0.sign_refund(network, channel_id, nonce, amount)?,
            ))
        })
    }
}
