//! A paid request's `PAYMENT-SIGNATURE` header, built from the 402 challenge of whichever
//! middleware serves the route, and where in it wrk's script rewrites the nonce.
//!
//! The payment takes the challenge's first requirement verbatim and carries an EIP-3009
//! authorization (for an `exact` requirement) or a Permit2 `upto` authorization of the
//! requirement's maximum (for an `upto` requirement) with a placeholder signature: the stub
//! facilitator accepts any signature, so every middleware is measured doing the same work for the
//! same payment. An EIP-3009 nonce is hex, a Permit2 nonce a decimal uint256: the digits wrk's
//! script rewrites are hex or decimal accordingly.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// The payer every benchmark payment names.
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

/// The Permit2 `upto` proxy every `upto` authorization names as its spender.
const UPTO_PROXY: &str = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";

/// A payment header and the 1-based index of 16 base64 characters in it that encode 12 of the
/// nonce's digits (starting on a 3-byte boundary of the JSON, so wrk's script can rewrite
/// them without decoding anything): hex digits, or decimal ones when `decimal`.
pub(crate) struct PaymentTemplate {
    pub(crate) header: String,
    pub(crate) offset: usize,
    pub(crate) decimal: bool,
}

impl PaymentTemplate {
    /// The header with 12 of its nonce's digits set from `thread` (2 digits), `run` (3) and
    /// `request` (7), as wrk's script `nonce.lua` sets them (in decimal, each number modulo its
    /// digits' range).
    pub(crate) fn with_nonce(&self, thread: u32, run: u32, request: u32) -> String {
        let digits = if self.decimal {
            format!(
                "{:02}{:03}{:07}",
                thread % 100,
                run % 1_000,
                request % 10_000_000
            )
        } else {
            format!("{thread:02x}{run:03x}{request:07x}")
        };
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
    let decimal = accepted["scheme"] == "upto";
    // The nonce's placeholder and how many of its characters come before the digits to rewrite
    // (the quote and `0x`, or the quote and a leading `1` that keeps the decimal nonce nonzero).
    let (nonce, before_digits) = if decimal {
        (format!("1{}", "0".repeat(29)), 2)
    } else {
        (format!("0x{}", "0".repeat(64)), 3)
    };
    let signature = format!("0x{}", "ab".repeat(65));
    let payload = if decimal {
        let facilitator = accepted["extra"]["facilitatorAddress"].clone();
        json!({
            "signature": signature,
            "permit2Authorization": {
                "from": PAYER,
                "permitted": {"token": accepted["asset"], "amount": accepted["amount"]},
                "spender": UPTO_PROXY,
                "nonce": nonce,
                "deadline": "99999999999",
                "witness": {"to": accepted["payTo"], "facilitator": facilitator, "validAfter": "0"},
            }
        })
    } else {
        json!({
            "signature": signature,
            "authorization": {
                "from": PAYER,
                "to": accepted["payTo"],
                "value": accepted["amount"],
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": nonce,
            }
        })
    };
    let payment = json!({
        "x402Version": 2,
        "resource": challenge["resource"],
        "payload": payload,
        "accepted": accepted,
    });
    let json = serde_json::to_vec(&payment).map_err(|error| error.to_string())?;
    let quoted = format!("\"{nonce}\"");
    let digits = json
        .windows(quoted.len())
        .position(|window| window == quoted.as_bytes())
        .ok_or("the nonce is not in the payment")?
        + before_digits;
    let aligned = digits.div_ceil(3) * 3;
    Ok(PaymentTemplate {
        header: STANDARD.encode(&json),
        offset: aligned / 3 * 4 + 1,
        decimal,
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

    #[test]
    fn an_upto_challenge_gets_a_permit2_payment_with_decimal_nonce_digits() {
        let challenge = STANDARD.encode(
            json!({
                "x402Version": 2,
                "resource": {"url": "https://shop.example/report"},
                "accepts": [{"scheme": "upto", "network": "eip155:8453", "amount": "1000000",
                    "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                    "extra": {"facilitatorAddress": "0x1111111111111111111111111111111111111111"}}],
            })
            .to_string(),
        );
        let template = from_challenge(&challenge).expect("template");
        assert!(template.decimal);
        let header = template.with_nonce(1, 2, 3);
        let json = STANDARD.decode(&header).expect("still base64");
        let payment: Value = serde_json::from_slice(&json).expect("still JSON");
        let permit = &payment["payload"]["permit2Authorization"];
        let nonce = permit["nonce"].as_str().expect("nonce");
        assert_eq!(nonce.len(), 30);
        assert!(
            nonce.starts_with('1') && nonce.contains("010020000003"),
            "{nonce}"
        );
        assert_eq!(permit["permitted"]["amount"], "1000000");
        assert_eq!(
            permit["witness"]["facilitator"],
            "0x1111111111111111111111111111111111111111"
        );
    }
}
