//! When to renew and when to retry: pure functions of the certificate's validity, the
//! settings, the CA's renewal window (ARI, RFC 9773) and a random number, so they are
//! tested without a clock.

use std::time::{Duration, SystemTime};

use super::config::RenewBefore;

/// How long before `not_after` renewal starts: `renew_before` (a time or a fraction of the
/// lifetime), at most half the lifetime, so that a setting meant for 90-day certificates
/// does not renew a 6-day certificate again as soon as it is issued. The flag says the
/// setting was cut to half the lifetime.
pub fn lead(not_before: SystemTime, not_after: SystemTime, renew_before: RenewBefore) -> (Duration, bool) {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    let want = match renew_before {
        RenewBefore::Time(d) => d,
        RenewBefore::Fraction(f) => lifetime.mul_f64(f),
    };
    let half = lifetime / 2;
    if want > half {
        (half, true)
    } else {
        (want, false)
    }
}

/// The time to renew a certificate: `lead` before `not_after`, made earlier by up to 5% of
/// the lead (at most 12 hours) by `r` in `[0, 1)`, so that many certificates, or several
/// instances sharing storage, do not all ask the CA at the same second.
///
/// With a renewal window from the CA (`ari`: start, end; RFC 9773) that ends before that
/// time, a point `r` of the way into the window instead: the CA wants the certificate
/// replaced sooner (a revocation, an incident). A time before or inside the window is
/// kept: the settings may renew earlier than the CA asks, and a window reaching back to
/// the start of validity (as for short-lived test certificates) does not make every new
/// certificate due at once.
pub fn renew_at(
    not_before: SystemTime,
    not_after: SystemTime,
    renew_before: RenewBefore,
    ari: Option<(SystemTime, SystemTime)>,
    r: f64,
) -> SystemTime {
    let (lead, _) = lead(not_before, not_after, renew_before);
    let r = r.clamp(0.0, 1.0);
    let jitter = lead.mul_f64(0.05).min(Duration::from_secs(12 * 3600)).mul_f64(r);
    let own = not_after.checked_sub(lead + jitter).unwrap_or(not_before);
    match ari {
        Some((start, end)) if own > end => start + end.duration_since(start).unwrap_or_default().mul_f64(r),
        _ => own,
    }
}

/// The wait after `failures` failed attempts in a row (at least 1): `min`, doubling, at
/// most `max`.
pub fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    min.saturating_mul(1 << doublings).min(max).max(min.min(max))
}

/// A uniform random number in `[0, 1)` from the system's generator.
pub fn random_unit() -> f64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86400);

    fn t(days: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + days * 86400)
    }

    #[test]
    fn a_third_of_ninety_days_is_thirty() {
        let at = renew_at(t(0), t(90), RenewBefore::Fraction(1.0 / 3.0), None, 0.0);
        let left = t(90).duration_since(at).unwrap();
        assert!(left.abs_diff(DAY * 30) < Duration::from_secs(1), "{left:?}");
        // Jitter makes it earlier, by at most 5% of the lead and 12 hours.
        let at = renew_at(t(0), t(90), RenewBefore::Time(DAY * 30), None, 0.999);
        let left = t(90).duration_since(at).unwrap();
        assert!(left > DAY * 30 && left <= DAY * 30 + Duration::from_secs(12 * 3600), "{left:?}");
    }

    #[test]
    fn a_lead_longer_than_half_the_lifetime_is_cut() {
        // 30 days before the end of a 6-day certificate would be before it was issued.
        let (lead, cut) = lead(t(0), t(6), RenewBefore::Time(DAY * 30));
        assert_eq!((lead, cut), (DAY * 3, true));
        let at = renew_at(t(0), t(6), RenewBefore::Time(DAY * 30), None, 0.0);
        assert_eq!(at, t(3));
        assert!(!super::lead(t(0), t(90), RenewBefore::Time(DAY)).1);
    }

    #[test]
    fn the_ca_window_wins_when_earlier() {
        let ninety = |ari, r| renew_at(t(0), t(90), RenewBefore::Time(DAY * 30), ari, r);
        // A window in the past (a revoked certificate): at its start.
        assert_eq!(ninety(Some((t(1), t(1))), 0.5), t(1));
        assert_eq!(ninety(Some((t(10), t(12))), 0.5), t(11));
        // A window later than the settings, or around them: the settings.
        assert_eq!(ninety(Some((t(70), t(80))), 0.0), t(60));
        assert_eq!(ninety(Some((t(55), t(65))), 0.0), t(60));
        assert_eq!(ninety(Some((t(0), t(90))), 0.0), t(60));
    }

    #[test]
    fn backoff_doubles_up_to_the_max() {
        let (min, max) = (Duration::from_secs(120), Duration::from_secs(6 * 3600));
        let waits: Vec<u64> = (1..=10).map(|n| backoff(n, min, max).as_secs()).collect();
        assert_eq!(waits, [120, 240, 480, 960, 1920, 3840, 7680, 15360, 21600, 21600]);
        assert_eq!(backoff(0, min, max), min);
        assert_eq!(backoff(u32::MAX, min, max), max);
    }

    #[test]
    fn random_is_in_range() {
        for _ in 0..100 {
            let r = random_unit();
            assert!((0.0..1.0).contains(&r));
        }
    }
}
