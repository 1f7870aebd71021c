//! Unguessable identifiers.

/// 128 bits from the operating system's CSPRNG, as 32 lowercase hex digits. Used for task and session ids,
/// which act as capabilities when no authentication binds them.
pub fn random_id() -> String {
    let mut buf = [0u8; 16];
    // getrandom only fails when the OS has no entropy source at all; a process that cannot get
    // randomness must not hand out guessable ids, so stopping is the right answer there.
    getrandom::fill(&mut buf).expect("the operating system's random number generator failed");
    hex::encode(buf)
}

/// A task id: the creation time (Unix ms, 12 hex digits) followed by [`random_id`]'s 128 random bits.
/// The random part keeps it unguessable; the time in front makes ids of new tasks sort after older
/// ones, so a store's id index grows at its end instead of at a random page: with a million tasks
/// stored, random ids made every create touch an index page that was no longer cached (SQLite create
/// rate 0.75× of the rate with a thousand tasks stored).
pub fn task_id(now_ms: u64) -> String {
    let mut id = format!("{:012x}", now_ms & 0xffff_ffff_ffff);
    id.push_str(&random_id());
    id
}

#[cfg(test)]
mod tests {
    #[test]
    fn task_ids_sort_by_creation_time_and_keep_128_random_bits() {
        let a = super::task_id(1_700_000_000_000);
        let b = super::task_id(1_700_000_000_001);
        assert_eq!(a.len(), 44);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(a < b);
        assert_eq!(&a[..12], "018bcfe56800");
        assert_ne!(a[12..], super::task_id(1_700_000_000_000)[12..]);
    }

    #[test]
    fn ids_are_128_bit_hex_and_distinct() {
        let a = super::random_id();
        let b = super::random_id();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
