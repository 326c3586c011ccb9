//! Times as the operator reads them, one format everywhere: local `14:32` (with the date when
//! not today), a relative hint ("in 49 min"), and HTTP dates inside messages rewritten the
//! same way, so the page never shows a GMT string.
use crate::wire::Millis;

/// A moment's local calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    pub year: i32,
    /// 1..=12
    pub month: u32,
    pub day: u32,
    /// 0 = Sunday
    pub weekday: u32,
    pub hour: u32,
    pub minute: u32,
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The browser's clock (the server's while it renders a page).
pub fn now_ms() -> Millis {
    #[cfg(feature = "hydrate")]
    return js_sys::Date::now() as Millis;
    #[cfg(not(feature = "hydrate"))]
    return std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
        });
}

/// `ms` in the browser's time zone (UTC on the server).
pub fn local(ms: Millis) -> Local {
    #[cfg(feature = "hydrate")]
    {
        let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
        Local {
            year: d.get_full_year() as i32,
            month: d.get_month() + 1,
            day: d.get_date(),
            weekday: d.get_day(),
            hour: d.get_hours(),
            minute: d.get_minutes(),
        }
    }
    #[cfg(not(feature = "hydrate"))]
    utc(ms)
}

/// `ms` in UTC.
pub fn utc(ms: Millis) -> Local {
    let days = ms.div_euclid(86_400_000);
    let mins = ms.rem_euclid(86_400_000) / 60_000;
    let (year, month, day) = civil_from_days(days);
    Local {
        year,
        month,
        day,
        weekday: (days + 4).rem_euclid(7) as u32,
        hour: (mins / 60) as u32,
        minute: (mins % 60) as u32,
    }
}

/// `14:32` when `t` falls on `today`'s date, else `Wed 2 Dec 14:32` (the year too when not
/// this year).
pub fn clock_text(t: &Local, today: &Local) -> String {
    let hm = format!("{:02}:{:02}", t.hour, t.minute);
    if (t.year, t.month, t.day) == (today.year, today.month, today.day) {
        return hm;
    }
    let wd = WEEKDAYS[(t.weekday % 7) as usize];
    let mon = MONTHS[(t.month.clamp(1, 12) - 1) as usize];
    if t.year == today.year {
        format!("{wd} {} {mon} {hm}", t.day)
    } else {
        format!("{wd} {} {mon} {} {hm}", t.day, t.year)
    }
}

/// How far `ms` is from `now`, in words: "in 49 min", "in 3 h 5 min", "2 days ago".
pub fn relative(ms: Millis, now: Millis) -> String {
    let delta = ms.saturating_sub(now);
    let mins = delta.unsigned_abs() / 60_000;
    let span = if mins < 1 {
        return if delta >= 0 {
            "in under a minute"
        } else {
            "just now"
        }
        .into();
    } else if mins < 60 {
        format!("{mins} min")
    } else if mins < 48 * 60 {
        match mins % 60 {
            0 => format!("{} h", mins / 60),
            m => format!("{} h {m} min", mins / 60),
        }
    } else {
        format!("{} days", mins / (24 * 60))
    };
    if delta >= 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// A moment for the operator: local clock time (dated when not today).
pub fn at(ms: Millis) -> String {
    clock_text(&local(ms), &local(now_ms()))
}

/// A moment as the server writes it into a page, the same before hydration in the browser:
/// UTC, marked so (the browser redraws it in its own zone once hydrated, see [`at`]).
pub fn at_utc(ms: Millis) -> String {
    format!("{} UTC", clock_text(&utc(ms), &utc(now_ms())))
}

/// [`at`] with the relative hint: `09:52 (in 49 min)`.
pub fn at_with_hint(ms: Millis, now: Millis) -> String {
    format!(
        "{} ({})",
        clock_text(&local(ms), &local(now)),
        relative(ms, now)
    )
}

/// Rewrites every HTTP date (`Tue, 01 Dec 2026 04:12:43 GMT`) in `text` with `show`.
pub fn localize_http_dates(text: &str, show: impl Fn(Millis) -> String) -> String {
    const LEN: usize = "Tue, 01 Dec 2026 04:12:43 GMT".len();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(" GMT") {
        let end = i + 4;
        let start = end.saturating_sub(LEN);
        let parsed = rest
            .get(start..end)
            .and_then(parse_http_date)
            .filter(|_| start <= i);
        match parsed {
            Some(ms) => {
                out.push_str(&rest[..start]);
                out.push_str(&show(ms));
            }
            None => out.push_str(&rest[..end]),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Parses an IMF-fixdate, `Tue, 01 Dec 2026 04:12:43 GMT`.
pub fn parse_http_date(s: &str) -> Option<Millis> {
    let b = s.as_bytes();
    if b.len() != 29 || &s[3..5] != ", " || !s.ends_with(" GMT") {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let day = num(5..7)?;
    let month = MONTHS.iter().position(|m| s.get(8..11) == Some(*m))? as i64 + 1;
    let year = num(12..16)?;
    let (h, m, sec) = (num(17..19)?, num(20..22)?, num(23..25)?);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + h) * 60 + m) * 60_000 + sec * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Millis = 1_796_098_363_000; // Tue, 01 Dec 2026 04:12:43 GMT

    #[test]
    fn http_dates_parse_and_round_trip_through_utc() {
        assert_eq!(parse_http_date("Tue, 01 Dec 2026 04:12:43 GMT"), Some(T));
        let u = utc(T);
        assert_eq!(
            (u.year, u.month, u.day, u.weekday, u.hour, u.minute),
            (2026, 12, 1, 2, 4, 12)
        );
        assert_eq!(parse_http_date("Tue, 01 Dec 2026 04:12:43 UTC"), None);
        assert_eq!(parse_http_date("Tue, 01 Foo 2026 04:12:43 GMT"), None);
        assert_eq!(parse_http_date("Tue, 01 Dec 2026 24:12:43 GMT"), None);
    }

    #[test]
    fn a_time_today_is_hh_mm_and_another_day_carries_its_date() {
        let today = utc(T);
        assert_eq!(clock_text(&utc(T + 3_600_000), &today), "05:12");
        assert_eq!(clock_text(&utc(T + 86_400_000), &today), "Wed 2 Dec 04:12");
        assert_eq!(
            clock_text(&utc(T + 40 * 86_400_000), &today),
            "Sun 10 Jan 2027 04:12"
        );
    }

    /// New Year's Eve: a retry an hour away falls on the next day and the next year, and
    /// says both; a leap day reads as itself.
    #[test]
    fn a_time_past_new_year_s_midnight_carries_its_year() {
        let eve = parse_http_date("Thu, 31 Dec 2026 23:30:00 GMT").unwrap();
        let today = utc(eve);
        assert_eq!(clock_text(&utc(eve), &today), "23:30");
        assert_eq!(
            clock_text(&utc(eve + 3_600_000), &today),
            "Fri 1 Jan 2027 00:30"
        );
        let leap = parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT").unwrap();
        let u = utc(leap);
        assert_eq!((u.year, u.month, u.day, u.weekday), (2028, 2, 29, 2));
        assert_eq!(clock_text(&utc(leap + 86_400_000), &u), "Wed 1 Mar 12:00");
    }

    #[test]
    fn relative_hints_read_as_words() {
        assert_eq!(relative(T + 49 * 60_000 + 5_000, T), "in 49 min");
        assert_eq!(relative(T + 185 * 60_000, T), "in 3 h 5 min");
        assert_eq!(relative(T + 120 * 60_000, T), "in 2 h");
        assert_eq!(relative(T + 3 * 86_400_000, T), "in 3 days");
        assert_eq!(relative(T + 10_000, T), "in under a minute");
        assert_eq!(relative(T - 5 * 60_000, T), "5 min ago");
        assert_eq!(relative(T - 1_000, T), "just now");
    }

    #[test]
    fn http_dates_in_a_message_are_rewritten_and_the_rest_kept() {
        let msg = "not sent: the provider advised waiting until Tue, 01 Dec 2026 04:12:43 GMT (rate_limited) for this model";
        assert_eq!(
            localize_http_dates(msg, |ms| format!("<{ms}>")),
            format!(
                "not sent: the provider advised waiting until <{T}> (rate_limited) for this model"
            )
        );
        assert_eq!(
            localize_http_dates("GMT only GMT", |_| "x".into()),
            "GMT only GMT"
        );
        assert_eq!(localize_http_dates("", |_| "x".into()), "");
        let unicode = "é GMT ü Tue, 01 Dec 2026 04:12:43 GMT.";
        assert_eq!(localize_http_dates(unicode, |_| "T".into()), "é GMT ü T.");
    }
}
