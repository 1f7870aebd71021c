//! Wall-clock helpers. All times in the engine are Unix milliseconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats Unix milliseconds as RFC 3339 UTC with millisecond precision, e.g. `2025-11-25T10:30:00.123Z`.
pub fn format_rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        Err(_) => "1970-01-01T00:00:00.000Z".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_rfc3339_millis() {
        assert_eq!(
            super::format_rfc3339(1_764_066_600_123),
            "2025-11-25T10:30:00.123Z"
        );
    }
}
