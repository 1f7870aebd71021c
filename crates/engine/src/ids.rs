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

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_128_bit_hex_and_distinct() {
        let a = super::random_id();
        let b = super::random_id();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
