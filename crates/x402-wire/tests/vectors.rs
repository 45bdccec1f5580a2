//! The x402 v2 specification's examples and header vectors, round-tripped through `proto`.
//!
//! Section numbers refer to the protocol reference (`x402-protocol.md`), which copies the
//! examples of `specs/x402-specification-v2.md`, `specs/transports-v2/http.md` and the extension
//! specifications.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use x402_wire::header::{self, HeaderError, HeaderObject};

/// The codec's documented default limit: 16 KiB.
const DEFAULT_MAX_LEN: usize = 16 * 1024;
use x402_wire::{
    AtomicAmount, Extension, FacilitatorRequest, Network, PaymentPayload, PaymentRequired,
    SettleResponse, SupportedResponse, UsdAmount, VerifyResponse, X402Version,
};

const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// Decodes `value` as `T`, re-encodes it, and checks nothing was lost or changed.
fn round_trip<T: Serialize + DeserializeOwned>(value: &Value) -> T {
    let decoded: T = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(&serde_json::to_value(&decoded).unwrap(), value);
    decoded
}

// ---------------------------------------------------------------------------------------------
// §2.3, §3.6, §4: the core objects

fn requirement() -> Value {
    json!({
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "10000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USDC", "version": "2"}
    })
}

/// §2.3, copied from the specification.
fn payment_required_example() -> Value {
    json!({
        "x402Version": 2,
        "error": "PAYMENT-SIGNATURE header is required",
        "resource": {
            "url": "https://api.example.com/premium-data",
            "description": "Access to premium market data",
            "mimeType": "application/json"
        },
        "accepts": [requirement()],
        "extensions": {}
    })
}

/// §3.6, copied from the specification.
fn payment_payload_example() -> Value {
    json!({
        "x402Version": 2,
        "resource": {
            "url": "https://api.example.com/premium-data",
            "description": "Access to premium market data",
            "mimeType": "application/json"
        },
        "accepted": requirement(),
        "payload": {
            "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
            "authorization": {
                "from": PAYER,
                "to": PAY_TO,
                "value": "10000",
                "validAfter": "1740672089",
                "validBefore": "1740672154",
                "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
            }
        },
        "extensions": {}
    })
}

#[test]
fn payment_required_example_round_trips() {
    let required: PaymentRequired = round_trip(&payment_required_example());
    assert_eq!(required.x402_version, X402Version::V2);
    assert_eq!(required.accepts[0].amount, AtomicAmount(10_000));
    assert_eq!(required.accepts[0].network, Network::BASE_SEPOLIA);
    assert_eq!(
        required.resource.mime_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(
        required.extensions,
        Some(serde_json::Map::new()),
        "an empty object stays an empty object"
    );
}

#[test]
fn payment_payload_example_round_trips() {
    let payload: PaymentPayload = round_trip(&payment_payload_example());
    let exact = payload.exact_evm().unwrap();
    assert_eq!(exact.authorization.from, PAYER);
    assert_eq!(exact.authorization.valid_before, "1740672154");
    assert_eq!(exact.signature.len(), 2 + 65 * 2);
    let required: PaymentRequired = serde_json::from_value(payment_required_example()).unwrap();
    assert!(required.accepts[0].matches(&payload.accepted));
    assert_eq!(payload.payment_identifier(), None);
}

#[test]
fn settle_response_example_round_trips_byte_for_byte() {
    let text = r#"{"success":true,"transaction":"0x1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef","network":"eip155:84532","payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#;
    let settled: SettleResponse = serde_json::from_str(text).unwrap();
    assert!(settled.success);
    assert_eq!(settled.payer.as_deref(), Some(PAYER));
    assert_eq!(serde_json::to_string(&settled).unwrap(), text);
}

// ---------------------------------------------------------------------------------------------
// §5.1–5.3: facilitator API bodies

#[test]
fn verify_request_and_responses_round_trip() {
    let request = json!({
        "x402Version": 2,
        "paymentPayload": payment_payload_example(),
        "paymentRequirements": requirement()
    });
    let decoded: FacilitatorRequest = round_trip(&request);
    assert_eq!(
        decoded.x402_version(),
        decoded.payment_payload().x402_version
    );
    let rebuilt = FacilitatorRequest::new(
        decoded.payment_payload().clone(),
        decoded.payment_requirements().clone(),
    );
    assert_eq!(rebuilt, decoded);

    let valid: VerifyResponse = round_trip(&json!({"isValid": true, "payer": PAYER}));
    assert!(valid.is_valid);
    let invalid: VerifyResponse = round_trip(
        &json!({"isValid": false, "invalidReason": "insufficient_funds", "payer": PAYER}),
    );
    assert_eq!(
        invalid.invalid_reason.as_deref(),
        Some("insufficient_funds")
    );
}

#[test]
fn settle_responses_round_trip() {
    let success: SettleResponse = round_trip(&json!({
        "success": true, "payer": PAYER, "transaction": "0x1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef", "network": "eip155:84532"
    }));
    assert!(success.success);
    let failure: SettleResponse = round_trip(&json!({
        "success": false, "errorReason": "insufficient_funds", "payer": PAYER, "transaction": "", "network": "eip155:84532"
    }));
    assert_eq!(failure.error_reason.as_deref(), Some("insufficient_funds"));
    assert_eq!(failure.transaction, "");
}

#[test]
fn supported_example_round_trips() {
    let supported: SupportedResponse = round_trip(&json!({
        "kinds": [
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"},
            {"x402Version": 2, "scheme": "exact", "network": "eip155:8453"},
            {"x402Version": 2, "scheme": "exact", "network": "eip155:43113"},
            {"x402Version": 2, "scheme": "exact", "network": "eip155:43114"}
        ],
        "extensions": [],
        "signers": {
            "eip155:*": ["0x1234567890abcdef1234567890abcdef12345678"],
            "solana:*": ["CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5"]
        }
    }));
    assert!(supported.supports("exact", &Network::BASE));
    assert!(supported.supports("exact", &"eip155:43114".parse().unwrap()));
    assert!(!supported.supports("upto", &Network::BASE));
    assert!(!supported.supports_network(&Network::SOLANA));
    assert_eq!(
        supported.signers["solana:*"],
        ["CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5"]
    );
}

// ---------------------------------------------------------------------------------------------
// §7.1 bazaar, §7.2 payment-identifier

fn bazaar_example() -> Value {
    json!({
        "info": {
            "input": {"type": "http", "method": "GET", "queryParams": {"city": "San Francisco"}},
            "output": {"type": "json", "example": {"city": "San Francisco", "weather": "foggy", "temperature": 60}}
        },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "input": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "const": "http"},
                        "method": {"type": "string", "enum": ["GET", "HEAD", "DELETE"]},
                        "queryParams": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}}
                    },
                    "required": ["type", "method"],
                    "additionalProperties": false
                },
                "output": {"type": "object", "properties": {"type": {"type": "string"}, "example": {"type": "object"}}, "required": ["type"]}
            },
            "required": ["input"]
        }
    })
}

fn payment_identifier_declaration() -> Value {
    json!({
        "info": {"required": false},
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"required": {"type": "boolean"}, "id": {"type": "string", "minLength": 16, "maxLength": 128}},
            "required": ["required"]
        }
    })
}

#[test]
fn bazaar_example_round_trips() {
    let extension: Extension = round_trip(&bazaar_example());
    assert_eq!(extension.info["input"]["method"], "GET");
    assert!(extension.other.is_empty());
    assert_eq!(extension.into_value(), bazaar_example());

    let mut challenge = payment_required_example();
    challenge["extensions"] = json!({"bazaar": bazaar_example()});
    let required: PaymentRequired = round_trip(&challenge);
    let value = header::encode(&required).unwrap();
    let back: PaymentRequired = header::decode(value.as_bytes()).unwrap();
    assert_eq!(back, required);
}

#[test]
fn payment_identifier_is_declared_echoed_and_read() {
    let declared: Extension = round_trip(&payment_identifier_declaration());
    assert_eq!(declared.info, json!({"required": false}));

    let mut echoed = payment_identifier_declaration();
    echoed["info"]["id"] = json!("pay_7d5d747be160e280504c099d984bcfe0");
    let mut payload = payment_payload_example();
    payload["extensions"] = json!({"payment-identifier": echoed});
    let payload: PaymentPayload = round_trip(&payload);
    assert_eq!(
        payload.payment_identifier(),
        Some("pay_7d5d747be160e280504c099d984bcfe0")
    );
}

#[test]
fn extension_responses_header_examples_decode() {
    for (encoded, expected) in [
        (
            "eyJiYXphYXIiOnsic3RhdHVzIjoic3VjY2VzcyJ9fQ==",
            json!({"bazaar": {"status": "success"}}),
        ),
        (
            "eyJiYXphYXIiOnsic3RhdHVzIjoicmVqZWN0ZWQiLCJyZWplY3RlZFJlYXNvbiI6ImluZm8gZmFpbGVkIHNjaGVtYSB2YWxpZGF0aW9uIn19",
            json!({"bazaar": {"status": "rejected", "rejectedReason": "info failed schema validation"}}),
        ),
    ] {
        let decoded: Value = serde_json::from_slice(&STANDARD.decode(encoded).unwrap()).unwrap();
        assert_eq!(decoded, expected);
    }
}

// ---------------------------------------------------------------------------------------------
// §10.1: header vectors

const PAYMENT_REQUIRED_JSON: &str = r#"{"x402Version":2,"error":"PAYMENT-SIGNATURE header is required","resource":{"url":"https://api.example.com/premium-data","description":"Access to premium market data","mimeType":"application/json"},"accepts":[{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}}]}"#;
const PAYMENT_SIGNATURE_JSON: &str = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium-data","description":"Access to premium market data","mimeType":"application/json"},"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"1740672089","validBefore":"1740672154","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}}"#;
const PAYMENT_RESPONSE_SUCCESS_JSON: &str = r#"{"success":true,"transaction":"0x1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef","network":"eip155:84532","payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#;
const PAYMENT_RESPONSE_FAILURE_JSON: &str = r#"{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:84532","payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#;

/// The vector for `json`: standard base64 of that exact compact JSON.
fn vector(json: &str) -> String {
    STANDARD.encode(json)
}

/// Decodes a vector, re-encodes it, and checks the string is unchanged.
fn check_vector<T: HeaderObject + std::fmt::Debug>(json: &str, expected_len: usize) -> T {
    let encoded = vector(json);
    assert_eq!(
        encoded.len(),
        expected_len,
        "length given by the specification"
    );
    let decoded: T = header::decode(encoded.as_bytes()).unwrap();
    assert_eq!(
        header::encode(&decoded).unwrap(),
        encoded.as_str(),
        "re-encoding gives the identical string"
    );
    decoded
}

#[test]
fn payment_required_header_vector() {
    let required: PaymentRequired = check_vector(PAYMENT_REQUIRED_JSON, 584);
    assert_eq!(
        required.extensions, None,
        "this vector has no extensions key"
    );
    assert!(
        !vector(PAYMENT_REQUIRED_JSON).ends_with('='),
        "no padding needed"
    );
}

#[test]
fn payment_signature_header_vector() {
    let payload: PaymentPayload = check_vector(PAYMENT_SIGNATURE_JSON, 1088);
    assert!(vector(PAYMENT_SIGNATURE_JSON).ends_with('='));
    let mut expected = payment_payload_example();
    expected.as_object_mut().unwrap().remove("extensions");
    assert_eq!(
        serde_json::to_value(&payload).unwrap(),
        expected,
        "the §3.6 object without extensions"
    );
}

#[test]
fn payment_response_header_vectors() {
    let success: SettleResponse = check_vector(PAYMENT_RESPONSE_SUCCESS_JSON, 236);
    assert!(success.success);
    let failure: SettleResponse = check_vector(PAYMENT_RESPONSE_FAILURE_JSON, 196);
    assert_eq!(failure.error_reason.as_deref(), Some("insufficient_funds"));
    assert_eq!(failure, {
        let mut expected = SettleResponse::failure(Network::BASE_SEPOLIA, "insufficient_funds");
        expected.payer = Some(PAYER.to_owned());
        expected
    });
}

// ---------------------------------------------------------------------------------------------
// Header codec errors

fn decode_err<T: HeaderObject + std::fmt::Debug>(value: &[u8]) -> HeaderError {
    header::decode::<T>(value).unwrap_err()
}

#[test]
fn oversized_header_is_rejected_before_decoding() {
    // Not even base64: a limit checked after decoding would report NotBase64.
    let huge = vec![b'!'; DEFAULT_MAX_LEN + 1];
    let error = decode_err::<PaymentPayload>(&huge);
    assert!(
        matches!(error, HeaderError::TooLarge { len, limit } if len == DEFAULT_MAX_LEN + 1 && limit == DEFAULT_MAX_LEN),
        "{error}"
    );

    let valid = vector(PAYMENT_SIGNATURE_JSON);
    assert!(header::decode_with_limit::<PaymentPayload>(valid.as_bytes(), valid.len()).is_ok());
    let error =
        header::decode_with_limit::<PaymentPayload>(valid.as_bytes(), valid.len() - 1).unwrap_err();
    assert!(matches!(error, HeaderError::TooLarge { .. }), "{error}");
}

#[test]
fn header_that_is_not_standard_padded_base64_is_rejected() {
    let mut message = SettleResponse::failure(Network::BASE_SEPOLIA, "insufficient_funds");
    message.error_message = Some("~~~ ??? >>> ~~~".into());
    let json = serde_json::to_vec(&message).unwrap();
    let standard = STANDARD.encode(&json);
    assert!(
        standard.contains(['+', '/']),
        "the URL-safe case below must differ: {standard}"
    );
    assert!(header::decode::<SettleResponse>(standard.as_bytes()).is_ok());

    let padded = vector(PAYMENT_SIGNATURE_JSON);
    let cases = [
        ("URL-safe alphabet", URL_SAFE.encode(&json)),
        (
            "missing padding",
            STANDARD_NO_PAD.encode(PAYMENT_SIGNATURE_JSON),
        ),
        (
            "padding removed by hand",
            padded.trim_end_matches('=').to_owned(),
        ),
        (
            "line break",
            format!("{}\n{}", &padded[..64], &padded[64..]),
        ),
        ("not base64 at all", "{\"x402Version\":2}".to_owned()),
    ];
    for (case, value) in cases {
        let error = decode_err::<PaymentPayload>(value.as_bytes());
        assert!(
            matches!(error, HeaderError::NotBase64(_)),
            "{case}: {error}"
        );
    }
}

#[test]
fn header_that_is_not_json_is_rejected() {
    for text in ["not json", "{\"x402Version\":2,", "", "\u{feff}{}"] {
        let error = decode_err::<PaymentRequired>(STANDARD.encode(text).as_bytes());
        assert!(
            matches!(error, HeaderError::NotJson(_)),
            "{text:?}: {error}"
        );
    }
}

#[test]
fn header_with_the_wrong_shape_is_rejected() {
    for (json, what) in [
        (
            r#"{"x402Version":2,"resource":{"url":"https://a.example"}}"#,
            "PaymentRequired",
        ),
        (
            r#"{"x402Version":2,"resource":{"url":"https://a.example"},"accepts":[{"scheme":"exact"}]}"#,
            "PaymentRequired",
        ),
        (r#"[2]"#, "PaymentRequired"),
        (r#""PaymentRequired""#, "PaymentRequired"),
    ] {
        let error = decode_err::<PaymentRequired>(STANDARD.encode(json).as_bytes());
        assert!(
            matches!(error, HeaderError::Shape { what: w, .. } if w == what),
            "{json}: {error}"
        );
    }
    let amount_as_number =
        PAYMENT_SIGNATURE_JSON.replace(r#""amount":"10000""#, r#""amount":10000"#);
    let error = decode_err::<PaymentPayload>(STANDARD.encode(amount_as_number).as_bytes());
    assert!(
        matches!(
            error,
            HeaderError::Shape {
                what: "PaymentPayload",
                ..
            }
        ),
        "{error}"
    );
    let error = decode_err::<SettleResponse>(STANDARD.encode(r#"{"success":"yes"}"#).as_bytes());
    assert!(
        matches!(
            error,
            HeaderError::Shape {
                what: "SettleResponse",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn header_with_the_wrong_version_is_rejected() {
    let v1_payload = r#"{"x402Version":1,"scheme":"exact","network":"base-sepolia","payload":{"signature":"0x00"}}"#;
    let v1_with_v2_shape =
        PAYMENT_SIGNATURE_JSON.replacen(r#""x402Version":2"#, r#""x402Version":1"#, 1);
    let string_two =
        PAYMENT_SIGNATURE_JSON.replacen(r#""x402Version":2"#, r#""x402Version":"2""#, 1);
    let three = PAYMENT_REQUIRED_JSON.replacen(r#""x402Version":2"#, r#""x402Version":3"#, 1);
    for (json, found) in [
        (v1_payload, "1"),
        (&v1_with_v2_shape, "1"),
        (&string_two, "\"2\""),
    ] {
        let error = decode_err::<PaymentPayload>(STANDARD.encode(json).as_bytes());
        assert!(
            matches!(&error, HeaderError::WrongVersion { found: f } if f == found),
            "{json}: {error}"
        );
    }
    let error = decode_err::<PaymentRequired>(STANDARD.encode(three).as_bytes());
    assert!(
        matches!(&error, HeaderError::WrongVersion { found } if found == "3"),
        "{error}"
    );
}

#[test]
fn unknown_fields_in_extra_extensions_and_resource_survive() {
    let challenge = json!({
        "x402Version": 2,
        "resource": {
            "url": "https://api.example.com/premium-data",
            "description": "Access to premium market data",
            "mimeType": "application/json",
            "serviceName": "Premium Data",
            "tags": ["finance", "markets"],
            "iconUrl": "https://api.example.com/icon.png",
            "somethingNew": {"nested": [1, 2, 3]}
        },
        "accepts": [{
            "scheme": "exact", "network": "eip155:84532", "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": PAY_TO, "maxTimeoutSeconds": 60,
            "extra": {"name": "USDC", "version": "2", "assetTransferMethod": "eip3009", "paymentFlow": "authorize", "future": {"a": null}}
        }],
        "extensions": {
            "bazaar": bazaar_example(),
            "sign-in-with-x": {
                "info": {"domain": "api.example.com", "version": "1"},
                "supportedChains": [{"chainId": "eip155:8453", "type": "eip191"}],
                "schema": {"type": "object"}
            },
            "x-unknown-extension": {"anything": ["goes", 1, true]}
        }
    });
    let json = serde_json::to_string(&challenge).unwrap();
    let encoded = STANDARD.encode(&json);
    let required: PaymentRequired = header::decode(encoded.as_bytes()).unwrap();
    assert_eq!(
        header::encode(&required).unwrap(),
        encoded.as_str(),
        "byte for byte"
    );
    assert_eq!(required.resource.other["serviceName"], "Premium Data");
    let siwx: Extension =
        serde_json::from_value(required.extensions.as_ref().unwrap()["sign-in-with-x"].clone())
            .unwrap();
    assert!(siwx.other.contains_key("supportedChains"));

    let mut payload = payment_payload_example();
    payload["accepted"] = challenge["accepts"][0].clone();
    payload["resource"] = challenge["resource"].clone();
    payload["extensions"] = challenge["extensions"].clone();
    payload["payload"]["futureProof"] = json!("kept");
    let encoded = STANDARD.encode(serde_json::to_string(&payload).unwrap());
    let decoded: PaymentPayload = header::decode(encoded.as_bytes()).unwrap();
    assert_eq!(
        header::encode(&decoded).unwrap(),
        encoded.as_str(),
        "byte for byte"
    );
}

// ---------------------------------------------------------------------------------------------
// Properties

fn network() -> impl Strategy<Value = Network> {
    prop_oneof![
        Just(Network::BASE),
        Just(Network::BASE_SEPOLIA),
        Just(Network::SOLANA),
        Just(Network::ALGORAND_TESTNET),
        "[a-z0-9-]{3,8}:[-_a-zA-Z0-9]{1,32}".prop_map(|id| id.parse().unwrap()),
    ]
}

fn settle_response() -> impl Strategy<Value = SettleResponse> {
    (
        any::<bool>(),
        proptest::option::of(".{0,40}"),
        proptest::option::of(".{0,40}"),
        "(0x[0-9a-f]{64})?",
        network(),
        proptest::option::of("0x[0-9a-fA-F]{40}"),
        proptest::option::of(any::<u128>()),
    )
        .prop_map(
            |(success, error_reason, error_message, transaction, network, payer, amount)| {
                SettleResponse {
                    success,
                    error_reason,
                    error_message,
                    transaction,
                    network,
                    payer,
                    amount: amount.map(AtomicAmount),
                    extensions: None,
                    extra: None,
                }
            },
        )
}

proptest! {
    #[test]
    fn usd_amount_display_parses_back(micros in any::<u64>()) {
        let amount = UsdAmount::from_micros(micros);
        let shown = amount.to_string();
        prop_assert_eq!(shown.parse::<UsdAmount>(), Ok(amount));
        prop_assert_eq!(format!("${shown}").parse::<UsdAmount>(), Ok(amount));
        let fraction = shown.split_once('.').map(|(_, fraction)| fraction.len());
        prop_assert!(matches!(fraction, Some(2..=6)), "{}", shown);
    }

    #[test]
    fn usd_amount_parse_is_exact(whole in 0u64..=18_446_744_073_708, fraction in "[0-9]{1,6}") {
        let parsed: UsdAmount = format!("{whole}.{fraction}").parse().unwrap();
        let scale = 10u64.pow(6 - u32::try_from(fraction.len()).unwrap());
        prop_assert_eq!(parsed.micros(), whole * 1_000_000 + fraction.parse::<u64>().unwrap() * scale);
        prop_assert_eq!(parsed.to_string().parse::<UsdAmount>(), Ok(parsed));
    }

    #[test]
    fn money_parsing_never_panics(text in "\\PC{0,30}") {
        let _ = text.parse::<UsdAmount>();
        let _ = text.parse::<AtomicAmount>();
    }

    #[test]
    fn atomic_amount_display_parses_back(units in any::<u128>()) {
        let amount = AtomicAmount(units);
        prop_assert_eq!(amount.to_string().parse::<AtomicAmount>(), Ok(amount));
        let json = serde_json::to_string(&amount).unwrap();
        prop_assert_eq!(&json, &format!("\"{units}\""));
        prop_assert_eq!(serde_json::from_str::<AtomicAmount>(&json).unwrap(), amount);
    }

    #[test]
    fn settle_response_header_round_trips(settled in settle_response()) {
        let value = header::encode(&settled).unwrap();
        let text = value.to_str().unwrap();
        prop_assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)), "{}", text);
        prop_assert_eq!(header::decode::<SettleResponse>(value.as_bytes()).unwrap(), settled);
    }

    #[test]
    fn payment_required_header_round_trips(
        url in "https://[a-z]{1,12}\\.example/[a-z0-9/]{0,20}",
        description in proptest::option::of("\\PC{0,60}"),
        amount in any::<u128>(),
        network in network(),
        timeout in 1u64..=86_400,
        error in proptest::option::of("\\PC{0,40}"),
    ) {
        let mut challenge: PaymentRequired = serde_json::from_value(payment_required_example()).unwrap();
        challenge.resource.url = url;
        challenge.resource.description = description;
        challenge.error = error;
        challenge.accepts[0].amount = AtomicAmount(amount);
        challenge.accepts[0].network = network;
        challenge.accepts[0].max_timeout_seconds = timeout;
        let value = header::encode(&challenge).unwrap();
        prop_assert_eq!(header::decode::<PaymentRequired>(value.as_bytes()).unwrap(), challenge);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = header::decode::<PaymentPayload>(&bytes);
        let _ = header::decode::<PaymentRequired>(STANDARD.encode(&bytes).as_bytes());
    }
}
