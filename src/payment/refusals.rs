//! A short memory of the payments the facilitator found invalid, so that the same invalid payment
//! presented again is refused without another `/verify`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use crate::settlement::Fingerprint;

/// How many refused payments are remembered at most; the oldest is forgotten first.
const CAPACITY: usize = 4096;

/// Invalid payments by fingerprint, with the signed payload they carried (so a valid payment
/// that shares a fingerprint with a forged one is never answered from here) and the reason.
#[derive(Debug)]
pub(crate) struct RefusedPayments {
    ttl: Duration,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_fingerprint: HashMap<Fingerprint, Refused>,
    /// Insertion order, for eviction.
    order: VecDeque<(Fingerprint, Instant)>,
}

#[derive(Debug)]
struct Refused {
    /// The refused proof's JSON text; a payment is the same one when its text is.
    payload: Box<RawValue>,
    reason: String,
    at: Instant,
}

impl RefusedPayments {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The facilitator's reason for refusing exactly this payment, if it did within the memory's
    /// lifetime.
    pub(crate) fn get(&self, fingerprint: &Fingerprint, payload: &RawValue) -> Option<String> {
        if self.ttl.is_zero() {
            return None;
        }
        let mut entries = self.lock();
        if entries.by_fingerprint.is_empty() {
            return None;
        }
        let refused = entries.by_fingerprint.get(fingerprint)?;
        if refused.at.elapsed() >= self.ttl {
            entries.by_fingerprint.remove(fingerprint);
            return None;
        }
        (refused.payload.get() == payload.get()).then(|| refused.reason.clone())
    }

    /// Remembers that the facilitator refused `payload` for `reason`.
    pub(crate) fn remember(&self, fingerprint: &Fingerprint, payload: &RawValue, reason: &str) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.lock();
        while entries.order.len() >= CAPACITY {
            let Some((oldest, at)) = entries.order.pop_front() else {
                break;
            };
            if entries
                .by_fingerprint
                .get(&oldest)
                .is_some_and(|refused| refused.at == at)
            {
                entries.by_fingerprint.remove(&oldest);
            }
        }
        entries.order.push_back((fingerprint.clone(), now));
        entries.by_fingerprint.insert(
            fingerprint.clone(),
            Refused {
                payload: payload.to_owned(),
                reason: reason.to_owned(),
                at: now,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use x402_wire::PaymentPayload;

    fn payload(signature: &str) -> PaymentPayload {
        with_nonce(signature, &format!("0x{}", "ab".repeat(32)))
    }

    fn with_nonce(signature: &str, nonce: &str) -> PaymentPayload {
        serde_json::from_value(json!({
            "x402Version": 2,
            "accepted": {
                "scheme": "exact", "network": "eip155:8453", "amount": "1000",
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60
            },
            "payload": {
                "signature": signature,
                "authorization": {
                    "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                    "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                    "value": "1000", "validAfter": "0", "validBefore": "9999999999",
                    "nonce": nonce
                }
            }
        }))
        .unwrap()
    }

    #[test]
    fn remembers_only_the_same_signed_payment_for_a_while() {
        let memory = RefusedPayments::new(Duration::from_secs(60));
        let forged = payload("0x01");
        let fingerprint = Fingerprint::of(&forged);
        assert_eq!(memory.get(&fingerprint, &forged.payload), None);
        memory.remember(
            &fingerprint,
            &forged.payload,
            "invalid_exact_evm_payload_signature",
        );
        assert_eq!(
            memory.get(&fingerprint, &forged.payload).as_deref(),
            Some("invalid_exact_evm_payload_signature")
        );
        // The same authorization with another signature (the genuine one) is not answered here.
        let genuine = payload("0x02");
        assert_eq!(Fingerprint::of(&genuine), fingerprint);
        assert_eq!(memory.get(&fingerprint, &genuine.payload), None);
    }

    #[test]
    fn forgets_after_its_lifetime_and_beyond_its_capacity() {
        let memory = RefusedPayments::new(Duration::from_millis(1));
        let forged = payload("0x01");
        let fingerprint = Fingerprint::of(&forged);
        memory.remember(&fingerprint, &forged.payload, "invalid");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(memory.get(&fingerprint, &forged.payload), None);

        let memory = RefusedPayments::new(Duration::from_secs(60));
        for n in 0..CAPACITY + 10 {
            let payment = with_nonce("0x01", &format!("0x{n:064x}"));
            memory.remember(&Fingerprint::of(&payment), &payment.payload, "invalid");
        }
        let entries = memory.lock();
        assert_eq!(entries.by_fingerprint.len(), CAPACITY);
        assert_eq!(entries.order.len(), CAPACITY);
    }

    #[test]
    fn a_zero_lifetime_remembers_nothing() {
        let memory = RefusedPayments::new(Duration::ZERO);
        let forged = payload("0x01");
        let fingerprint = Fingerprint::of(&forged);
        memory.remember(&fingerprint, &forged.payload, "invalid");
        assert_eq!(memory.get(&fingerprint, &forged.payload), None);
    }
}
