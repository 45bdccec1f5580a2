//! [`Charge`]: what a metered (`upto`) request costs, decided by the work, bounded by what the
//! buyer signed; and the `Settlement-Overrides` JSON other x402 servers use for the same.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use x402_wire::{AtomicAmount, MoneyError, PaymentRequirements, UsdAmount, UsdcDeployment};

/// The fraction digits of `requirement`'s asset, when it is a known USDC deployment.
pub(crate) fn asset_decimals(requirement: &PaymentRequirements) -> Option<u8> {
    UsdcDeployment::ALL
        .iter()
        .find(|usdc| {
            usdc.network == requirement.network
                && usdc.asset.eq_ignore_ascii_case(&requirement.asset)
        })
        .map(|usdc| usdc.decimals)
}

/// The amount a metered (`upto`) payment is charged, set by the work that serves the request.
///
/// The buyer signs a maximum ([`maximum`](Self::maximum)); the handler decides what the request
/// actually cost — [`set`](Self::set) it, or [`add`](Self::add) to it per row or per token —
/// and the layer settles exactly that once the handler is done (or, in
/// [`SettlementMode::AfterBody`](crate::SettlementMode::AfterBody), once the body has ended).
/// [`X402Layer`](crate::X402Layer) puts one in the request extensions of every request paid
/// with an `upto` payment; with the `axum` feature it is also an extractor. Clones share the
/// amount.
///
/// Whatever the handler sets, the layer never settles more than the buyer signed: an amount
/// above the maximum settles nothing and is answered 500, since it is a bug in the handler.
/// Zero settles nothing, and the buyer's authorization stays unused. A charge the handler never
/// touched is zero too (unless the response names an amount in `Settlement-Overrides`): a
/// handler that adds per result and finds none owes nothing, and the buyer is never charged the
/// maximum by default.
///
/// ```
/// use tower_x402::payment::Charge;
/// use tower_x402::proto::{AtomicAmount, UsdAmount};
///
/// let charge = Charge::new(AtomicAmount(500_000), 6); // up to 0.50 USDC
/// for _row in 0..3 {
///     charge.add_usd("0.01".parse()?)?;
/// }
/// assert_eq!(charge.amount(), Some(AtomicAmount(30_000)));
/// assert_eq!(charge.remaining(), AtomicAmount(470_000));
/// charge.set(AtomicAmount(0));
/// assert_eq!(charge.amount(), Some(AtomicAmount(0)));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Charge(Arc<ChargeInner>);

struct ChargeInner {
    maximum: AtomicAmount,
    decimals: Option<u8>,
    amount: Mutex<Option<u128>>,
}

impl Charge {
    /// A charge of nothing set yet, up to `maximum` atomic units of an asset with `decimals`
    /// fraction digits.
    pub fn new(maximum: AtomicAmount, decimals: u8) -> Self {
        Self::with_decimals(maximum, Some(decimals))
    }

    /// The charge of a payment of `requirement` (its amount is the signed maximum).
    pub(crate) fn for_requirement(requirement: &PaymentRequirements) -> Self {
        Self::with_decimals(requirement.amount, asset_decimals(requirement))
    }

    fn with_decimals(maximum: AtomicAmount, decimals: Option<u8>) -> Self {
        Self(Arc::new(ChargeInner {
            maximum,
            decimals,
            amount: Mutex::new(None),
        }))
    }

    /// The most the buyer signed for, in atomic units.
    pub fn maximum(&self) -> AtomicAmount {
        self.0.maximum
    }

    /// The amount set so far, or `None` when the handler set nothing.
    pub fn amount(&self) -> Option<AtomicAmount> {
        self.lock().map(AtomicAmount)
    }

    /// What is settled for this charge: the amount set, else `from_header` (the amount the
    /// response's `Settlement-Overrides` named), else zero — an untouched charge settles nothing.
    pub(crate) fn settled(&self, from_header: Option<AtomicAmount>) -> AtomicAmount {
        self.amount().or(from_header).unwrap_or(AtomicAmount(0))
    }

    /// What may still be added before the maximum is reached.
    pub fn remaining(&self) -> AtomicAmount {
        let charged = self.lock().unwrap_or(0);
        AtomicAmount(self.0.maximum.0.saturating_sub(charged))
    }

    /// Sets the amount to charge, in atomic units, replacing any earlier amount.
    pub fn set(&self, amount: impl Into<AtomicAmount>) {
        let amount = amount.into();
        *self.0.amount.lock().unwrap_or_else(PoisonError::into_inner) = Some(amount.0);
    }

    /// Adds `amount` atomic units to the charge (from zero when nothing was set).
    pub fn add(&self, amount: impl Into<AtomicAmount>) {
        let amount = amount.into();
        let mut current = self.0.amount.lock().unwrap_or_else(PoisonError::into_inner);
        // Saturates: an amount that large is above any maximum, and refused as such.
        *current = Some(current.unwrap_or(0).saturating_add(amount.0));
    }

    /// Sets the amount to charge in dollars, replacing any earlier amount.
    ///
    /// # Errors
    ///
    /// When the asset's units cannot represent `amount` or its decimals are unknown; the charge
    /// is then unchanged.
    pub fn set_usd(&self, amount: UsdAmount) -> Result<(), MoneyError> {
        self.set(self.atomic(amount)?);
        Ok(())
    }

    /// Adds `amount` dollars to the charge.
    ///
    /// # Errors
    ///
    /// As [`set_usd`](Self::set_usd); the charge is then unchanged.
    pub fn add_usd(&self, amount: UsdAmount) -> Result<(), MoneyError> {
        self.add(self.atomic(amount)?);
        Ok(())
    }

    fn atomic(&self, amount: UsdAmount) -> Result<AtomicAmount, MoneyError> {
        let decimals = self.0.decimals.ok_or(MoneyError::UnknownDecimals)?;
        amount.to_atomic(decimals)
    }

    pub(crate) fn decimals(&self) -> Option<u8> {
        self.0.decimals
    }

    fn lock(&self) -> Option<u128> {
        *self.0.amount.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Charge")
            .field("maximum", &self.0.maximum)
            .field("amount", &self.lock())
            .finish()
    }
}

/// Why a `Settlement-Overrides` value could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OverrideError {
    #[error("not a JSON object with a string `amount`: {0}")]
    Shape(String),
    #[error("amount `{0}` is neither atomic units, a percentage nor a dollar amount")]
    Amount(String),
    #[error("amount `{0}` is in dollars but the asset's decimals are unknown")]
    UnknownDecimals(String),
    #[error("amount `{0}` does not fit")]
    Overflow(String),
}

/// The amount a `Settlement-Overrides` value (`{"amount": "1000" | "50%" | "$0.05"}`) names, in
/// atomic units of an asset with `decimals` fraction digits and a signed `maximum`: a
/// percentage (at most two decimals) of the maximum, floored; dollars truncated to the asset's
/// decimals. Nothing here compares the result with the maximum.
pub(crate) fn resolve_override(
    value: &[u8],
    maximum: AtomicAmount,
    decimals: Option<u8>,
) -> Result<AtomicAmount, OverrideError> {
    #[derive(serde::Deserialize)]
    struct Overrides {
        amount: String,
    }
    let overrides: Overrides =
        serde_json::from_slice(value).map_err(|error| OverrideError::Shape(error.to_string()))?;
    let text = overrides.amount.as_str();
    let bad = || OverrideError::Amount(text.to_owned());
    let overflow = || OverrideError::Overflow(text.to_owned());
    if let Some(percent) = text.strip_suffix('%') {
        let (whole, fraction) = decimal_parts(percent).ok_or_else(bad)?;
        if fraction.len() > 2 {
            return Err(bad());
        }
        // Hundredths of a percent: "12.5" → 1250.
        let hundredths = scaled(whole, fraction, 2).ok_or_else(overflow)?;
        return maximum
            .0
            .checked_mul(hundredths)
            .map(|product| AtomicAmount(product / 10_000))
            .ok_or_else(overflow);
    }
    if let Some(dollars) = text.strip_prefix('$') {
        let decimals = decimals.ok_or_else(|| OverrideError::UnknownDecimals(text.to_owned()))?;
        let (whole, fraction) = decimal_parts(dollars).ok_or_else(bad)?;
        // Truncated to the asset's decimals, as the reference servers do.
        let kept = &fraction[..fraction.len().min(usize::from(decimals))];
        return scaled(whole, kept, decimals)
            .map(AtomicAmount)
            .ok_or_else(overflow);
    }
    let (whole, fraction) = decimal_parts(text).ok_or_else(bad)?;
    if !fraction.is_empty() {
        return Err(bad());
    }
    scaled(whole, "", 0).map(AtomicAmount).ok_or_else(overflow)
}

/// `D+` or `D+.D+`, split at the point.
fn decimal_parts(text: &str) -> Option<(&str, &str)> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return None,
        None => (text, ""),
    };
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    (!whole.is_empty() && digits(whole) && digits(fraction)).then_some((whole, fraction))
}

/// `whole.fraction × 10^scale` where `fraction` has at most `scale` digits; `None` on overflow.
fn scaled(whole: &str, fraction: &str, scale: u8) -> Option<u128> {
    let mut value: u128 = 0;
    for byte in whole.bytes().chain(fraction.bytes()) {
        value = value
            .checked_mul(10)?
            .checked_add(u128::from(byte - b'0'))?;
    }
    for _ in fraction.len()..usize::from(scale) {
        value = value.checked_mul(10)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(json: &str) -> Result<AtomicAmount, OverrideError> {
        resolve_override(json.as_bytes(), AtomicAmount(500_000), Some(6))
    }

    #[test]
    fn resolves_the_three_forms() {
        assert_eq!(resolve(r#"{"amount":"1000"}"#), Ok(AtomicAmount(1000)));
        assert_eq!(resolve(r#"{"amount":"50%"}"#), Ok(AtomicAmount(250_000)));
        assert_eq!(resolve(r#"{"amount":"33.33%"}"#), Ok(AtomicAmount(166_650)));
        assert_eq!(resolve(r#"{"amount":"0.01%"}"#), Ok(AtomicAmount(50)));
        assert_eq!(resolve(r#"{"amount":"$0.05"}"#), Ok(AtomicAmount(50_000)));
        assert_eq!(resolve(r#"{"amount":"$1"}"#), Ok(AtomicAmount(1_000_000)));
        // Truncated, not rounded.
        assert_eq!(resolve(r#"{"amount":"$0.0000019"}"#), Ok(AtomicAmount(1)));
        assert_eq!(resolve(r#"{"amount":"0"}"#), Ok(AtomicAmount(0)));
        // Floored on the maximum.
        assert_eq!(
            resolve_override(br#"{"amount":"50%"}"#, AtomicAmount(3), Some(6)),
            Ok(AtomicAmount(1))
        );
    }

    #[test]
    fn refuses_everything_else() {
        for bad in [
            "",
            "null",
            "[]",
            r#"{"amount":1000}"#,
            r#"{"amount":""}"#,
            r#"{"amount":"-5"}"#,
            r#"{"amount":"1e3"}"#,
            r#"{"amount":"1.5"}"#,
            r#"{"amount":"12.345%"}"#,
            r#"{"amount":"%"}"#,
            r#"{"amount":"$"}"#,
            r#"{"amount":"$1."}"#,
            r#"{"amount":" 100"}"#,
            r#"{"amount":"0x10"}"#,
            r#"{"amount":"50 %"}"#,
            r#"{"value":"100"}"#,
            r#"{"amount":"999999999999999999999999999999999999999999"}"#,
        ] {
            assert!(resolve(bad).is_err(), "{bad}");
        }
        assert_eq!(
            resolve_override(br#"{"amount":"$0.05"}"#, AtomicAmount(1), None),
            Err(OverrideError::UnknownDecimals("$0.05".into()))
        );
    }

    #[test]
    fn a_charge_adds_up_and_saturates() {
        let charge = Charge::new(AtomicAmount(100), 6);
        assert_eq!(charge.amount(), None);
        assert_eq!(charge.remaining(), AtomicAmount(100));
        charge.add(AtomicAmount(40));
        let shared = charge.clone();
        shared.add(AtomicAmount(40));
        assert_eq!(charge.amount(), Some(AtomicAmount(80)));
        charge.add(AtomicAmount(u128::MAX));
        assert_eq!(charge.amount(), Some(AtomicAmount(u128::MAX)));
        assert_eq!(charge.remaining(), AtomicAmount(0));
        let untouched = Charge::new(AtomicAmount(100), 6);
        assert_eq!(untouched.settled(None), AtomicAmount(0));
        assert_eq!(untouched.settled(Some(AtomicAmount(7))), AtomicAmount(7));
        assert_eq!(
            charge.settled(Some(AtomicAmount(7))),
            AtomicAmount(u128::MAX)
        );
        let unknown = Charge::with_decimals(AtomicAmount(1), None);
        assert_eq!(
            unknown.add_usd(UsdAmount::from_micros(1)),
            Err(MoneyError::UnknownDecimals)
        );
        assert_eq!(unknown.amount(), None);
    }
}
