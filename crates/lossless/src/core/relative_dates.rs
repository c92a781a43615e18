//! Relative time expressions resolved against the time a message was written.
//!
//! A message quoted out of its place in the conversation loses what "yesterday" or "last
//! Friday" meant: the model sees the message's timestamp but must do calendar arithmetic to
//! answer "when did…?", which models do badly. Prompt recall ([`crate::core::prompt_recall`]) adds
//! a short note to a quoted message that holds such expressions, each resolved against the
//! message's own time (`yesterday = 7 May 2023`). Only expressions whose meaning is fixed by
//! the date alone are resolved; anything vaguer ("recently", "a while ago") is left as said.

use chrono::{Datelike, Duration, NaiveDate, Weekday};

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Mon),
    ("tuesday", Weekday::Tue),
    ("wednesday", Weekday::Wed),
    ("thursday", Weekday::Thu),
    ("friday", Weekday::Fri),
    ("saturday", Weekday::Sat),
    ("sunday", Weekday::Sun),
];

fn day(d: NaiveDate) -> String {
    d.format("%-d %B %Y").to_string()
}

fn month(d: NaiveDate) -> String {
    d.format("%B %Y").to_string()
}

fn number(w: &str) -> Option<i64> {
    Some(match w {
        "a" | "an" | "one" => 1,
        "two" => 2,
        "three" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        n => n.parse().ok().filter(|n| (1..=100).contains(n))?,
    })
}

fn months_back(d: NaiveDate, n: i64) -> Option<NaiveDate> {
    let total = d.year() as i64 * 12 + d.month0() as i64 - n;
    NaiveDate::from_ymd_opt(
        total.div_euclid(12) as i32,
        total.rem_euclid(12) as u32 + 1,
        1,
    )
}

/// The relative time expressions of `text` with what they mean when said at `ts` (ms since
/// the epoch, UTC), in order of appearance, each once: `("yesterday", "7 May 2023")`.
pub fn resolve(text: &str, ts: i64) -> Vec<(String, String)> {
    let Some(now) = chrono::DateTime::from_timestamp_millis(ts).map(|d| d.date_naive()) else {
        return Vec::new();
    };
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |said: String, meant: String| {
        if !out.iter().any(|(s, _)| *s == said) {
            out.push((said, meant));
        }
    };
    let mut i = 0;
    while i < words.len() {
        let mut used = 1;
        match (w(i), w(i + 1)) {
            ("yesterday", _) => push("yesterday".into(), day(now - Duration::days(1))),
            ("today" | "tonight", _) => push(w(i).into(), day(now)),
            ("tomorrow", _) => push("tomorrow".into(), day(now + Duration::days(1))),
            ("last", "night") => {
                push("last night".into(), day(now - Duration::days(1)));
                used = 2;
            }
            ("last" | "past", "week") => {
                push(
                    format!("{} week", w(i)),
                    format!("the week before {}", day(now)),
                );
                used = 2;
            }
            ("last" | "past", "weekend") => {
                push(
                    format!("{} weekend", w(i)),
                    format!("the weekend before {}", day(now)),
                );
                used = 2;
            }
            ("this", "week") => {
                push("this week".into(), format!("the week of {}", day(now)));
                used = 2;
            }
            ("this", "weekend") => {
                push(
                    "this weekend".into(),
                    format!("the weekend of {}", day(now)),
                );
                used = 2;
            }
            ("next", "week") => {
                push("next week".into(), format!("the week after {}", day(now)));
                used = 2;
            }
            ("last", "month") => {
                if let Some(m) = months_back(now, 1) {
                    push("last month".into(), month(m));
                }
                used = 2;
            }
            ("this", "month") => {
                push("this month".into(), month(now));
                used = 2;
            }
            ("next", "month") => {
                if let Some(m) = months_back(now, -1) {
                    push("next month".into(), month(m));
                }
                used = 2;
            }
            ("last", "year") => {
                push("last year".into(), (now.year() - 1).to_string());
                used = 2;
            }
            ("this", "year") => {
                push("this year".into(), now.year().to_string());
                used = 2;
            }
            ("next", "year") => {
                push("next year".into(), (now.year() + 1).to_string());
                used = 2;
            }
            ("last", d) if WEEKDAYS.iter().any(|(n, _)| *n == d) => {
                if let Some((name, wd)) = WEEKDAYS.iter().find(|(n, _)| *n == d) {
                    // The most recent such day before today.
                    let mut back = (now.weekday().num_days_from_monday() as i64
                        - wd.num_days_from_monday() as i64)
                        .rem_euclid(7);
                    if back == 0 {
                        back = 7;
                    }
                    let date = now - Duration::days(back);
                    let mut cap = name.to_string();
                    cap[..1].make_ascii_uppercase();
                    push(format!("last {name}"), format!("{cap} {}", day(date)));
                }
                used = 2;
            }
            (n, unit) if number(n).is_some() && w(i + 2) == "ago" => {
                let k = number(n).unwrap_or(1);
                let said = format!("{n} {unit} ago");
                match unit {
                    "day" | "days" => push(said, day(now - Duration::days(k))),
                    "week" | "weeks" => push(
                        said,
                        format!("the week of {}", day(now - Duration::days(7 * k))),
                    ),
                    "month" | "months" => {
                        if let Some(m) = months_back(now, k) {
                            push(said, month(m));
                        }
                    }
                    "year" | "years" => push(said, (now.year() as i64 - k).to_string()),
                    _ => {}
                }
                used = 3;
            }
            _ => {}
        }
        i += used;
    }
    out
}

/// The note added to a quoted message: `[said on 8 May 2023: yesterday = 7 May 2023]`, or
/// `None` when `text` holds no relative time expression.
pub fn note(text: &str, ts: Option<i64>) -> Option<String> {
    let ts = ts?;
    let found = resolve(text, ts);
    if found.is_empty() {
        return None;
    }
    let now = chrono::DateTime::from_timestamp_millis(ts)?.date_naive();
    let parts: Vec<String> = found.iter().map(|(s, m)| format!("{s} = {m}")).collect();
    Some(format!("[said on {}: {}]", day(now), parts.join("; ")))
}

/// An epoch-ms timestamp as the model sees it in context blocks (`2024-05-01T13:56Z`).
pub(crate) fn fmt_minute(t: Option<i64>) -> String {
    t.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|d| d.format("%Y-%m-%dT%H:%MZ").to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i32, m: u32, d: u32) -> i64 {
        NaiveDate::from_ymd_opt(y, m, d)
            .and_then(|d| d.and_hms_opt(13, 56, 0))
            .map(|t| t.and_utc().timestamp_millis())
            .unwrap_or(0)
    }

    #[test]
    fn expressions_resolve_against_the_message_date() {
        // 8 May 2023 is a Monday.
        let ts = at(2023, 5, 8);
        let r = resolve(
            "Yesterday I went to the group; last Friday too, and 3 days ago. Last week was busy, \
             last month I moved, 2 years ago I started. Tomorrow again!",
            ts,
        );
        let m: Vec<(&str, &str)> = r.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            m,
            vec![
                ("yesterday", "7 May 2023"),
                ("last friday", "Friday 5 May 2023"),
                ("3 days ago", "5 May 2023"),
                ("last week", "the week before 8 May 2023"),
                ("last month", "April 2023"),
                ("2 years ago", "2021"),
                ("tomorrow", "9 May 2023"),
            ]
        );
        // "last Monday" said on a Monday is a week back; January's last month is December.
        assert_eq!(
            resolve("since last monday", ts),
            vec![("last monday".into(), "Monday 1 May 2023".into())]
        );
        assert_eq!(
            resolve("last month", at(2024, 1, 15)),
            vec![("last month".into(), "December 2023".into())]
        );
    }

    #[test]
    fn nothing_to_resolve_gives_no_note() {
        let ts = at(2023, 5, 8);
        assert_eq!(note("I love painting sunsets.", Some(ts)), None);
        assert_eq!(note("yesterday", None), None);
        assert_eq!(
            note("We met yesterday.", Some(ts)).as_deref(),
            Some("[said on 8 May 2023: yesterday = 7 May 2023]")
        );
        // Vague words stay as said; an expression said twice is noted once.
        assert_eq!(resolve("recently, a while ago, at last", ts), vec![]);
        assert_eq!(resolve("yesterday and yesterday", ts).len(), 1);
    }
}
