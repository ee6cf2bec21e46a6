//! Kubernetes quantity strings (`100m`, `1.5`, `2Gi`, `1e3`) to the engine's integers.
//!
//! The engine counts `cpu` in milli-units and everything else in base units (bytes, devices).
//! As in Kubernetes, a value that does not land on a whole unit is rounded up (`0.1m` CPU is
//! 1 milli-CPU, `1.5` bytes is 2 bytes), so a request is never under-counted. The arithmetic is
//! exact integer arithmetic: no floats take part.

use std::collections::BTreeMap;

use basalt_engine::{ResourceList, CPU_NAME};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

/// A quantity string that could not be turned into an engine integer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {text:?}: {reason}")]
pub struct QuantityError {
    pub text: String,
    pub reason: String,
}

fn fail(text: &str, reason: impl Into<String>) -> QuantityError {
    QuantityError {
        text: text.to_string(),
        reason: reason.into(),
    }
}

/// The largest quantity Basalt takes for any resource, in engine units: 2^60, that is 1 EiB of
/// memory, 2^60 milli-CPU (over 10^15 cores) or 2^60 devices. No node holds anywhere near
/// that, and eight such values still sum within an `i64`.
pub const MAX_QUANTITY: i64 = 1 << 60;

/// Parses a quantity for the named resource into engine units: milli-units for `cpu`, base
/// units for every other resource, rounding up. Negative values are rejected, since these are
/// requests and capacities, and so are values above [`MAX_QUANTITY`].
pub fn parse_for_resource(resource: &str, text: &str) -> Result<i64, QuantityError> {
    match parse_clamped(resource, text)? {
        (v, false) => Ok(v),
        (_, true) => Err(fail(text, above_limit())),
    }
}

/// [`parse_for_resource`], but a value above [`MAX_QUANTITY`], however large, is taken as
/// [`MAX_QUANTITY`]; the flag says so. For what is already there (a node's allocatable, a pod
/// another scheduler placed), where refusing would hide more than it protects.
pub fn parse_clamped(resource: &str, text: &str) -> Result<(i64, bool), QuantityError> {
    let scale = if resource == CPU_NAME { 1000 } else { 1 };
    Ok(match exact(text, scale)? {
        Some(v) if v <= MAX_QUANTITY as u128 => (v as i64, false),
        _ => (MAX_QUANTITY, true),
    })
}

/// The message for a value above [`MAX_QUANTITY`].
pub fn above_limit() -> String {
    "larger than Basalt's limit of 2^60 units (no node holds that much)".to_string()
}

/// Parses `text` and returns `ceil(value * scale)`.
pub fn parse_scaled(text: &str, scale: u32) -> Result<i64, QuantityError> {
    exact(text, scale)?
        .and_then(|v| i64::try_from(v).ok())
        .ok_or_else(|| fail(text, "out of range (larger than 2^63-1)"))
}

/// `ceil(value * scale)` of a valid quantity, `None` when that does not fit a u128.
fn exact(text: &str, scale: u32) -> Result<Option<u128>, QuantityError> {
    let parsed = Parsed::from_str(text)?;
    if parsed.negative && parsed.mantissa != 0 {
        return Err(fail(text, "must not be negative"));
    }
    // value * scale = mantissa * 2^bin * 10^exp10 * scale
    let Some(numerator) = parsed
        .mantissa
        .checked_mul(1u128 << parsed.binary_exp)
        .and_then(|n| n.checked_mul(u128::from(scale)))
    else {
        return Ok(None);
    };
    Ok(if parsed.decimal_exp >= 0 {
        10u128
            .checked_pow(parsed.decimal_exp as u32)
            .and_then(|p| numerator.checked_mul(p))
    } else {
        Some(
            match 10u128.checked_pow(parsed.decimal_exp.unsigned_abs()) {
                Some(den) => numerator.div_ceil(den),
                // The divisor exceeds any u128 numerator: the value is in (0, 1], rounded up to 1.
                None => u128::from(numerator != 0),
            },
        )
    })
}

/// Parses every entry of a Kubernetes resource list. On failure returns the offending
/// resource name with the error, so the caller can name the field.
pub fn parse_list(
    list: &BTreeMap<String, Quantity>,
) -> Result<ResourceList, (String, QuantityError)> {
    list.iter()
        .map(|(name, q)| match parse_for_resource(name, &q.0) {
            Ok(v) => Ok((name.clone(), v)),
            Err(e) => Err((name.clone(), e)),
        })
        .collect()
}

/// A syntactically valid quantity: `(-1)^negative * mantissa * 10^decimal_exp * 2^binary_exp`.
struct Parsed {
    negative: bool,
    mantissa: u128,
    decimal_exp: i32,
    binary_exp: u32,
}

/// More significant digits than this cannot be held exactly in a u128.
const MAX_DIGITS: usize = 38;

impl Parsed {
    fn from_str(text: &str) -> Result<Parsed, QuantityError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(fail(text, "empty"));
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if frac_part.contains('.') {
            return Err(fail(text, "more than one decimal point"));
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(fail(text, "expected a number"));
        }
        let (decimal_exp, binary_exp) = parse_suffix(text, suffix)?;

        // Trailing fraction zeros carry no value; dropping them keeps more room for digits.
        let frac_part = frac_part.trim_end_matches('0');
        // The digits of both parts, leading zeros aside, read in place: at most MAX_DIGITS
        // of them, which a u128 always holds.
        let mut mantissa: u128 = 0;
        let mut significant = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            if significant == 0 && b == b'0' {
                continue;
            }
            significant += 1;
            if significant > MAX_DIGITS {
                return Err(fail(text, "too many significant digits"));
            }
            mantissa = mantissa * 10 + u128::from(b - b'0');
        }
        let decimal_exp = i32::try_from(frac_part.len())
            .ok()
            .and_then(|len| decimal_exp.checked_sub(len))
            .ok_or_else(|| fail(text, "exponent out of range"))?;
        Ok(Parsed {
            negative,
            mantissa,
            decimal_exp,
            binary_exp,
        })
    }
}

/// Returns `(decimal exponent, binary exponent)` for a suffix.
fn parse_suffix(text: &str, suffix: &str) -> Result<(i32, u32), QuantityError> {
    let pair = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            // A decimal exponent: `e3`, `E-2`, `e+6`.
            let exp = suffix
                .strip_prefix(['e', 'E'])
                .filter(|e| {
                    let d = e.strip_prefix(['+', '-']).unwrap_or(e);
                    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
                })
                .ok_or_else(|| fail(text, format!("unknown suffix {suffix:?}")))?;
            let exp: i32 = exp
                .parse()
                .ok()
                .filter(|e: &i32| e.abs() <= 1000)
                .ok_or_else(|| fail(text, "exponent out of range"))?;
            (exp, 0)
        }
    };
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(s: &str) -> i64 {
        parse_for_resource("memory", s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn cpu(s: &str) -> i64 {
        parse_for_resource("cpu", s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn plain_numbers() {
        assert_eq!(base("2"), 2);
        assert_eq!(base("0"), 0);
        assert_eq!(base("+7"), 7);
        assert_eq!(base("-0"), 0);
        assert_eq!(base("1.5"), 2, "rounded up");
        assert_eq!(base(".5"), 1);
        assert_eq!(base("5."), 5);
        assert_eq!(base("007"), 7);
        assert_eq!(base("1152921504606846976"), MAX_QUANTITY);
    }

    #[test]
    fn cpu_is_milli() {
        assert_eq!(cpu("2"), 2000);
        assert_eq!(cpu("1.5"), 1500);
        assert_eq!(cpu("100m"), 100);
        assert_eq!(cpu("0.1m"), 1, "rounded up to one milli");
        assert_eq!(cpu("1.0001"), 1001);
        assert_eq!(cpu("500u"), 1);
        assert_eq!(cpu("1000000n"), 1);
        assert_eq!(cpu("1k"), 1_000_000);
    }

    #[test]
    fn decimal_suffixes() {
        assert_eq!(base("1n"), 1);
        assert_eq!(base("500u"), 1);
        assert_eq!(base("1500m"), 2);
        assert_eq!(base("1000m"), 1);
        assert_eq!(base("1k"), 1_000);
        assert_eq!(base("1M"), 1_000_000);
        assert_eq!(base("1G"), 1_000_000_000);
        assert_eq!(base("1T"), 1_000_000_000_000);
        assert_eq!(base("1P"), 1_000_000_000_000_000);
        assert_eq!(base("1E"), 1_000_000_000_000_000_000);
        assert_eq!(base("1.5k"), 1_500);
    }

    #[test]
    fn binary_suffixes() {
        assert_eq!(base("1Ki"), 1 << 10);
        assert_eq!(base("512Mi"), 512 << 20);
        assert_eq!(base("2Gi"), 2 << 30);
        assert_eq!(base("1Ti"), 1 << 40);
        assert_eq!(base("1Pi"), 1 << 50);
        assert_eq!(base("1Ei"), 1 << 60);
        assert_eq!(base("1.5Gi"), 3 << 29);
        assert_eq!(base("0.5Ki"), 512);
    }

    #[test]
    fn exponents() {
        assert_eq!(base("1e3"), 1_000);
        assert_eq!(base("1E3"), 1_000);
        assert_eq!(base("1e+3"), 1_000);
        assert_eq!(base("15e-1"), 2);
        assert_eq!(cpu("1e-3"), 1);
        assert_eq!(cpu("1e-400"), 1, "tiny but positive rounds up");
        assert_eq!(base("0e5"), 0);
    }

    #[test]
    fn errors_name_the_text() {
        for (text, reason) in [
            ("", "empty"),
            ("   ", "empty"),
            ("1.2.3", "more than one decimal point"),
            ("abc", "expected a number"),
            ("1Qi", "unknown suffix \"Qi\""),
            ("1e", "unknown suffix \"e\""),
            ("1ki", "unknown suffix \"ki\""),
            ("1 Gi", "unknown suffix \" Gi\""),
            ("-1", "must not be negative"),
            ("-100m", "must not be negative"),
            ("10E", LIMIT),
            ("8Ei", LIMIT),
            ("1025Pi", LIMIT),
            ("9223372036854775807", LIMIT),
            ("1e18Ei", "unknown suffix \"e18Ei\""),
            ("99999999999999999999999999999999999999Ei", LIMIT),
            ("1e5000", "exponent out of range"),
            (
                "123456789012345678901234567890123456789",
                "too many significant digits",
            ),
        ] {
            let err = parse_for_resource("memory", text).unwrap_err();
            assert_eq!(err.reason, reason, "for {text:?}");
            assert_eq!(
                err.to_string(),
                format!("invalid quantity {text:?}: {reason}")
            );
        }
        assert!(parse_for_resource("cpu", "9223372036854775807").is_err());
        assert!(parse_for_resource("cpu", "9223372036854775807m").is_err());
        assert_eq!(cpu("1152921504606846976m"), MAX_QUANTITY);
        assert!(parse_for_resource("cpu", "1152921504606846977m").is_err());
    }

    const LIMIT: &str = "larger than Basalt's limit of 2^60 units (no node holds that much)";

    #[test]
    fn clamped_takes_anything_large_as_the_limit() {
        for text in ["1Ei", "8Ei", "9223372036854775807", "1e30", "1e1000"] {
            let (v, clamped) = parse_clamped("memory", text).unwrap();
            assert_eq!(v, MAX_QUANTITY, "{text}");
            assert_eq!(clamped, text != "1Ei", "{text}");
        }
        assert_eq!(parse_clamped("cpu", "2").unwrap(), (2000, false));
        assert!(parse_clamped("memory", "abc").is_err());
        assert!(parse_clamped("memory", "-1").is_err());
        assert_eq!(parse_scaled("9223372036854775807", 1).unwrap(), i64::MAX);
        assert!(parse_scaled("9223372036854775808", 1).is_err());
    }

    #[test]
    fn list_reports_the_bad_name() {
        let list: BTreeMap<String, Quantity> = [
            ("cpu".to_string(), Quantity("1".into())),
            ("memory".to_string(), Quantity("lots".into())),
        ]
        .into();
        let (name, err) = parse_list(&list).unwrap_err();
        assert_eq!(name, "memory");
        assert_eq!(err.text, "lots");
    }
}
