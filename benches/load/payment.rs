//! A paid request's `PAYMENT-SIGNATURE` header, built from the 402 challenge of whichever
//! middleware serves the route, and where in it wrk's script rewrites the nonce.
//!
//! The payment takes the challenge's first requirement verbatim and carries an EIP-3009
//! authorization with a placeholder signature: the stub facilitator accepts any signature, so
//! every middleware is measured doing the same work for the same payment.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// The payer every benchmark payment names.
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

/// A payment header and the 1-based index of 16 base64 characters in it that encode 12 of the
/// nonce's hex digits (starting on a 3-byte boundary of the JSON, so wrk's script can rewrite
/// them without decoding anything).
pub(crate) struct PaymentTemplate {
    pub(crate) header: String,
    pub(crate) offset: usize,
}

impl PaymentTemplate {
    /// The header with 12 of its nonce's hex digits set from `thread` (2 digits), `run` (3) and
    /// `request` (7), as wrk's script `nonce.lua` sets them.
    pub(crate) fn with_nonce(&self, thread: u32, run: u32, request: u32) -> String {
        let digits = format!("{thread:02x}{run:03x}{request:07x}");
        let start = self.offset - 1;
        let mut header = self.header.clone();
        header.replace_range(start..start + 16, &STANDARD.encode(digits.as_bytes()));
        header
    }
}

/// Builds the payment for the challenge in a 402's `PAYMENT-REQUIRED` header (base64 JSON).
pub(crate) fn from_challenge(payment_required: &str) -> Result<PaymentTemplate, String> {
    let challenge: Value = STANDARD
        .decode(payment_required.trim())
        .map_err(|error| format!("PAYMENT-REQUIRED is not base64: {error}"))
        .and_then(|json| {
            serde_json::from_slice(&json)
                .map_err(|error| format!("PAYMENT-REQUIRED is not JSON: {error}"))
        })?;
    let accepted = challenge["accepts"]
        .get(0)
        .cloned()
        .ok_or("the challenge accepts nothing")?;
    let payment = json!({
        "x402Version": 2,
        "resource": challenge["resource"],
        "payload": {
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": PAYER,
                "to": accepted["payTo"],
                "value": accepted["amount"],
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": format!("0x{}", "0".repeat(64)),
            }
        },
        "accepted": accepted,
    });
    let json = serde_json::to_vec(&payment).map_err(|error| error.to_string())?;
    let nonce = format!("\"0x{}\"", "0".repeat(64));
    let digits = json
        .windows(nonce.len())
        .position(|window| window == nonce.as_bytes())
        .ok_or("the nonce is not in the payment")?
        + 3;
    let aligned = digits.div_ceil(3) * 3;
    Ok(PaymentTemplate {
        header: STANDARD.encode(&json),
        offset: aligned / 3 * 4 + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_points_at_nonce_digits() {
        let challenge = STANDARD.encode(
            json!({
                "x402Version": 2,
                "resource": {"url": "https://shop.example/report"},
                "accepts": [{"scheme": "exact", "network": "eip155:8453", "amount": "1000000",
                    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"}],
            })
            .to_string(),
        );
        let template = from_challenge(&challenge).expect("template");
        let start = template.offset - 1;
        let mut header = template.header.into_bytes();
        // "MTIz" is base64 for "123": three nonce digits, if the offset is right.
        header[start..start + 4].copy_from_slice(b"MTIz");
        let json = STANDARD.decode(&header).expect("still base64");
        let payment: Value = serde_json::from_slice(&json).expect("still JSON");
        let nonce = payment["payload"]["authorization"]["nonce"]
            .as_str()
            .expect("nonce");
        assert_eq!(nonce.len(), 66);
        assert!(nonce.contains("123"), "{nonce}");
        assert_eq!(payment["accepted"]["amount"], "1000000");
    }
}
