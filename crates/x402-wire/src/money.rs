//! Exact decimal money. No floating point is used anywhere in this module.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a money string or conversion was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MoneyError {
    /// The string was empty.
    #[error("amount is empty")]
    Empty,
    /// A minus sign: amounts are never negative.
    #[error("amount `{0}` is negative")]
    Negative(String),
    /// Anything but digits with at most one decimal point (exponents, spaces, signs, …).
    #[error("amount `{0}` is not a plain decimal number")]
    Invalid(String),
    /// More fraction digits than the target can represent; nothing is silently truncated.
    #[error("amount `{amount}` has more than {max} fraction digits")]
    TooPrecise {
        /// The offending input.
        amount: String,
        /// How many fraction digits are allowed.
        max: u8,
    },
    /// The value does not fit.
    #[error("amount `{0}` is too large")]
    Overflow(String),
    /// The asset's decimals are unknown (not a known USDC deployment), so dollars cannot be
    /// converted to its units; give the amount in atomic units.
    #[error("the asset's decimals are unknown: set the charge in atomic units")]
    UnknownDecimals,
}

/// Fraction digits a [`UsdAmount`] keeps: one micro-dollar, the precision of USDC.
const USD_SCALE: u8 = 6;
const MICROS_PER_DOLLAR: u64 = 1_000_000;

/// A non-negative amount of US dollars, exact to the micro-dollar (six fraction digits).
///
/// Parses from plain decimal strings (`"1"`, `"1.00"`, `"$0.001"`) and displays with at least two
/// fraction digits (`"1.00"`, `"29.00"`, `"0.001"`), the way prices are written.
///
/// ```
/// use x402_wire::UsdAmount;
///
/// let price: UsdAmount = "1.00".parse()?;
/// assert_eq!(price.to_string(), "1.00");
/// assert_eq!(price.to_atomic(6)?.to_string(), "1000000");
/// assert!("1e3".parse::<UsdAmount>().is_err());
/// assert!("0.0000001".parse::<UsdAmount>().is_err());
/// # Ok::<_, x402_wire::MoneyError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsdAmount {
    micros: u64,
}

impl UsdAmount {
    /// Zero dollars.
    pub const ZERO: Self = Self { micros: 0 };

    /// An amount of whole cents, e.g. `from_cents(100)` is one dollar.
    pub const fn from_cents(cents: u64) -> Option<Self> {
        match cents.checked_mul(MICROS_PER_DOLLAR / 100) {
            Some(micros) => Some(Self { micros }),
            None => None,
        }
    }

    /// An amount of micro-dollars.
    pub const fn from_micros(micros: u64) -> Self {
        Self { micros }
    }

    /// The amount in micro-dollars.
    pub const fn micros(self) -> u64 {
        self.micros
    }

    /// The amount in the atomic units of a token with `decimals` fraction digits
    /// (6 for USDC: `1.00` → `1000000`).
    ///
    /// # Errors
    ///
    /// [`MoneyError::TooPrecise`] when the token cannot represent the amount exactly, and
    /// [`MoneyError::Overflow`] when the result does not fit.
    pub fn to_atomic(self, decimals: u8) -> Result<AtomicAmount, MoneyError> {
        let micros = u128::from(self.micros);
        if decimals >= USD_SCALE {
            let factor = 10u128
                .checked_pow(u32::from(decimals - USD_SCALE))
                .ok_or_else(|| MoneyError::Overflow(self.to_string()))?;
            micros
                .checked_mul(factor)
                .map(AtomicAmount)
                .ok_or_else(|| MoneyError::Overflow(self.to_string()))
        } else {
            let divisor = 10u128.pow(u32::from(USD_SCALE - decimals));
            if !micros.is_multiple_of(divisor) {
                return Err(MoneyError::TooPrecise {
                    amount: self.to_string(),
                    max: decimals,
                });
            }
            Ok(AtomicAmount(micros / divisor))
        }
    }

    /// The dollar amount that `atomic` units of a token with `decimals` fraction digits are
    /// worth, when it is a whole number of micro-dollars.
    ///
    /// # Errors
    ///
    /// [`MoneyError::TooPrecise`] below a micro-dollar, [`MoneyError::Overflow`] when too large.
    pub fn from_atomic(atomic: AtomicAmount, decimals: u8) -> Result<Self, MoneyError> {
        let micros = if decimals >= USD_SCALE {
            let divisor = 10u128
                .checked_pow(u32::from(decimals - USD_SCALE))
                .ok_or_else(|| MoneyError::Overflow(atomic.to_string()))?;
            if !atomic.0.is_multiple_of(divisor) {
                return Err(MoneyError::TooPrecise {
                    amount: atomic.to_string(),
                    max: USD_SCALE,
                });
            }
            atomic.0 / divisor
        } else {
            atomic
                .0
                .checked_mul(10u128.pow(u32::from(USD_SCALE - decimals)))
                .ok_or_else(|| MoneyError::Overflow(atomic.to_string()))?
        };
        u64::try_from(micros)
            .map(Self::from_micros)
            .map_err(|_| MoneyError::Overflow(atomic.to_string()))
    }
}

impl FromStr for UsdAmount {
    type Err = MoneyError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let digits = input.strip_prefix('$').unwrap_or(input);
        let (whole, fraction) = split_decimal(input, digits)?;
        if fraction.len() > usize::from(USD_SCALE) {
            return Err(MoneyError::TooPrecise {
                amount: input.to_owned(),
                max: USD_SCALE,
            });
        }
        let overflow = || MoneyError::Overflow(input.to_owned());
        let whole: u64 = parse_digits(whole).ok_or_else(overflow)?;
        let mut fraction_micros: u64 = parse_digits(fraction).ok_or_else(overflow)?;
        for _ in fraction.len()..usize::from(USD_SCALE) {
            fraction_micros *= 10;
        }
        whole
            .checked_mul(MICROS_PER_DOLLAR)
            .and_then(|micros| micros.checked_add(fraction_micros))
            .map(Self::from_micros)
            .ok_or_else(overflow)
    }
}

impl fmt::Display for UsdAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.micros / MICROS_PER_DOLLAR;
        let mut fraction = self.micros % MICROS_PER_DOLLAR;
        let mut width = usize::from(USD_SCALE);
        while width > 2 && fraction.is_multiple_of(10) {
            fraction /= 10;
            width -= 1;
        }
        write!(f, "{whole}.{fraction:0width$}")
    }
}

impl Serialize for UsdAmount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UsdAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parsed(deserializer)
    }
}

/// A whole number of a token's smallest units, written on the wire as a decimal string
/// (`"1000000"` is one USDC).
///
/// ```
/// use x402_wire::AtomicAmount;
///
/// let amount: AtomicAmount = "10000".parse()?;
/// assert_eq!(amount.get(), 10_000);
/// assert!("-1".parse::<AtomicAmount>().is_err());
/// assert!("1.5".parse::<AtomicAmount>().is_err());
/// # Ok::<_, x402_wire::MoneyError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AtomicAmount(pub u128);

impl AtomicAmount {
    /// The number of units.
    pub const fn get(self) -> u128 {
        self.0
    }
}

/// `text` when it is an amount as the wire writes one: one or more ASCII decimal digits and
/// nothing else — no sign (`+`, `-`), spaces, `0x` prefix, decimal point or exponent. Every
/// amount the wire types carry as a string (an [`AtomicAmount`], a permit's or a voucher's
/// amount, a channel's balance) is checked here before it is read as a number, so that one
/// amount has one spelling: Rust's own integer parsing accepts `"+44000"`.
///
/// ```
/// use x402_wire::{MoneyError, decimal_digits};
///
/// assert_eq!(decimal_digits("44000"), Ok("44000"));
/// for bad in ["+44000", " 44000", "44000 ", "-1", "0x10", "", "1.0", "1e3", "٤٤"] {
///     assert!(decimal_digits(bad).is_err(), "{bad:?}");
/// }
/// assert_eq!(decimal_digits(""), Err(MoneyError::Empty));
/// ```
///
/// # Errors
///
/// [`MoneyError::Empty`], [`MoneyError::Negative`] for a leading `-`, [`MoneyError::Invalid`]
/// for anything else that is not a digit.
pub fn decimal_digits(text: &str) -> Result<&str, MoneyError> {
    if text.is_empty() {
        return Err(MoneyError::Empty);
    }
    if text.starts_with('-') {
        return Err(MoneyError::Negative(text.to_owned()));
    }
    if !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(MoneyError::Invalid(text.to_owned()));
    }
    Ok(text)
}

impl AtomicAmount {
    /// An amount of atomic units written as the wire writes it ([`decimal_digits`]), as a
    /// `u128`.
    ///
    /// ```
    /// use x402_wire::AtomicAmount;
    ///
    /// assert_eq!(AtomicAmount::parse_u128("44000"), Ok(44_000));
    /// assert!(AtomicAmount::parse_u128("+44000").is_err());
    /// assert!(AtomicAmount::parse_u128("340282366920938463463374607431768211456").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// What [`decimal_digits`] refuses, or [`MoneyError::Overflow`] past `u128::MAX`.
    pub fn parse_u128(text: &str) -> Result<u128, MoneyError> {
        parse_digits(decimal_digits(text)?).ok_or_else(|| MoneyError::Overflow(text.to_owned()))
    }
}

impl From<u128> for AtomicAmount {
    fn from(value: u128) -> Self {
        Self(value)
    }
}

impl FromStr for AtomicAmount {
    type Err = MoneyError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let (whole, fraction) = split_decimal(input, input)?;
        if !fraction.is_empty() || input.contains('.') {
            return Err(MoneyError::TooPrecise {
                amount: input.to_owned(),
                max: 0,
            });
        }
        parse_digits(whole)
            .map(Self)
            .ok_or_else(|| MoneyError::Overflow(input.to_owned()))
    }
}

impl fmt::Display for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for AtomicAmount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AtomicAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parsed(deserializer)
    }
}

/// Splits `digits` (the part of `input` after any currency sign) into its whole and fraction
/// digit runs, rejecting everything that is not `D+` or `D+.D+`.
fn split_decimal<'a>(input: &str, digits: &'a str) -> Result<(&'a str, &'a str), MoneyError> {
    if digits.is_empty() {
        return Err(MoneyError::Empty);
    }
    if digits.starts_with('-') {
        return Err(MoneyError::Negative(input.to_owned()));
    }
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return Err(MoneyError::Invalid(input.to_owned())),
        None => (digits, ""),
    };
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Err(MoneyError::Invalid(input.to_owned()));
    }
    Ok((whole, fraction))
}

/// Parses a run of ASCII digits; `None` on overflow. An empty run is zero.
fn parse_digits<T>(digits: &str) -> Option<T>
where
    T: Copy + From<u8> + CheckedDecimal,
{
    digits.bytes().try_fold(T::from(0), |acc, byte| {
        acc.checked_mul_add(T::from(byte - b'0'))
    })
}

/// `acc * 10 + digit` without overflow, for the integer types money uses.
trait CheckedDecimal: Sized {
    fn checked_mul_add(self, digit: Self) -> Option<Self>;
}

impl CheckedDecimal for u64 {
    fn checked_mul_add(self, digit: Self) -> Option<Self> {
        self.checked_mul(10)?.checked_add(digit)
    }
}

impl CheckedDecimal for u128 {
    fn checked_mul_add(self, digit: Self) -> Option<Self> {
        self.checked_mul(10)?.checked_add(digit)
    }
}

/// A string parsed as `T` from the text as it lies in the input (no copy), with the errors a
/// `String` field would give.
pub(crate) fn parsed<'de, T, D>(deserializer: D) -> Result<T, D::Error>
where
    T: FromStr,
    T::Err: fmt::Display,
    D: Deserializer<'de>,
{
    struct Text<T>(std::marker::PhantomData<T>);
    impl<T: FromStr> serde::de::Visitor<'_> for Text<T>
    where
        T::Err: fmt::Display,
    {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
            text.parse().map_err(E::custom)
        }
        fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<T, E> {
            match std::str::from_utf8(bytes) {
                Ok(text) => self.visit_str(text),
                Err(_) => Err(E::invalid_value(serde::de::Unexpected::Bytes(bytes), &self)),
            }
        }
    }
    deserializer.deserialize_string(Text(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(s: &str) -> Result<UsdAmount, MoneyError> {
        s.parse()
    }

    #[test]
    fn parses_and_converts_to_usdc_units() {
        assert_eq!(
            usd("1.00").unwrap().to_atomic(6).unwrap(),
            AtomicAmount(1_000_000)
        );
        assert_eq!(
            usd("199.00").unwrap().to_atomic(6).unwrap(),
            AtomicAmount(199_000_000)
        );
        assert_eq!(
            usd("$0.001").unwrap().to_atomic(6).unwrap(),
            AtomicAmount(1_000)
        );
        assert_eq!(usd("0.000001").unwrap().micros(), 1);
        assert_eq!(
            usd("7").unwrap().to_atomic(18).unwrap(),
            AtomicAmount(7 * 10u128.pow(18))
        );
    }

    #[test]
    fn displays_like_a_price_table() {
        for (input, shown) in [
            ("1", "1.00"),
            ("29.0", "29.00"),
            ("0.001", "0.001"),
            ("0.10", "0.10"),
            ("12.345600", "12.3456"),
        ] {
            assert_eq!(usd(input).unwrap().to_string(), shown);
        }
        assert_eq!(UsdAmount::from_cents(4200).unwrap().to_string(), "42.00");
    }

    #[test]
    fn rejects_what_it_cannot_represent_exactly() {
        assert_eq!(usd(""), Err(MoneyError::Empty));
        assert_eq!(usd("$"), Err(MoneyError::Empty));
        assert!(matches!(usd("-1.00"), Err(MoneyError::Negative(_))));
        for bad in [
            "1e3", "1E-2", " 1", "1 ", "+1", "1.", ".5", "1.2.3", "0x10", "NaN", "inf", "1,00",
        ] {
            assert!(matches!(usd(bad), Err(MoneyError::Invalid(_))), "{bad}");
        }
        assert!(matches!(
            usd("0.0000001"),
            Err(MoneyError::TooPrecise { max: 6, .. })
        ));
        assert!(matches!(
            usd("18446744073709551616"),
            Err(MoneyError::Overflow(_))
        ));
        assert!(matches!(
            usd("18446744073710"),
            Err(MoneyError::Overflow(_))
        ));
        assert!(matches!(
            usd("0.001").unwrap().to_atomic(2),
            Err(MoneyError::TooPrecise { max: 2, .. })
        ));
    }

    #[test]
    fn atomic_amounts_are_plain_integers() {
        assert_eq!("0".parse::<AtomicAmount>(), Ok(AtomicAmount(0)));
        assert!("".parse::<AtomicAmount>().is_err());
        assert!("1.0".parse::<AtomicAmount>().is_err());
        assert!("1e6".parse::<AtomicAmount>().is_err());
        assert!(
            "340282366920938463463374607431768211456"
                .parse::<AtomicAmount>()
                .is_err()
        );
        let json = serde_json::to_string(&AtomicAmount(10_000)).unwrap();
        assert_eq!(json, "\"10000\"");
        assert!(
            serde_json::from_str::<AtomicAmount>("10000").is_err(),
            "numbers are strings on the wire"
        );
    }

    #[test]
    fn round_trips_between_units() {
        let price = usd("54.00").unwrap();
        assert_eq!(
            UsdAmount::from_atomic(price.to_atomic(6).unwrap(), 6).unwrap(),
            price
        );
        assert!(UsdAmount::from_atomic(AtomicAmount(1), 18).is_err());
    }
}
