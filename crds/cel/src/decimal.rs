//! Exact decimal numbers for the quantities an `i64` can't hold: the role Go's `inf.Dec` plays in
//! Kubernetes' `resource.Quantity`.
//!
//! A [`Dec`] is `unscaled × 10^-scale`, the unscaled magnitude kept as decimal digits. Nothing here
//! rounds except [`Dec::round_up_to_nano`]; sums and comparisons are exact. Digit strings are
//! bounded by [`MAX_DIGITS`], so no input can make one allocate without limit.

use std::cmp::Ordering;

/// The most decimal digits an unscaled value may have: about 10^1024, far beyond any resource
/// quantity. Kubernetes has no such bound; an operation that would exceed it fails instead.
pub(crate) const MAX_DIGITS: usize = 1024;

/// `unscaled × 10^-scale`, with the sign apart.
#[derive(Clone, Debug)]
pub(crate) struct Dec {
    /// Never set for zero.
    negative: bool,
    /// The unscaled magnitude, most significant digit first, with no leading zeros: empty for zero.
    digits: Vec<u8>,
    scale: i64,
}

fn out_of_range() -> String {
    format!("quantity out of range (more than {MAX_DIGITS} significant digits)")
}

/// The decimal digits of `v`, most significant first; empty for zero.
fn digits_of(mut v: u128) -> Vec<u8> {
    let mut out = Vec::new();
    while v > 0 {
        out.push((v % 10) as u8);
        v /= 10;
    }
    out.reverse();
    out
}

fn trim_leading_zeros(digits: &mut Vec<u8>) {
    let zeros = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..zeros);
}

/// Compares two magnitudes of the same scale.
fn cmp_aligned(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `a + b` for magnitudes of the same scale.
fn add_aligned(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let (mut i, mut j, mut carry) = (a.len(), b.len(), 0u8);
    while i > 0 || j > 0 || carry > 0 {
        let mut sum = carry;
        if i > 0 {
            i -= 1;
            sum += a[i];
        }
        if j > 0 {
            j -= 1;
            sum += b[j];
        }
        out.push(sum % 10);
        carry = sum / 10;
    }
    out.reverse();
    trim_leading_zeros(&mut out);
    out
}

/// `a - b` for magnitudes of the same scale, `a >= b`.
fn sub_aligned(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let (mut j, mut borrow) = (b.len(), 0i8);
    for i in (0..a.len()).rev() {
        let mut d = a[i] as i8 - borrow;
        if j > 0 {
            j -= 1;
            d -= b[j] as i8;
        }
        borrow = i8::from(d < 0);
        out.push((d + 10 * borrow) as u8);
    }
    out.reverse();
    trim_leading_zeros(&mut out);
    out
}

/// Go's `math.Pow10`, table for table, so that approximate floats come out bit for bit as
/// Kubernetes computes them.
fn go_pow10(n: i64) -> f64 {
    const TAB: [f64; 32] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    ];
    const POS32: [f64; 10] = [
        1e0, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288,
    ];
    const NEG32: [f64; 11] = [
        1e0, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320,
    ];
    if (0..=308).contains(&n) {
        POS32[(n / 32) as usize] * TAB[(n % 32) as usize]
    } else if (-323..0).contains(&n) {
        NEG32[(-n / 32) as usize] / TAB[(-n % 32) as usize]
    } else if n > 0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// `base × 10^exponent` as Kubernetes' `AsApproximateFloat64` computes it.
pub(crate) fn approximate(base: f64, exponent: i64) -> f64 {
    if exponent == 0 {
        base
    } else {
        base * go_pow10(exponent)
    }
}

impl Dec {
    /// `value × 10^scale`: an `int64Amount` turned into a decimal.
    pub(crate) fn from_int(value: i64, scale: i32) -> Dec {
        Dec {
            negative: value < 0,
            digits: digits_of(u128::from(value.unsigned_abs())),
            scale: -i64::from(scale),
        }
    }

    /// Parses `[+-]?digits[.digits]` (either side of the point may be empty, not both), as Go's
    /// `inf.Dec.SetString`.
    pub(crate) fn parse(s: &str) -> Option<Dec> {
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if int.len() + frac.len() == 0 || !all_digits(int) || !all_digits(frac) {
            return None;
        }
        let mut digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
        trim_leading_zeros(&mut digits);
        if digits.len() > MAX_DIGITS {
            return None;
        }
        let negative = negative && !digits.is_empty();
        Some(Dec {
            negative,
            digits,
            scale: frac.len() as i64,
        })
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    pub(crate) fn sign(&self) -> i32 {
        match (self.is_zero(), self.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        }
    }

    #[cfg(test)]
    pub(crate) fn scale(&self) -> i64 {
        self.scale
    }

    /// Moves the decimal point: `value × 10^-delta`.
    pub(crate) fn shift_scale(&mut self, delta: i64) {
        self.scale = self.scale.saturating_add(delta);
    }

    pub(crate) fn neg(mut self) -> Dec {
        self.negative = !self.negative && !self.is_zero();
        self
    }

    pub(crate) fn abs(mut self) -> Dec {
        self.negative = false;
        self
    }

    /// Multiplies the unscaled value by `m` (at most 2^64).
    pub(crate) fn mul_unscaled(&mut self, m: u128) -> Result<(), String> {
        let mut carry = 0u128;
        for d in self.digits.iter_mut().rev() {
            let v = u128::from(*d) * m + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        let mut head = digits_of(carry);
        head.extend_from_slice(&self.digits);
        trim_leading_zeros(&mut head);
        if head.len() > MAX_DIGITS {
            return Err(out_of_range());
        }
        self.digits = head;
        Ok(())
    }

    /// The unscaled magnitude at `scale`, which must not be below this value's.
    fn aligned(&self, scale: i64) -> Result<Vec<u8>, String> {
        let zeros = usize::try_from(scale - self.scale).map_err(|_| out_of_range())?;
        if self.is_zero() {
            return Ok(Vec::new());
        }
        if self.digits.len().saturating_add(zeros) > MAX_DIGITS {
            return Err(out_of_range());
        }
        let mut out = self.digits.clone();
        out.resize(self.digits.len() + zeros, 0);
        Ok(out)
    }

    /// Rounds a non-zero value away from zero to scale 9 (nano), as `inf.Dec.Round` with
    /// `RoundUp` does; the result has scale 9 exactly, trailing zeros included.
    pub(crate) fn round_up_to_nano(&mut self) -> Result<(), String> {
        const NANO: i64 = 9;
        if self.scale > NANO {
            let drop = self.scale - NANO;
            let keep = usize::try_from(self.digits.len() as i64 - drop).unwrap_or(0);
            let dropped_nonzero = self.digits[keep..].iter().any(|&d| d != 0);
            self.digits.truncate(keep);
            if dropped_nonzero {
                self.digits = add_aligned(&self.digits, &[1]);
            }
            self.scale = NANO;
        } else if self.scale < NANO {
            self.digits = self.aligned(NANO)?;
            self.scale = NANO;
        }
        Ok(())
    }

    /// The position just above the most significant digit: `len - scale`. Two non-zero values of
    /// the same sign with different tops differ in magnitude accordingly.
    fn top(&self) -> i64 {
        self.digits.len() as i64 - self.scale
    }

    fn cmp_magnitude(&self, other: &Dec) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        self.top().cmp(&other.top()).then_with(|| {
            // Same top: compare digit by digit, the shorter one padded with zeros.
            let n = self.digits.len().max(other.digits.len());
            (0..n)
                .map(|i| {
                    let a = self.digits.get(i).copied().unwrap_or(0);
                    let b = other.digits.get(i).copied().unwrap_or(0);
                    a.cmp(&b)
                })
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
    }

    /// Exact signed comparison, whatever the scales.
    pub(crate) fn cmp(&self, other: &Dec) -> Ordering {
        match self.sign().cmp(&other.sign()) {
            Ordering::Equal if self.negative => other.cmp_magnitude(self),
            Ordering::Equal => self.cmp_magnitude(other),
            unequal => unequal,
        }
    }

    /// `self + other`, at the greater of the two scales, as `inf.Dec.Add`.
    pub(crate) fn add(&self, other: &Dec) -> Result<Dec, String> {
        let scale = self.scale.max(other.scale);
        let (a, b) = (self.aligned(scale)?, other.aligned(scale)?);
        let (negative, digits) = if self.negative == other.negative {
            (self.negative, add_aligned(&a, &b))
        } else if cmp_aligned(&a, &b).is_ge() {
            (self.negative, sub_aligned(&a, &b))
        } else {
            (other.negative, sub_aligned(&b, &a))
        };
        if digits.len() > MAX_DIGITS {
            return Err(out_of_range());
        }
        let negative = negative && !digits.is_empty();
        Ok(Dec {
            negative,
            digits,
            scale,
        })
    }

    /// `self - other`, as `inf.Dec.Sub`.
    pub(crate) fn sub(&self, other: &Dec) -> Result<Dec, String> {
        self.add(&other.clone().neg())
    }

    /// `float64(unscaled) × 10^-scale`, as Kubernetes' `AsApproximateFloat64`.
    pub(crate) fn approximate_f64(&self) -> f64 {
        let text: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let base = if text.is_empty() {
            0.0
        } else {
            text.parse::<f64>().unwrap_or(f64::INFINITY)
        };
        let base = if self.negative { -base } else { base };
        approximate(base, -self.scale)
    }

    /// The canonical mantissa and power-of-ten exponent, as Kubernetes prints quantities: trailing
    /// zeros moved into the exponent, then the exponent lowered to a multiple of three. The
    /// mantissa carries the sign; zero is `("0", 0)`.
    pub(crate) fn canonical(&self) -> (String, i64) {
        if self.is_zero() {
            return ("0".to_owned(), 0);
        }
        let zeros = self.digits.iter().rev().take_while(|&&d| d == 0).count();
        let mut digits = self.digits[..self.digits.len() - zeros].to_vec();
        let mut exponent = zeros as i64 - self.scale;
        while exponent.rem_euclid(3) != 0 {
            digits.push(0);
            exponent -= 1;
        }
        let mut text = String::with_capacity(digits.len() + 1);
        if self.negative {
            text.push('-');
        }
        text.extend(digits.iter().map(|d| char::from(b'0' + d)));
        (text, exponent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Dec {
        Dec::parse(s).unwrap()
    }

    #[test]
    fn parses_like_inf_dec() {
        assert_eq!(dec("1.50").scale(), 2);
        assert_eq!(dec("-0.5").sign(), -1);
        assert_eq!(dec("-0").sign(), 0);
        assert_eq!(dec(".5").cmp(&dec("0.50")), Ordering::Equal);
        assert_eq!(dec("1.").cmp(&dec("1")), Ordering::Equal);
        for bad in ["", ".", "+", "1..2", "1e3", "--1", "1-"] {
            assert!(Dec::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn compares_exactly_across_scales() {
        let mut big = dec("1");
        big.shift_scale(-500);
        assert_eq!(big.cmp(&dec("9")), Ordering::Greater);
        assert_eq!(dec("-1").cmp(&dec("-0.999")), Ordering::Less);
        assert_eq!(dec("0.1").cmp(&dec("0.10000")), Ordering::Equal);
        assert_eq!(Dec::from_int(15, -1).cmp(&dec("1.5")), Ordering::Equal);
    }

    #[test]
    fn adds_and_subtracts() {
        let sum = dec("1.5").add(&dec("-2.25")).unwrap();
        assert_eq!(sum.cmp(&dec("-0.75")), Ordering::Equal);
        assert_eq!(sum.scale(), 2);
        assert_eq!(
            dec("999").add(&dec("1")).unwrap().cmp(&dec("1000")),
            Ordering::Equal
        );
        assert_eq!(dec("5").sub(&dec("5")).unwrap().sign(), 0);
        let mut huge = dec("1");
        huge.shift_scale(-5000);
        assert!(huge.add(&dec("1")).is_err());
    }

    #[test]
    fn rounds_up_to_nano() {
        let mut d = dec("0.0000000001");
        d.round_up_to_nano().unwrap();
        assert_eq!(d.cmp(&dec("0.000000001")), Ordering::Equal);
        let mut d = dec("1.5");
        d.round_up_to_nano().unwrap();
        assert_eq!((d.scale(), d.canonical()), (9, ("1500".to_owned(), -3)));
    }

    #[test]
    fn go_pow10_matches_literals() {
        assert_eq!(go_pow10(3), 1e3);
        assert_eq!(go_pow10(-9), 1e-9);
        assert_eq!(go_pow10(400), f64::INFINITY);
        assert_eq!(go_pow10(-400), 0.0);
    }
}
