//! `exact` paid through Permit2 (`extra.assetTransferMethod: "permit2"`), as the payment core
//! checks it before the facilitator is asked: the permit must pay exactly the accept it names
//! (its amount, its asset, its `payTo`) through the `exact` proxy, and a new one must not have
//! passed its deadline. The permit's owner and nonce identify the payment, as for `upto`: the
//! chain spends each Permit2 nonce once, whichever proxy spends it.

use std::borrow::Cow;

use x402_wire::{AtomicAmount, EXACT_PERMIT2_PROXY_ADDRESS, PaymentPayload};

use super::refusal::Refusal;

/// Seconds before its deadline from which a new permit is refused: the time a settlement takes
/// to land in a block (the reference facilitator's buffer).
const DEADLINE_BUFFER_SECS: u64 = 6;

/// An `exact` Permit2 payload borrowed from its JSON, the fields the core checks.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PayloadView<'a> {
    #[serde(borrow)]
    permit2_authorization: PermitView<'a>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PermitView<'a> {
    #[serde(borrow)]
    permitted: PermittedView<'a>,
    #[serde(borrow)]
    spender: Cow<'a, str>,
    #[serde(borrow)]
    deadline: Cow<'a, str>,
    #[serde(borrow)]
    witness: WitnessView<'a>,
}

#[derive(serde::Deserialize)]
struct PermittedView<'a> {
    #[serde(borrow)]
    token: Cow<'a, str>,
    #[serde(borrow)]
    amount: Cow<'a, str>,
}

#[derive(serde::Deserialize)]
struct WitnessView<'a> {
    #[serde(borrow)]
    to: Cow<'a, str>,
}

/// Refuses an `exact` Permit2 permit that does not pay `payload.accepted` (which matched the
/// offer's accept on amount, asset and `payTo`) through the `exact` proxy: one for another
/// amount, token or recipient, or for another spender, is refused before it is verified.
/// A payload that is not a permit is left to the facilitator.
// A `Refusal` is large, but it is answered at once.
#[allow(clippy::result_large_err)]
pub(super) fn check_exact(payload: &PaymentPayload) -> Result<(), Refusal> {
    let Ok(view) = serde_json::from_str::<PayloadView<'_>>(payload.payload.get()) else {
        return Ok(());
    };
    let permit = view.permit2_authorization;
    let accepted = &payload.accepted;
    let field = if !permit
        .spender
        .eq_ignore_ascii_case(EXACT_PERMIT2_PROXY_ADDRESS)
    {
        Some("spender")
    } else if AtomicAmount::parse_u128(&permit.permitted.amount).ok() != Some(accepted.amount.0) {
        // Strictly decimal digits: `+10000` is not the amount's spelling.
        Some("amount")
    } else if !permit.permitted.token.eq_ignore_ascii_case(&accepted.asset) {
        Some("token")
    } else if !permit.witness.to.eq_ignore_ascii_case(&accepted.pay_to) {
        Some("payTo")
    } else {
        None
    };
    match field {
        Some(field) => Err(Refusal::PermitMismatch { field }),
        None => Ok(()),
    }
}

/// Refuses a new `exact` Permit2 payment whose permit is past its deadline (or within the
/// time a settlement takes of it) at unix time `now`: nothing was verified nor moved, and the
/// buyer may pay again.
pub(super) fn expired(payload: &PaymentPayload, now: u64) -> Option<Refusal> {
    let view = serde_json::from_str::<PayloadView<'_>>(payload.payload.get()).ok()?;
    let deadline = view.permit2_authorization.deadline.parse::<u64>().ok()?;
    (deadline < now.saturating_add(DEADLINE_BUFFER_SECS)).then_some(Refusal::AuthorizationExpired)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn payment(spender: &str, amount: &str, token: &str, to: &str) -> PaymentPayload {
        serde_json::from_value(json!({
            "x402Version": 2,
            "accepted": {"scheme": "exact", "network": "eip155:8453", "amount": "10000",
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
                "extra": {"assetTransferMethod": "permit2"}},
            "payload": {"signature": "0x00", "permit2Authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "permitted": {"token": token, "amount": amount},
                "spender": spender, "nonce": "7", "deadline": "1000",
                "witness": {"to": to, "validAfter": "0"}}}
        }))
        .unwrap()
    }

    const PROXY: &str = EXACT_PERMIT2_PROXY_ADDRESS;
    const USDC: &str = "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913";
    const PAY_TO: &str = "0x209693bc6afc0c5328ba36faf03c514ef312287c";

    #[test]
    fn a_permit_pays_exactly_its_accept() {
        assert!(check_exact(&payment(PROXY, "10000", USDC, PAY_TO)).is_ok());
        let field = |payload| match check_exact(&payload) {
            Err(Refusal::PermitMismatch { field }) => field,
            other => panic!("{other:?}"),
        };
        let upto = x402_wire::UPTO_PROXY_ADDRESS;
        assert_eq!(field(payment(upto, "10000", USDC, PAY_TO)), "spender");
        assert_eq!(field(payment(PROXY, "10001", USDC, PAY_TO)), "amount");
        assert_eq!(field(payment(PROXY, "+10000", USDC, PAY_TO)), "amount");
        assert_eq!(field(payment(PROXY, "10000", PAY_TO, PAY_TO)), "token");
        assert_eq!(field(payment(PROXY, "10000", USDC, USDC)), "payTo");
    }

    #[test]
    fn a_permit_expires_before_its_deadline() {
        let payload = payment(PROXY, "10000", USDC, PAY_TO);
        assert!(expired(&payload, 900).is_none());
        assert!(matches!(
            expired(&payload, 995),
            Some(Refusal::AuthorizationExpired)
        ));
        assert!(payload.accepted.pays_through_permit2());
    }
}
