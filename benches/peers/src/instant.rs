//! In-process facilitators that accept and settle every payment at once (no network, no
//! serialization), one for each peer's facilitator trait: what the middleware itself does on a
//! paid request, as tower-x402's `InstantFacilitator` (benches/fixtures.rs) measures its own.

use std::convert::Infallible;

use r402::protocol::error::FacilitatorError;
use r402::protocol::payment as r402_payment;
use serde_json::json;
use x402_types::proto;

/// The payer named in the benchmark's payments.
pub const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

/// The transaction every instant settlement reports.
const TRANSACTION: &str = "0x0000000000000000000000000000000000000000000000000000000000000001";

/// x402-axum's instant facilitator.
#[derive(Clone, Copy, Debug)]
pub struct X402AxumInstant;

impl x402_types::facilitator::Facilitator for X402AxumInstant {
    type Error = Infallible;

    async fn verify(
        &self,
        _request: &proto::VerifyRequest,
    ) -> Result<proto::VerifyResponse, Infallible> {
        Ok(proto::VerifyResponse(
            json!({"isValid": true, "payer": PAYER}),
        ))
    }

    async fn settle(
        &self,
        _request: &proto::SettleRequest,
    ) -> Result<proto::SettleResponse, Infallible> {
        Ok(proto::SettleResponse(json!({
            "success": true,
            "payer": PAYER,
            "transaction": TRANSACTION,
            "network": "eip155:8453",
        })))
    }

    async fn supported(&self) -> Result<proto::SupportedResponse, Infallible> {
        Ok(proto::SupportedResponse::default())
    }
}

/// r402's instant facilitator; its `/supported` lists `exact` on Base, which r402 requires of a
/// facilitator before it offers a price tag.
#[derive(Clone, Copy, Debug)]
pub struct R402Instant;

impl r402::http::server::Facilitator for R402Instant {
    async fn verify(
        &self,
        _request: r402_payment::VerifyRequest,
    ) -> Result<r402_payment::VerifyResponse, FacilitatorError> {
        Ok(r402_payment::VerifyResponse::valid(PAYER))
    }

    async fn settle(
        &self,
        request: r402_payment::SettleRequest,
    ) -> Result<r402_payment::SettleResponse, FacilitatorError> {
        Ok(r402_payment::SettleResponse::Success {
            payer: Some(PAYER.into()),
            transaction: TRANSACTION.into(),
            network: request.network().into(),
            amount: None,
            extensions: r402_payment::Extensions::new(),
            extension_responses: r402_payment::Extensions::new(),
            extra: None,
        })
    }

    async fn supported(&self) -> Result<r402_payment::SupportedResponse, FacilitatorError> {
        Ok(r402_payment::SupportedResponse::new().with_kinds(vec![
            r402_payment::SupportedPaymentKind::new(2, "exact", "eip155:8453"),
        ]))
    }
}
