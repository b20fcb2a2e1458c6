//! Text as lockctl shows it: durations people read, and values from the
//! store made safe for a terminal. Used by the output, the progress reports
//! and the error messages alike (so none of them imports another for it).

use std::time::Duration;

/// A duration as lockctl prints it (`20s`, `1m 30s`, `250ms`).
pub fn duration(value: Duration) -> String {
    // Whole milliseconds: the nanoseconds of a measured wait are noise.
    let millis = Duration::from_millis(u64::try_from(value.as_millis()).unwrap_or(u64::MAX));
    humantime::format_duration(millis).to_string()
}

/// `text` (a key, owner name, version or data read from the store) made safe
/// for a terminal: control characters (ESC, carriage return, newline, ...) are
/// written as escapes such as `\u{1b}`, so a stored value cannot move the
/// cursor, recolour or rewrite what an operator sees.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_whole_milliseconds() {
        assert_eq!(duration(Duration::from_secs(20)), "20s");
        assert_eq!(duration(Duration::from_nanos(1_500_000_123)), "1s 500ms");
    }
}
