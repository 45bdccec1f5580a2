//! The header codec on arbitrary bytes: decoding never panics, and whatever decodes re-encodes
//! to a value that decodes to the same object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use x402_wire::header;
use x402_wire::{PaymentPayload, PaymentRequired, SettleResponse};

fuzz_target!(|data: &[u8]| {
    if let Ok(payload) = header::decode::<PaymentPayload>(data) {
        let encoded = header::encode(&payload).expect("a decoded payload encodes");
        let again: PaymentPayload = header::decode(encoded.as_bytes()).expect("round trip");
        assert_eq!(again, payload);
    }
    let _ = header::decode::<PaymentRequired>(data);
    let _ = header::decode::<SettleResponse>(data);
});
