//! Why a proof was refused: its code on the wire and what was wrong.

use std::fmt;

use tower_x402::settlement::StoreError;

/// Why a proof was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Header,
    DomainMismatch,
    UriMismatch,
    Version,
    IssuedAt,
    IssuedAtTooOld,
    IssuedAtInFuture,
    ExpirationTime,
    Expired,
    NotBefore,
    NotYetValid,
    Nonce,
    UnsupportedChain,
    ChainId,
    Signature,
    MalformedSignature,
    VerifierError,
    NotEntitled,
    EntitlementLapsed,
    NonceUsed,
    StoreUnavailable,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Header => "invalid_siwx_header",
            Self::DomainMismatch => "invalid_siwx_domain_mismatch",
            Self::UriMismatch => "invalid_siwx_uri_mismatch",
            Self::Version => "invalid_siwx_version",
            Self::IssuedAt => "invalid_siwx_issued_at",
            Self::IssuedAtTooOld => "invalid_siwx_issued_at_too_old",
            Self::IssuedAtInFuture => "invalid_siwx_issued_at_in_future",
            Self::ExpirationTime => "invalid_siwx_expiration_time",
            Self::Expired => "invalid_siwx_expired",
            Self::NotBefore => "invalid_siwx_not_before",
            Self::NotYetValid => "invalid_siwx_not_yet_valid",
            Self::Nonce => "invalid_siwx_nonce",
            Self::UnsupportedChain => "invalid_siwx_unsupported_chain",
            Self::ChainId => "invalid_siwx_chain_id",
            Self::Signature => "invalid_siwx_signature",
            Self::MalformedSignature => "invalid_siwx_malformed_signature",
            Self::VerifierError => "invalid_siwx_verifier_error",
            Self::NotEntitled => "invalid_siwx_not_entitled",
            Self::EntitlementLapsed => "invalid_siwx_entitlement_lapsed",
            Self::NonceUsed => "invalid_siwx_nonce_used",
            Self::StoreUnavailable => "siwx_store_unavailable",
        }
    }
}

/// A refused proof: the code and what was wrong, for the 402's `error`.
#[derive(Clone, Debug)]
pub(crate) struct Rejection {
    pub(crate) code: Code,
    detail: String,
}

impl Rejection {
    pub(crate) fn new(code: Code, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }

    /// Whether the proof could not be checked because the entitlement store failed: answered
    /// 503 with `Retry-After`, never with a 402 that would have the buyer pay again.
    pub(crate) fn is_unavailable(&self) -> bool {
        self.code == Code::StoreUnavailable
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.detail)
    }
}

pub(crate) fn unavailable(error: StoreError) -> Rejection {
    tracing::warn!(%error, "entitlement store failed; sign-in refused");
    Rejection::new(
        Code::StoreUnavailable,
        "entitlements cannot be read right now: sign in again after Retry-After, with a fresh \
         challenge if this proof is refused as used; nothing needs to be paid again",
    )
}
