//! `Quantity` against exact rational arithmetic.

use basalt_cel::{Quantity, QuantityFormat};
use proptest::prelude::*;
use std::cmp::Ordering;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn notations_agree() {
    assert_eq!(q("1Gi"), q("1024Mi"));
    assert!(q("1.5") > q("1"));
    assert!(q("100m") < q("1"));
    assert_eq!(q("1e3"), q("1k"));
    assert_eq!(q("80Gi").to_string(), "80Gi");
    assert_eq!(q("1.5").to_string(), "1500m");
    assert_eq!(q("2048Mi").to_string(), "2Gi");
    assert_eq!(q("1.5Gi").to_string(), "1536Mi");
}

#[test]
fn equal_values_in_different_notations() {
    for (a, b) in [
        ("1Gi", "1024Mi"),
        ("1e3", "1k"),
        ("1E3", "1000"),
        ("1.5", "1500m"),
        ("0.5Ki", "512"),
        ("1e-3", "1m"),
        ("+1", "1"),
        ("-0", "0"),
        ("1.", "1"),
        (".5", "500m"),
        ("1000000n", "1m"),
        ("8Ei", "9223372036854775807"),
    ] {
        assert_eq!(q(a), q(b), "{a} == {b}");
    }
}

#[test]
fn ordering() {
    for (small, big) in [
        ("100m", "1"),
        ("1", "1.5"),
        ("1k", "1Ki"),
        ("-1Gi", "-1G"),
        ("79Gi", "80Gi"),
        ("999999999999999999", "1e18"),
        ("1e30", "1e31"),
        ("123456789012345678901234567890", "1e30"),
        ("0.1n", "2n"),
    ] {
        assert!(q(small) < q(big), "{small} < {big}");
    }
}

#[test]
fn rejects_what_kubernetes_rejects() {
    for bad in [
        "",
        "1 Gi",
        "1Gix",
        "ki",
        "1ki",
        "1K",
        "1e",
        "1.5.5",
        "abc",
        "1k5",
        "1E+",
        " 1",
        "1Gi ",
        "--1",
        "1e9999999999999999999",
    ] {
        assert!(Quantity::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn quirks_kubernetes_has_too() {
    assert_eq!(q("-"), q("0"));
    assert_eq!(q("."), q("0"));
    // Finer than a nano rounds up, away from zero.
    assert_eq!(q("0.1n"), q("1n"));
    assert_eq!(q("-1e-12"), q("-1n"));
    // Binary values are capped at 2^63-1; decimal ones are not.
    assert_eq!(q("16Ei"), q("9223372036854775807"));
    assert!(q("16E") > q("9223372036854775807"));
}

#[test]
fn integer_form_decides_is_integer() {
    assert_eq!(q("80Gi").as_i64(), Some(80 << 30));
    assert_eq!(q("2k").as_i64(), Some(2000));
    assert_eq!(q("1.5k").as_i64(), Some(1500));
    assert_eq!(q("-7").as_i64(), Some(-7));
    assert_eq!(q("1000m").as_i64(), None);
    assert_eq!(q("1.5Gi").as_i64(), None);
    assert_eq!(q("1Pi").as_i64(), None);
    assert_eq!(q("1e30").as_i64(), None);
}

#[test]
fn arithmetic() {
    let sum = q("1Gi").checked_add(&q("512Mi")).unwrap();
    assert_eq!(sum, q("1.5Gi"));
    assert_eq!(sum.as_i64(), Some(3 << 29));
    assert_eq!(q("1").checked_sub(&q("1500m")).unwrap(), q("-500m"));
    let big = q("8Ei").checked_add(&q("8Ei")).unwrap();
    assert!(big > q("9223372036854775807"));
    assert_eq!(big.as_i64(), None);
    assert_eq!(
        q("0").checked_add(&q("1Ki")).unwrap().format(),
        QuantityFormat::BinarySI
    );
}

#[test]
fn approximate_floats() {
    assert_eq!(q("1.5").as_approximate_f64(), 1.5);
    assert_eq!(q("80Gi").as_approximate_f64(), 85899345920.0);
    assert_eq!(q("100m").as_approximate_f64(), 0.1);
    assert_eq!(q("-2k").as_approximate_f64(), -2000.0);
}

#[test]
fn canonical_display() {
    for (input, shown) in [
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("80Gi", "80Gi"),
        ("1000", "1k"),
        ("1e3", "1e3"),
        ("100m", "100m"),
        ("0.5Ki", "512"),
        ("1e21", "1e21"),
        ("-1Ki", "-1Ki"),
        ("0", "0"),
        ("1000Mi", "1000Mi"),
    ] {
        assert_eq!(q(input).to_string(), shown, "{input}");
    }
}

/// The suffixes generated, as (text, power of ten, power of two).
const SUFFIXES: [(&str, i32, u32); 19] = [
    ("n", -9, 0),
    ("u", -6, 0),
    ("m", -3, 0),
    ("", 0, 0),
    ("k", 3, 0),
    ("M", 6, 0),
    ("G", 9, 0),
    ("Ki", 0, 10),
    ("Mi", 0, 20),
    ("Gi", 0, 30),
    ("Ti", 0, 40),
    ("e3", 3, 0),
    ("e-3", -3, 0),
    ("E6", 6, 0),
    ("e+2", 2, 0),
    ("e-9", -9, 0),
    ("e0", 0, 0),
    ("E-1", -1, 0),
    ("e9", 9, 0),
];

/// A generated quantity and its exact value in units of 10^-15, rounded up (away from zero) to a
/// whole nano as Kubernetes rounds.
#[derive(Debug, Clone)]
struct Case {
    text: String,
    femtos: i128,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        "[0-9]{0,6}",
        proptest::option::of("[0-9]{0,6}"),
        0..SUFFIXES.len(),
    )
        .prop_map(|(negative, int, frac, suffix)| {
            let (text_suffix, ten, two) = SUFFIXES[suffix];
            let frac_digits = frac.clone().unwrap_or_default();
            let digits = format!("{int}{frac_digits}");
            let mantissa: i128 = if digits.is_empty() {
                0
            } else {
                digits.parse().unwrap()
            };
            // value = mantissa × 10^(ten - frac) × 2^two, in femtos: × 10^15.
            let shift = 15 + ten - frac_digits.len() as i32;
            assert!(shift >= 0);
            let mut femtos = mantissa * 10i128.pow(shift as u32) * (1i128 << two);
            let nano = 1_000_000;
            if femtos % nano != 0 {
                femtos = (femtos / nano + 1) * nano;
            }
            if negative {
                femtos = -femtos;
            }
            let text = format!(
                "{}{int}{}{text_suffix}",
                if negative { "-" } else { "" },
                frac.map(|f| format!(".{f}")).unwrap_or_default()
            );
            // The one spelling of zero Kubernetes refuses is the empty string.
            let text = if text.is_empty() {
                "0".to_owned()
            } else {
                text
            };
            Case { text, femtos }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn ordering_agrees_with_exact_rationals(a in case(), b in case()) {
        let (qa, qb) = (Quantity::parse(&a.text), Quantity::parse(&b.text));
        let (qa, qb) = match (qa, qb) {
            (Ok(x), Ok(y)) => (x, y),
            (x, y) => panic!("{a:?} -> {x:?}, {b:?} -> {y:?}"),
        };
        prop_assert_eq!(qa.cmp(&qb), a.femtos.cmp(&b.femtos), "{} vs {}", a.text, b.text);
        prop_assert_eq!(qa == qb, a.femtos == b.femtos);
        prop_assert_eq!(qa.sign(), a.femtos.signum() as i32);
    }

    #[test]
    fn canonical_text_round_trips(a in case()) {
        let parsed = q(&a.text);
        let shown = parsed.to_string();
        prop_assert_eq!(q(&shown).cmp(&parsed), Ordering::Equal, "{} -> {}", a.text, shown);
    }

    #[test]
    fn sums_are_exact(a in case(), b in case()) {
        let sum = q(&a.text).checked_add(&q(&b.text)).unwrap();
        let expected = a.femtos + b.femtos;
        // Compare against the exact sum, written as a decimal quantity of nanos.
        let nanos = expected / 1_000_000;
        prop_assert_eq!(sum.cmp(&q(&format!("{nanos}n"))), Ordering::Equal);
        let diff = q(&a.text).checked_sub(&q(&b.text)).unwrap();
        let nanos = (a.femtos - b.femtos) / 1_000_000;
        prop_assert_eq!(diff.cmp(&q(&format!("{nanos}n"))), Ordering::Equal);
    }
}
