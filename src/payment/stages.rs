//! [`HookStages`]: the asynchronous stages of a payment a lifecycle hook takes part in.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

/// The asynchronous stages of a payment's life a [`PaymentHooks`](super::PaymentHooks) takes
/// part in, as its [`stages`](super::PaymentHooks::stages) declares them. The core calls a
/// hook's method of a stage only when the hook declared that stage, and builds no future for a
/// stage that no registered hook declared: a hook that only observes settlements costs a paid
/// request one stage, not every one.
///
/// The synchronous methods (the challenge's extensions, the settlement's `extensions` and
/// `extra`, and [`observe`](super::PaymentHooks::observe)) are always called.
///
/// ```
/// use tower_x402::payment::HookStages;
///
/// let gate = HookStages::REQUEST | HookStages::AFTER_SETTLE;
/// assert!(gate.contains(HookStages::AFTER_SETTLE));
/// assert!(!gate.contains(HookStages::BEFORE_VERIFY));
/// assert!(HookStages::ALL.contains(gate));
/// assert_eq!(format!("{gate:?}"), "HookStages(REQUEST | AFTER_SETTLE)");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HookStages(u8);

/// Each stage's name, for `Debug`.
const NAMES: [(HookStages, &str); 6] = [
    (HookStages::REQUEST, "REQUEST"),
    (HookStages::BEFORE_VERIFY, "BEFORE_VERIFY"),
    (HookStages::VERIFY_FAILURE, "VERIFY_FAILURE"),
    (HookStages::AFTER_VERIFY, "AFTER_VERIFY"),
    (HookStages::BEFORE_SETTLE, "BEFORE_SETTLE"),
    (HookStages::AFTER_SETTLE, "AFTER_SETTLE"),
];

impl HookStages {
    /// No asynchronous stage: a hook with only synchronous methods (the default).
    pub const NONE: Self = Self(0);
    /// [`considers_request`](super::PaymentHooks::considers_request) and
    /// [`on_protected_request`](super::PaymentHooks::on_protected_request): the hook may grant
    /// or refuse a priced request before its payment is read.
    pub const REQUEST: Self = Self(1 << 7);
    /// [`before_verify`](super::PaymentHooks::before_verify).
    pub const BEFORE_VERIFY: Self = Self(1);
    /// [`on_verify_failure`](super::PaymentHooks::on_verify_failure).
    pub const VERIFY_FAILURE: Self = Self(1 << 1);
    /// [`after_verify`](super::PaymentHooks::after_verify).
    pub const AFTER_VERIFY: Self = Self(1 << 2);
    /// [`before_settle`](super::PaymentHooks::before_settle), before a first `/settle`.
    pub const BEFORE_SETTLE: Self = Self(1 << 3);
    /// [`after_settle`](super::PaymentHooks::after_settle).
    pub const AFTER_SETTLE: Self = Self(1 << 5);
    /// Every stage.
    pub const ALL: Self = Self(
        Self::REQUEST.0
            | Self::BEFORE_VERIFY.0
            | Self::VERIFY_FAILURE.0
            | Self::AFTER_VERIFY.0
            | Self::BEFORE_SETTLE.0
            | Self::AFTER_SETTLE.0,
    );

    /// The stages of both.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every stage of `other` is one of these.
    #[must_use]
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for HookStages {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        self.union(other)
    }
}

impl BitOrAssign for HookStages {
    fn bitor_assign(&mut self, other: Self) {
        *self = self.union(other);
    }
}

impl fmt::Debug for HookStages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HookStages(")?;
        let mut named = NAMES.iter().filter(|(stage, _)| self.contains(*stage));
        match named.next() {
            None => f.write_str("NONE")?,
            Some((_, first)) => {
                f.write_str(first)?;
                for (_, name) in named {
                    write!(f, " | {name}")?;
                }
            }
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_every_named_stage() {
        let union = NAMES
            .iter()
            .fold(HookStages::NONE, |all, (stage, _)| all | *stage);
        assert_eq!(union, HookStages::ALL);
        assert_eq!(format!("{:?}", HookStages::NONE), "HookStages(NONE)");
        assert!(HookStages::NONE.contains(HookStages::NONE));
        assert!(!HookStages::NONE.contains(HookStages::AFTER_SETTLE));
    }
}
