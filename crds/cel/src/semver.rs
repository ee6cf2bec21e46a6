//! Semantic versions as Kubernetes' CEL `semver` library sees them: parsed and ordered like the
//! `blang/semver/v4` package it uses (strict `MAJOR.MINOR.PATCH[-pre][+build]`, build metadata
//! ignored when comparing).

use std::cmp::Ordering;
use std::fmt;

/// One dot-separated pre-release identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pre {
    Numeric(u64),
    Alpha(String),
}

impl Pre {
    fn parse(s: &str) -> Result<Pre, String> {
        if s.is_empty() {
            return Err("Prerelease is empty".to_owned());
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            if s.len() > 1 && s.starts_with('0') {
                return Err(format!(
                    "Numeric PreRelease version must not contain leading zeroes {s:?}"
                ));
            }
            return s
                .parse()
                .map(Pre::Numeric)
                .map_err(|e| format!("invalid prerelease {s:?}: {e}"));
        }
        if s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            Ok(Pre::Alpha(s.to_owned()))
        } else {
            Err(format!("Invalid character(s) found in prerelease {s:?}"))
        }
    }

    fn cmp(&self, other: &Pre) -> Ordering {
        match (self, other) {
            (Pre::Numeric(a), Pre::Numeric(b)) => a.cmp(b),
            (Pre::Numeric(_), Pre::Alpha(_)) => Ordering::Less,
            (Pre::Alpha(_), Pre::Numeric(_)) => Ordering::Greater,
            (Pre::Alpha(a), Pre::Alpha(b)) => a.cmp(b),
        }
    }
}

impl fmt::Display for Pre {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pre::Numeric(n) => write!(f, "{n}"),
            Pre::Alpha(s) => f.write_str(s),
        }
    }
}

/// A semantic version, `1.2.3-rc.1+build.5`.
///
/// Equality and order follow semver precedence: build metadata is ignored, a pre-release sorts
/// before its release.
#[derive(Clone, Debug)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Pre>,
    build: Vec<String>,
}

/// A `MAJOR`, `MINOR` or `PATCH` number: digits, no leading zero.
fn number(part: &str, what: &str) -> Result<u64, String> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "Invalid character(s) found in {what} number {part:?}"
        ));
    }
    if part.len() > 1 && part.starts_with('0') {
        return Err(format!(
            "{what} number must not contain leading zeroes {part:?}"
        ));
    }
    part.parse()
        .map_err(|e| format!("invalid {what} number {part:?}: {e}"))
}

impl Semver {
    /// Parses a version strictly, as `semver.Parse` of `blang/semver/v4`: three numbers without
    /// leading zeros, then optional `-pre.release` and `+build.metadata` identifiers.
    pub fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".to_owned());
        }
        let mut parts = s.splitn(3, '.');
        let (Some(major), Some(minor), Some(rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("No Major.Minor.Patch elements found".to_owned());
        };
        let (rest, build) = match rest.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (rest, None),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((patch, pre)) => (patch, Some(pre)),
            None => (rest, None),
        };
        let build = build
            .map(|b| {
                b.split('.')
                    .map(|id| {
                        if id.is_empty() {
                            Err("Build meta data is empty".to_owned())
                        } else if id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
                            Ok(id.to_owned())
                        } else {
                            Err(format!(
                                "Invalid character(s) found in build meta data {id:?}"
                            ))
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?
            .unwrap_or_default();
        let pre = pre
            .map(|p| p.split('.').map(Pre::parse).collect::<Result<Vec<_>, _>>())
            .transpose()?
            .unwrap_or_default();
        Ok(Semver {
            major: number(major, "Major")?,
            minor: number(minor, "Minor")?,
            patch: number(patch, "Patch")?,
            pre,
            build,
        })
    }

    /// Parses after normalizing, as CEL's `semver(s, true)`: a leading `v` is dropped, missing
    /// minor and patch numbers become 0, and leading zeros are removed from the three numbers
    /// (`v1.02` is `1.2.0`).
    pub fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let cut = s.find(['-', '+']).unwrap_or(s.len());
        let (core, tail) = s.split_at(cut);
        let mut numbers: Vec<String> = core
            .split('.')
            .map(|n| {
                let trimmed = n.trim_start_matches('0');
                if trimmed.is_empty() && !n.is_empty() {
                    "0".to_owned()
                } else {
                    trimmed.to_owned()
                }
            })
            .collect();
        while numbers.len() < 3 {
            numbers.push("0".to_owned());
        }
        Semver::parse(&format!("{}{tail}", numbers.join(".")))
    }

    /// The major version.
    pub fn major(&self) -> u64 {
        self.major
    }

    /// The minor version.
    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// The patch version.
    pub fn patch(&self) -> u64 {
        self.patch
    }
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Semver {}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    /// Semver precedence: numbers, then pre-release (none sorts last); build metadata ignored.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self
                    .pre
                    .iter()
                    .zip(&other.pre)
                    .map(|(a, b)| a.cmp(b))
                    .find(|o| o.is_ne())
                    .unwrap_or_else(|| self.pre.len().cmp(&other.pre.len())),
            })
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, p) in self.pre.iter().enumerate() {
            write!(f, "{}{p}", if i == 0 { '-' } else { '.' })?;
        }
        for (i, b) in self.build.iter().enumerate() {
            write!(f, "{}{b}", if i == 0 { '+' } else { '.' })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Semver {
        Semver::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_strictly() {
        let s = v("560.35.3-rc.1+build.7");
        assert_eq!((s.major(), s.minor(), s.patch()), (560, 35, 3));
        assert_eq!(s.to_string(), "560.35.3-rc.1+build.7");
        for bad in [
            "",
            "1",
            "1.2",
            "v1.2.3",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-01",
            "1.2.3-a..b",
            "1.2.3-ä",
            "1.2.x",
            "1.2.3.4",
            " 1.2.3",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad:?}");
        }
        // Zero itself is no leading zero; build metadata may have them.
        v("0.0.0-0+001");
    }

    #[test]
    fn orders_by_precedence() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "2.0.0",
            "550.0.0",
            "560.35.3",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(v("1.2.3+a"), v("1.2.3+b"));
    }

    #[test]
    fn normalizes_on_request() {
        assert_eq!(Semver::parse_normalized("v1.2").unwrap(), v("1.2.0"));
        assert_eq!(Semver::parse_normalized("1").unwrap(), v("1.0.0"));
        assert_eq!(
            Semver::parse_normalized("01.002.0-rc.1").unwrap(),
            v("1.2.0-rc.1")
        );
        assert!(Semver::parse_normalized("v1.x").is_err());
    }
}
