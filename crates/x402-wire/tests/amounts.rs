//! Amounts on the wire are strings of ASCII decimal digits, checked in one place
//! ([`x402_wire::decimal_digits`]) and refused in every other spelling.

use serde_json::{Value, json};
use x402_wire::AtomicAmount;

/// A requirement as the specification's examples write one.
fn requirement() -> Value {
    json!({
        "scheme": "exact",
        "network": "eip155:8453",
        "amount": "10000",
        "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USD Coin", "version": "2"}
    })
}

/// Amounts are strings of ASCII decimal digits and nothing else: every spelling Rust's own
/// integer parsing or a lenient reader would take (`+`, spaces, `0x`, `-`, empty, a decimal
/// point, an exponent, non-ASCII digits) is refused, in a requirement's `amount` as through
/// [`x402_wire::decimal_digits`] and [`AtomicAmount::parse_u128`].
#[test]
fn amounts_are_ascii_decimal_digits_only() {
    let bad = [
        "+44000",
        " 44000",
        "44000 ",
        "44 000",
        "-44000",
        "0x44000",
        "",
        "44000.0",
        "4.4e4",
        "٤٤٠٠٠",
        "44_000",
        "+0",
    ];
    for text in bad {
        assert!(x402_wire::decimal_digits(text).is_err(), "{text:?}");
        assert!(AtomicAmount::parse_u128(text).is_err(), "{text:?}");
        assert!(text.parse::<AtomicAmount>().is_err(), "{text:?}");
        let mut requirement = requirement();
        requirement["amount"] = json!(text);
        let parsed = serde_json::from_value::<x402_wire::PaymentRequirements>(requirement);
        assert!(parsed.is_err(), "a requirement of amount {text:?}");
    }
    for (text, value) in [("0", 0), ("44000", 44_000), ("0044000", 44_000)] {
        assert_eq!(AtomicAmount::parse_u128(text), Ok(value), "{text:?}");
        assert_eq!(x402_wire::decimal_digits(text), Ok(text));
    }
    let max = u128::MAX.to_string();
    assert_eq!(AtomicAmount::parse_u128(&max), Ok(u128::MAX));
    assert!(AtomicAmount::parse_u128(&format!("{max}0")).is_err());
}
