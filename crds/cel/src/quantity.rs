//! Kubernetes `resource.Quantity`: parsing, exact comparison, and the arithmetic CEL's quantity
//! library exposes, with the same results as `k8s.io/apimachinery/pkg/api/resource`.
//!
//! Like Kubernetes, a quantity is held either as a small scaled integer (`value × 10^scale`, the
//! `int64Amount` of the Go code) or as an exact decimal (Go's `inf.Dec`), and which of the two a
//! parse or a sum produces is reproduced, because it shows: `isInteger()` and `asInteger()` only
//! succeed on the integer form, so `quantity("1000m").isInteger()` is false in Kubernetes and here.
//! Comparisons and equality are exact in both forms.

use crate::decimal::{approximate, Dec};
use std::cmp::Ordering;
use std::fmt;

const ERR_FORMAT: &str = "quantities must match the regular expression \
     '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
const ERR_SUFFIX: &str = "unable to parse quantity's suffix";

/// The suffix family a quantity was written with, which decides how it prints (Kubernetes'
/// `resource.Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityFormat {
    /// `12e6`.
    DecimalExponent,
    /// `12Mi` (powers of 1024).
    BinarySI,
    /// `12M`, `12m` (powers of 1000).
    DecimalSI,
}

#[derive(Clone, Debug)]
enum Amount {
    /// `value × 10^scale`, Kubernetes' `int64Amount`.
    Int { value: i64, scale: i32 },
    /// Kubernetes' `inf.Dec` form.
    Dec(Dec),
}

/// An exact Kubernetes resource quantity, such as `80Gi`, `1500m` or `1e3`.
///
/// Equality and ordering are numeric: `1Gi == 1024Mi`, `1e3 == 1k`, `100m < 1`. [`Display`]
/// prints the canonical form Kubernetes prints (`1.5` as `1500m`, `1.5Gi` as `1536Mi`).
///
/// [`Display`]: fmt::Display
#[derive(Clone, Debug)]
pub struct Quantity {
    amount: Amount,
    format: QuantityFormat,
}

/// The parts `parseQuantityString` splits a quantity into.
struct Parts<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// Splits `s` into sign, number and suffix exactly as Kubernetes' scanner does, quirks included
/// (`"1."` and `".5"` are numbers, a lone sign is zero).
fn scan(s: &str) -> Result<Parts<'_>, String> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let whole = |positive, num, denom| Parts {
        positive,
        value: s,
        num,
        denom,
        suffix: "",
    };
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        return Ok(whole(positive, &s[start..], ""));
    }
    let num = if pos == start { "0" } else { &s[start..pos] };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos >= end {
            return Ok(whole(positive, num, &s[denom_start..]));
        }
        denom = &s[denom_start..pos];
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(ERR_FORMAT.to_owned());
    }
    Ok(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// The base, exponent and format a suffix stands for.
fn interpret(suffix: &str) -> Option<(u32, i32, QuantityFormat)> {
    use QuantityFormat::*;
    let decimal = |e| Some((10, e, DecimalSI));
    let binary = |e| Some((2, e, BinarySI));
    match suffix {
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            // Go truncates the parsed int64 to int32; so do we.
            let exponent: i64 = suffix[1..].parse().ok()?;
            Some((10, exponent as i32, DecimalExponent))
        }
        _ => None,
    }
}

/// Go's `int64Multiply`: the product, or `None` on overflow.
fn int64_multiply(a: i64, b: i64) -> Option<i64> {
    a.checked_mul(b)
}

/// Go's `positiveScaleInt64`: `base × 10^scale`, or `None` on overflow.
fn positive_scale(base: i64, scale: i32) -> Option<i64> {
    if base == 0 {
        return Some(0);
    }
    (0..scale).try_fold(base, |v, _| int64_multiply(v, 10))
}

/// Go's `int64Amount.Add`: the exact sum in integer form, or `None` when it overflows.
fn int_add(a: (i64, i32), b: (i64, i32)) -> Option<(i64, i32)> {
    let ((av, ascale), (bv, bscale)) = (a, b);
    if bv == 0 {
        return Some(a);
    }
    if av == 0 {
        return Some(b);
    }
    match ascale.cmp(&bscale) {
        Ordering::Equal => Some((av.checked_add(bv)?, ascale)),
        Ordering::Greater => {
            let c = positive_scale(av, ascale.checked_sub(bscale)?)?;
            Some((c.checked_add(bv)?, bscale))
        }
        Ordering::Less => {
            let c = positive_scale(bv, bscale.checked_sub(ascale)?)?;
            Some((av.checked_add(c)?, ascale))
        }
    }
}

impl Quantity {
    /// Parses a quantity as Kubernetes' `resource.ParseQuantity` does: an optional sign, a decimal
    /// number, and a suffix among `n u m k M G T P E`, `Ki Mi Gi Ti Pi Ei`, or a decimal exponent
    /// `e<int>` / `E<int>`. Values finer than a nano are rounded up (away from zero) to 1n;
    /// binary-suffixed values above 2^63-1 are capped there, as in Kubernetes.
    ///
    /// The one difference: a number needing more than 1024 significant digits is refused rather
    /// than held (Kubernetes would hold it in a big decimal).
    pub fn parse(s: &str) -> Result<Quantity, String> {
        use QuantityFormat::*;
        if s.is_empty() {
            return Err(ERR_FORMAT.to_owned());
        }
        if s == "0" {
            return Ok(Quantity::from_i64(0));
        }
        let parts = scan(s)?;
        let (base, exponent, format) = interpret(parts.suffix).ok_or(ERR_SUFFIX)?;
        let (mut scale, precision, mantissa) = match format {
            DecimalExponent | DecimalSI => {
                let digits = parts.num.len().saturating_add(parts.denom.len());
                (
                    exponent,
                    18 - i64::try_from(digits).unwrap_or(i64::MAX),
                    1i64,
                )
            }
            BinarySI if exponent >= 0 && parts.denom.is_empty() => {
                let lost = (exponent as f32 * 3.0 / 10.0) as i64;
                let precision = 15 - parts.num.len() as i64 - lost - 1;
                (0, precision, 1i64 << exponent)
            }
            BinarySI => (0, -1, 1),
        };
        if precision >= 0 {
            // Go's int32 arithmetic wraps; mirrored so that even absurd exponents agree.
            scale = scale.wrapping_sub(parts.denom.len() as i32);
            if scale >= -9 {
                let shifted = format!("{}{}", parts.num, parts.denom);
                let value: i64 = shifted.parse().map_err(|_| ERR_NUMERIC)?;
                if let Some(result) = int64_multiply(value, mantissa) {
                    let value = if parts.positive { result } else { -result };
                    return Ok(Quantity {
                        amount: Amount::Int { value, scale },
                        format,
                    });
                }
            }
        }

        let mut amount = Dec::parse(parts.value).ok_or(ERR_NUMERIC)?;
        if base == 10 {
            amount.shift_scale(-i64::from(exponent));
        } else {
            amount.mul_unscaled(1u128 << exponent)?;
        }
        let negative = amount.sign() < 0;
        let mut amount = amount.abs();
        if !amount.is_zero() {
            amount.round_up_to_nano()?;
        }
        let mut format = format;
        if format == BinarySI {
            let max = Dec::from_int(i64::MAX, 0);
            if amount.cmp(&max).is_gt() {
                amount = max;
            }
            if amount.cmp(&Dec::from_int(1, 0)).is_lt() && !amount.is_zero() {
                format = DecimalSI;
            }
        }
        if negative {
            amount = amount.neg();
        }
        Ok(Quantity {
            amount: Amount::Dec(amount),
            format,
        })
    }

    /// The integer `value`, in decimal format (Kubernetes' `NewQuantity(value, DecimalSI)`).
    pub fn from_i64(value: i64) -> Quantity {
        Quantity {
            amount: Amount::Int { value, scale: 0 },
            format: QuantityFormat::DecimalSI,
        }
    }

    /// The suffix family this quantity prints with.
    pub fn format(&self) -> QuantityFormat {
        self.format
    }

    fn as_dec(&self) -> Dec {
        match &self.amount {
            Amount::Int { value, scale } => Dec::from_int(*value, *scale),
            Amount::Dec(d) => d.clone(),
        }
    }

    /// -1, 0 or 1.
    pub fn sign(&self) -> i32 {
        match &self.amount {
            Amount::Int { value, .. } => value.signum() as i32,
            Amount::Dec(d) => d.sign(),
        }
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.sign() == 0
    }

    /// The value as an `i64`, when Kubernetes' `AsInt64` gives one: only for a quantity held in
    /// integer form with no fractional scale. `1000m`, `1.5Gi` and `1Pi` are integers, yet
    /// Kubernetes says `None` for them, and so does this.
    pub fn as_i64(&self) -> Option<i64> {
        match self.amount {
            Amount::Int { value, scale } if scale >= 0 => positive_scale(value, scale),
            _ => None,
        }
    }

    /// CEL's `isInteger()`: whether [`as_i64`](Self::as_i64) succeeds.
    pub fn is_integer(&self) -> bool {
        self.as_i64().is_some()
    }

    /// The value as a float, computed as Kubernetes' `AsApproximateFloat64` does (bit for bit).
    pub fn as_approximate_f64(&self) -> f64 {
        match &self.amount {
            Amount::Int { value, scale } => approximate(*value as f64, i64::from(*scale)),
            Amount::Dec(d) => d.approximate_f64(),
        }
    }

    /// `self + other`, as Kubernetes' `Quantity.Add`. Fails only when the exact sum would need more
    /// than 1024 significant digits.
    pub fn checked_add(&self, other: &Quantity) -> Result<Quantity, String> {
        let mut q = self.clone();
        match (&self.amount, &other.amount) {
            (&Amount::Int { value, scale }, &Amount::Int { value: v, scale: s }) => {
                if value == 0 {
                    q.format = other.format;
                }
                if let Some((value, scale)) = int_add((value, scale), (v, s)) {
                    q.amount = Amount::Int { value, scale };
                    return Ok(q);
                }
            }
            _ if self.is_zero() => q.format = other.format,
            _ => {}
        }
        q.amount = Amount::Dec(self.as_dec().add(&other.as_dec())?);
        Ok(q)
    }

    /// `self - other`, as Kubernetes' `Quantity.Sub`.
    pub fn checked_sub(&self, other: &Quantity) -> Result<Quantity, String> {
        let mut q = self.clone();
        if self.is_zero() {
            q.format = other.format;
        }
        if let (&Amount::Int { value, scale }, &Amount::Int { value: v, scale: s }) =
            (&self.amount, &other.amount)
        {
            if let Some((value, scale)) = int_add((value, scale), (v.wrapping_neg(), s)) {
                q.amount = Amount::Int { value, scale };
                return Ok(q);
            }
        }
        q.amount = Amount::Dec(self.as_dec().sub(&other.as_dec())?);
        Ok(q)
    }

    /// The value as `(mantissa, power of 1024)` when it is an integer fitting an `i128`.
    fn base1024(&self) -> Option<(i128, u32)> {
        let (text, exponent) = self.as_dec().canonical();
        let mut value: i128 = text.parse().ok()?;
        for _ in 0..u32::try_from(exponent).ok()? {
            value = value.checked_mul(10)?;
        }
        let mut power = 0;
        while power < 6 && value != 0 && value % 1024 == 0 {
            value /= 1024;
            power += 1;
        }
        Some((value, power))
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    /// Exact numeric order, whatever the forms and scales.
    fn cmp(&self, other: &Self) -> Ordering {
        if let (
            &Amount::Int {
                value: a,
                scale: sa,
            },
            &Amount::Int {
                value: b,
                scale: sb,
            },
        ) = (&self.amount, &other.amount)
        {
            if sa == sb {
                return a.cmp(&b);
            }
            // Bring the one with the greater scale down to the other's, when that fits an i128.
            let d = i64::from(sa) - i64::from(sb);
            if d.unsigned_abs() <= 18 {
                let pow = 10i128.pow(d.unsigned_abs() as u32);
                return if d > 0 {
                    (i128::from(a) * pow).cmp(&i128::from(b))
                } else {
                    i128::from(a).cmp(&(i128::from(b) * pow))
                };
            }
        }
        self.as_dec().cmp(&other.as_dec())
    }
}

impl fmt::Display for Quantity {
    /// The canonical form Kubernetes prints: the largest suffix that keeps the mantissa an integer
    /// (`1500m`, `1536Mi`, `2k`, `1e21`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        if self.format == QuantityFormat::BinarySI
            && self.cmp(&Quantity::from_i64(-1024)).is_gt()
            && self.cmp(&Quantity::from_i64(1024)).is_lt()
        {
            // Small binary values print in decimal.
        } else if self.format == QuantityFormat::BinarySI {
            if let Some((mantissa, power)) = self.base1024() {
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power as usize];
                return write!(f, "{mantissa}{suffix}");
            }
        }
        let (mantissa, exponent) = self.as_dec().canonical();
        let suffix = match (self.format, exponent) {
            (QuantityFormat::DecimalExponent, 0) => String::new(),
            (QuantityFormat::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".to_owned(),
            (_, -6) => "u".to_owned(),
            (_, -3) => "m".to_owned(),
            (_, 0) => String::new(),
            (_, 3) => "k".to_owned(),
            (_, 6) => "M".to_owned(),
            (_, 9) => "G".to_owned(),
            (_, 12) => "T".to_owned(),
            (_, 15) => "P".to_owned(),
            (_, 18) => "E".to_owned(),
            (_, e) => format!("e{e}"),
        };
        write!(f, "{mantissa}{suffix}")
    }
}

impl std::str::FromStr for Quantity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}
