//! [`SandboxWallet::buy`]: a request, its 402, the payment and the paid request again — the
//! buyer's whole round trip against an in-process service, for tests.

use std::future::poll_fn;

use axum::http::{HeaderValue, Request, Response, StatusCode};
use tower_service::Service;
use tower_x402::BoxError;
use x402_wire::header::{self, HeaderError};
use x402_wire::{
    PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired,
    SettleResponse,
};

use crate::wallet::{SandboxWallet, WalletError};

/// Why [`SandboxWallet::buy`] could not complete a purchase.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuyError {
    /// The service failed instead of answering.
    #[error("the service failed: {0}")]
    Service(BoxError),
    /// The unpaid request was answered with this status instead of 402.
    #[error("the unpaid request was answered {0}, not 402")]
    NotAsked(StatusCode),
    /// The 402 carried no `PAYMENT-REQUIRED` header.
    #[error("the 402 carried no PAYMENT-REQUIRED header")]
    NoChallenge,
    /// A `PAYMENT-REQUIRED` or `PAYMENT-RESPONSE` header could not be decoded, or the payment
    /// encoded.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The wallet could not pay the challenge.
    #[error(transparent)]
    Wallet(#[from] WalletError),
    /// The paid response carried no `PAYMENT-RESPONSE` header.
    #[error("the paid response carried no PAYMENT-RESPONSE header")]
    NoSettlement,
}

/// A purchase [`SandboxWallet::buy`] made: the challenge it was asked, the payment it sent, and
/// the answer to the paid request.
#[derive(Debug)]
#[non_exhaustive]
pub struct Purchase<B> {
    /// The challenge of the 402, decoded from `PAYMENT-REQUIRED`.
    pub challenge: PaymentRequired,
    /// The payment sent in `PAYMENT-SIGNATURE`; send it again to test a replay.
    pub payment: PaymentPayload,
    /// The answer to the paid request, whatever its status.
    pub response: Response<B>,
}

impl<B> Purchase<B> {
    /// The settlement the paid response reported in `PAYMENT-RESPONSE`: for an `upto` payment,
    /// its `amount` is what was charged, not the signed maximum.
    ///
    /// # Errors
    ///
    /// [`BuyError::NoSettlement`] without the header, [`BuyError::Header`] when it cannot be
    /// decoded.
    pub fn settlement(&self) -> Result<SettleResponse, BuyError> {
        let value = self
            .response
            .headers()
            .get(PAYMENT_RESPONSE)
            .ok_or(BuyError::NoSettlement)?;
        Ok(header::decode(value.as_bytes())?)
    }
}

impl SandboxWallet {
    /// Buys what `request` asks for from `service` (an axum `Router`, an `X402` service, any
    /// tower service over HTTP): sends it, expects a 402, pays its challenge with this wallet
    /// ([`pay`](Self::pay)), and sends the same request again with `PAYMENT-SIGNATURE`.
    ///
    /// The request is sent twice, so its body must be `Clone` (`String`, `Bytes`,
    /// `Full<Bytes>`); its extensions are not sent the second time.
    ///
    /// ```
    /// use axum::{Router, routing::get};
    /// use x402_wire::{ResourceInfo, UsdcDeployment};
    /// use tower_x402::{Offer, X402Layer};
    /// use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
    ///     .usdc(&UsdcDeployment::BASE_SEPOLIA, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    ///     .build()?;
    /// let facilitator = SandboxFacilitator::new();
    /// let app: Router = Router::new()
    ///     .route("/report", get(|| async { "the report" }))
    ///     .layer(X402Layer::new(facilitator.clone(), offer));
    ///
    /// let purchase = SandboxWallet::random()
    ///     .buy(app, axum::http::Request::get("/report").body(String::new())?)
    ///     .await?;
    /// assert_eq!(purchase.response.status(), 200);
    /// assert_eq!(purchase.settlement()?.amount.map(|amount| amount.get()), Some(100_000));
    /// assert_eq!(facilitator.settlement_count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// When the service fails, the unpaid request is not answered 402 with a challenge, or the
    /// wallet cannot pay it. The paid request's answer is returned whatever its status.
    pub async fn buy<S, ReqBody, ResBody>(
        &self,
        mut service: S,
        request: Request<ReqBody>,
    ) -> Result<Purchase<ResBody>, BuyError>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        S::Error: Into<BoxError>,
        ReqBody: Clone,
    {
        let again = || {
            let mut copy = Request::new(request.body().clone());
            *copy.method_mut() = request.method().clone();
            *copy.uri_mut() = request.uri().clone();
            *copy.version_mut() = request.version();
            *copy.headers_mut() = request.headers().clone();
            copy
        };
        let unpaid = call(&mut service, again()).await?;
        if unpaid.status() != StatusCode::PAYMENT_REQUIRED {
            return Err(BuyError::NotAsked(unpaid.status()));
        }
        let challenge: PaymentRequired = header::decode(
            unpaid
                .headers()
                .get(PAYMENT_REQUIRED)
                .ok_or(BuyError::NoChallenge)?
                .as_bytes(),
        )?;
        let payment = self.pay(&challenge)?;
        let signature: HeaderValue = header::encode(&payment)?;
        let mut paid = again();
        paid.headers_mut().insert(PAYMENT_SIGNATURE, signature);
        let response = call(&mut service, paid).await?;
        Ok(Purchase {
            challenge,
            payment,
            response,
        })
    }
}

async fn call<S, ReqBody, ResBody>(
    service: &mut S,
    request: Request<ReqBody>,
) -> Result<Response<ResBody>, BuyError>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(|error| BuyError::Service(error.into()))?;
    service
        .call(request)
        .await
        .map_err(|error| BuyError::Service(error.into()))
}
