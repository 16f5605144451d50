//! Durations, sizes and counts in the configuration file, as serde types.
//!
//! Every time and size key of the file uses these, so they read the same everywhere:
//!
//! - **Durations** ([`Dur`], [`NonZeroDur`]): a number with a unit, `"250ms"`, `"30s"`,
//!   `"5m"`, `"1h"`, `"2d"`; units can be combined (`"1h30m"`) and numbers can have a
//!   fraction (`"1.5s"`). A bare number, as a TOML integer or float (`30`, `0.25`) or a string
//!   without a unit (`"30"`), is seconds. At most 100 years.
//! - **Sizes** ([`Size`], [`NonZeroSize`]): a number of bytes with an optional unit, `"512"`,
//!   `"512B"`, `"64KiB"`, `"10MiB"`, `"1GiB"`, `"1TiB"` (powers of 1024) or `"64KB"`,
//!   `"10MB"`, `"1GB"`, `"1TB"` (powers of 1000, as the SI prefixes say). Units are
//!   case-insensitive and may follow a space (`"10 MiB"`); a fraction is rounded down to
//!   whole bytes (`"1.5KiB"` is 1536). A bare number (`1048576`) is bytes.
//! - **Counts** ([`Count`]): a plain integer within bounds.
//!
//! A value that does not parse, is negative, or is out of the type's range is a
//! deserialization error; the configuration loader reports it as `FILE:LINE:COLUMN: reason`
//! at the value. The bounds are const parameters, so a key declares its range in its type:
//!
//! ```
//! use selvedge_server::units::{Count, Dur, NonZeroDur, Size};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Example {
//!     timeout: NonZeroDur,                   // "30s"; 0 is an error
//!     renew_before: Option<Dur>,             // "30d"; 0 allowed
//!     buffer: Size<1024, { u32::MAX as u64 }>, // "64KiB"; 1 KiB to 4 GiB - 1
//!     retries: Count<1, 10>,                 // 3
//! }
//!
//! let e: Example = toml::from_str(
//!     "timeout = \"1m30s\"\nrenew_before = \"30d\"\nbuffer = \"64KiB\"\nretries = 3\n",
//! )
//! .unwrap();
//! assert_eq!(e.timeout.get().as_secs(), 90);
//! assert_eq!(e.renew_before.unwrap().get().as_secs(), 30 * 86_400);
//! assert_eq!(e.buffer.get(), 65_536);
//! assert_eq!(e.retries.get(), 3);
//!
//! let err = toml::from_str::<Example>("timeout = 0\nbuffer = 2048\nretries = 3\n").err().unwrap();
//! assert!(err.to_string().contains("must be greater than 0"), "{err}");
//! ```
//!
//! The parsers are also public ([`parse_duration`], [`parse_size`]) for command-line flags
//! and environment variables.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// The longest duration accepted: 100 years.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A duration of zero or more (see the [module docs](self) for the syntax).
/// `Dur<true>` ([`NonZeroDur`]) refuses zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Dur<const NONZERO: bool = false>(Duration);

/// A duration greater than zero.
pub type NonZeroDur = Dur<true>;

impl<const NONZERO: bool> Dur<NONZERO> {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl<const NONZERO: bool> From<Dur<NONZERO>> for Duration {
    fn from(d: Dur<NONZERO>) -> Duration {
        d.0
    }
}

/// A number of bytes in `MIN..=MAX` (see the [module docs](self) for the syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Size<const MIN: u64 = 0, const MAX: u64 = { u64::MAX }>(u64);

/// A size of at least one byte.
pub type NonZeroSize = Size<1>;

impl<const MIN: u64, const MAX: u64> Size<MIN, MAX> {
    /// The number of bytes.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The number of bytes as a `usize` (`MAX` should fit one; saturates otherwise).
    pub fn get_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// An integer in `MIN..=MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Count<const MIN: u64 = 0, const MAX: u64 = { u64::MAX }>(u64);

impl<const MIN: u64, const MAX: u64> Count<MIN, MAX> {
    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The number as a `usize` (`MAX` should fit one; saturates otherwise).
    pub fn get_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    /// The number as a `u32` (`MAX` should fit one; saturates otherwise).
    pub fn get_u32(self) -> u32 {
        u32::try_from(self.0).unwrap_or(u32::MAX)
    }
}

/// Parses a duration: `"250ms"`, `"30s"`, `"5m"`, `"1h"`, `"2d"`, combinations such as
/// `"1h30m"`, fractions such as `"1.5s"`; a number without a unit is seconds.
///
/// # Errors
/// Not a duration, negative, or longer than [`MAX_DURATION`].
///
/// ```
/// use selvedge_server::units::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
/// assert!(parse_duration("5 parsecs").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let bad = |why: &str| format!("invalid duration {text:?}: {why}");
    if s.is_empty() {
        return Err(bad("empty (write for example \"30s\", \"250ms\", \"5m\", \"1h\" or \"2d\")"));
    }
    if s.starts_with('-') {
        return Err(format!("duration {text:?} must not be negative"));
    }
    let mut rest = s;
    let mut total = 0f64;
    let mut parts = 0;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        let value: f64 = match num.parse() {
            Ok(v) if !num.is_empty() => v,
            _ => return Err(bad("expected a number")),
        };
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit.trim() {
            "" if parts == 0 && next.is_empty() => 1.0,
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "" => return Err(bad("a unit is missing (ms, s, m, h or d)")),
            u => return Err(bad(&format!("unknown unit {u:?} (use ms, s, m, h or d)"))),
        };
        total += value * scale;
        parts += 1;
        rest = next;
    }
    secs_to_duration(total, text)
}

fn secs_to_duration(secs: f64, text: &str) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("duration {text:?} must not be negative"));
    }
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("duration {text:?} is longer than 100 years")),
    }
}

/// Parses a size in bytes: `"512"`, `"512B"`, `"64KiB"`, `"10MiB"`, `"1GiB"`, `"1TiB"`
/// (powers of 1024), `"64KB"`, `"10MB"`, `"1GB"`, `"1TB"` (powers of 1000); units are
/// case-insensitive and may follow a space; fractions are rounded down to whole bytes.
///
/// # Errors
/// Not a size, negative, or more than `u64::MAX` bytes.
///
/// ```
/// use selvedge_server::units::parse_size;
/// assert_eq!(parse_size("10MiB"), Ok(10 << 20));
/// assert_eq!(parse_size("64 KB"), Ok(64_000));
/// assert_eq!(parse_size("1.5KiB"), Ok(1536));
/// assert!(parse_size("10 MiBs").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let bad = |why: &str| format!("invalid size {text:?}: {why}");
    if s.starts_with('-') {
        return Err(format!("size {text:?} must not be negative"));
    }
    let num_len = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(num_len);
    if num.is_empty() {
        return Err(bad("expected a number (write for example \"512\", \"64KiB\", \"10MiB\" or \"1GiB\")"));
    }
    let scale: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad(&format!("unknown unit {:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", unit.trim()))),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(scale).ok_or_else(|| bad("too large"));
    }
    match num.parse::<f64>() {
        Ok(v) if (v * scale as f64) < u64::MAX as f64 => Ok((v * scale as f64) as u64),
        Ok(_) => Err(bad("too large")),
        Err(_) => Err(bad("expected a number")),
    }
}

/// What a TOML value was, for the visitors below.
enum Raw<'a> {
    Int(i128),
    Float(f64),
    Str(&'a str),
}

/// A visitor handing integers, floats and strings on as [`Raw`] to `f`.
struct RawVisitor<F>(&'static str, F);

impl<'de, T, F: FnOnce(Raw<'_>) -> Result<T, String>> Visitor<'de> for RawVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        (self.1)(Raw::Int(v.into())).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.1)(Raw::Int(v.into())).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        (self.1)(Raw::Float(v)).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.1)(Raw::Str(v)).map_err(E::custom)
    }
}

impl<'de, const NONZERO: bool> Deserialize<'de> for Dur<NONZERO> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let expecting = "a duration such as \"30s\", \"250ms\", \"5m\" or a number of seconds";
        d.deserialize_any(RawVisitor(expecting, Self::from_raw))
    }
}

impl<const NONZERO: bool> Dur<NONZERO> {
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        let dur = match raw {
            Raw::Int(n) if n < 0 => return Err(format!("duration {n} must not be negative")),
            Raw::Int(n) => secs_to_duration(n as f64, &n.to_string())?,
            Raw::Float(v) => secs_to_duration(v, &v.to_string())?,
            Raw::Str(s) => parse_duration(s)?,
        };
        if NONZERO && dur.is_zero() {
            return Err("duration must be greater than 0".into());
        }
        Ok(Dur(dur))
    }
}

fn check_range(what: &str, n: u64, min: u64, max: u64) -> Result<u64, String> {
    if n < min {
        if min == 1 {
            return Err(format!("{what} must be greater than 0"));
        }
        return Err(format!("{what} {n} is below the minimum, {min}"));
    }
    if n > max {
        return Err(format!("{what} {n} is above the maximum, {max}"));
    }
    Ok(n)
}

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Size<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor("a size such as \"64KiB\", \"10MiB\" or a number of bytes", Self::from_raw))
    }
}

impl<const MIN: u64, const MAX: u64> Size<MIN, MAX> {
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        let n = match raw {
            Raw::Int(n) if n < 0 => return Err(format!("size {n} must not be negative")),
            Raw::Int(n) => u64::try_from(n).map_err(|_| format!("size {n} is too large"))?,
            Raw::Float(v) => return Err(format!("size {v}: write whole bytes, or a unit (\"1.5KiB\")")),
            Raw::Str(s) => parse_size(s)?,
        };
        check_range("size", n, MIN, MAX).map(Size)
    }
}

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Count<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor("a whole number", Self::from_raw))
    }
}

impl<const MIN: u64, const MAX: u64> Count<MIN, MAX> {
    fn from_raw(raw: Raw<'_>) -> Result<Self, String> {
        let n = match raw {
            Raw::Int(n) if n < 0 => return Err(format!("{n} must not be negative")),
            Raw::Int(n) => u64::try_from(n).map_err(|_| format!("{n} is too large"))?,
            Raw::Float(v) => return Err(format!("{v}: expected a whole number")),
            Raw::Str(s) => return Err(format!("{s:?}: expected a whole number, not a string")),
        };
        check_range("value", n, MIN, MAX).map(Count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("2d", Duration::from_secs(2 * 86_400)),
            ("30d", Duration::from_secs(30 * 86_400)),
            ("1h30m", Duration::from_secs(5400)),
            ("1m 30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("30", Duration::from_secs(30)),
            ("0", Duration::ZERO),
            (" 10s ", Duration::from_secs(10)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "s", "5x", "5 parsecs", "-1s", "1..2s", "10s5", "36500000d", "1e3s", "ms5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        let ok = [
            ("512", 512),
            ("512B", 512),
            ("64KiB", 65_536),
            ("64kib", 65_536),
            ("10MiB", 10 << 20),
            ("10 MiB", 10 << 20),
            ("1GiB", 1 << 30),
            ("1TiB", 1 << 40),
            ("64KB", 64_000),
            ("10MB", 10_000_000),
            ("1GB", 1_000_000_000),
            ("1.5KiB", 1536),
            ("0", 0),
        ];
        for (text, want) in ok {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        for bad in ["", "KiB", "10 MiBs", "-1", "10k", "99999999999999999999", "20000000TiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct T {
        d: Option<NonZeroDur>,
        z: Option<Dur>,
        s: Option<Size<1, 100>>,
        c: Option<Count<1, 5>>,
    }

    fn de(text: &str) -> Result<T, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn toml_values_and_positions() {
        let t = de("d = 2\nz = 0.25\ns = \"100B\"\nc = 5\n").unwrap();
        assert_eq!(t.d.unwrap().get(), Duration::from_secs(2));
        assert_eq!(t.z.unwrap().get(), Duration::from_millis(250));
        assert_eq!(t.s.unwrap().get(), 100);
        assert_eq!(t.c.unwrap().get(), 5);
        for (text, why) in [
            ("d = 0", "greater than 0"),
            ("d = \"0s\"", "greater than 0"),
            ("d = -1", "negative"),
            ("z = \"-1s\"", "negative"),
            ("d = \"soon\"", "invalid duration"),
            ("d = true", "a duration"),
            ("s = 0", "greater than 0"),
            ("s = \"1KiB\"", "above the maximum, 100"),
            ("s = 1.5", "whole bytes"),
            ("c = 6", "above the maximum"),
            ("c = \"3\"", "whole number"),
        ] {
            let e = de(&format!("\n{text}\n")).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
            // toml reports the value's line (2).
            assert!(e.contains("line 2"), "{text}: {e}");
        }
    }
}
