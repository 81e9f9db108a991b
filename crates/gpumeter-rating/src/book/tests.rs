//! Unit tests of the price book's readers and patterns.

use super::read::{parse_clock, parse_decimal_text};
use super::*;

#[test]
fn decimals() {
    assert_eq!(
        parse_decimal_text("0.0175").map(|d| d.to_string()),
        Ok("0.0175".into())
    );
    assert_eq!(
        parse_decimal_text("12").map(|d| d.to_string()),
        Ok("12".into())
    );
    assert_eq!(
        parse_decimal_text("2.50").map(|d| d.to_string()),
        Ok("2.50".into())
    );
    for bad in [
        "", ".5", "5.", "-1", "1e3", "1_000", "+1", " 1", "0x10", "1.2.3",
    ] {
        assert!(parse_decimal_text(bad).is_err(), "{bad}");
    }
    assert!(parse_decimal_text("0.00000000000000000000000000001").is_err());
}

#[test]
fn clock() {
    assert_eq!(parse_clock("00:00"), Some(0));
    assert_eq!(parse_clock("08:30"), Some(510));
    assert_eq!(parse_clock("24:00"), Some(1440));
    assert_eq!(parse_clock("24:01"), None);
    assert_eq!(parse_clock("8:00"), None);
    assert_eq!(parse_clock("+8:00"), None);
}

#[test]
fn patterns() {
    assert_eq!(SkuPattern::parse("*"), Ok(SkuPattern::Any));
    assert_eq!(SkuPattern::parse("A*"), Ok(SkuPattern::Prefix("A".into())));
    assert!(SkuPattern::parse("A*B").is_err());
    assert!(SkuPattern::parse("**").is_err());
    assert!(SkuPattern::parse("").is_err());
}
