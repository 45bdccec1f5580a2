//! [`HeldNotes`]: the notes a scheme wrote on payments being settled or in doubt, held by the
//! core.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use http::Extensions;

use crate::settlement::PaymentKey;

/// How many payments in doubt keep their notes in memory, at most.
const DOUBTFUL_NOTES: usize = 4096;

/// The notes of payments being settled or in doubt, held by the core: handed to the scheme's
/// settle step (that of a recovery too), and back to the payment once it settled.
#[derive(Default)]
pub(super) struct HeldNotes(Mutex<HashMap<PaymentKey, Extensions>>);

impl HeldNotes {
    /// Keeps `notes` for the payment `key` (nothing when there are none).
    pub(super) fn keep(&self, key: &PaymentKey, notes: Extensions) {
        if notes.is_empty() {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= DOUBTFUL_NOTES {
            tracing::warn!(%key, "too many payments in doubt to keep their scheme's notes; this one's are dropped");
            return;
        }
        kept.insert(key.clone(), notes);
    }

    /// `read` asked with the notes kept for the payment `key` (empty when none were), left kept.
    pub(super) fn read<T>(&self, key: &PaymentKey, read: impl FnOnce(&Extensions) -> T) -> T {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match kept.get(key) {
            Some(notes) => read(notes),
            None => {
                drop(kept);
                read(&Extensions::new())
            }
        }
    }

    /// The notes kept for the payment `key`, taken (empty when none were).
    pub(super) fn take(&self, key: &PaymentKey) -> Extensions {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.is_empty() {
            return Extensions::new();
        }
        kept.remove(key).unwrap_or_default()
    }
}
