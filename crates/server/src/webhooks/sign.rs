//! Standard Webhooks signatures: `webhook-signature: v1,<base64 of HMAC-SHA256(id.timestamp.body)>`
//! with the key a `whsec_` secret carries in base64.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The prefix of a secret's text form.
pub const SECRET_PREFIX: &str = "whsec_";

/// Shortest key accepted in a secret a client or an operator gives (Standard Webhooks: 24 to 64
/// bytes; shorter keys are guessable).
const MIN_KEY_BYTES: usize = 24;
const MAX_KEY_BYTES: usize = 64;

/// A new secret: 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    // A process that cannot get randomness must not hand out guessable secrets.
    getrandom::fill(&mut key).expect("the operating system's random number generator failed");
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The key of a secret, or why it is not one.
pub fn key_of(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).ok_or_else(|| {
        format!("a webhook secret starts with {SECRET_PREFIX} (then the base64 of 24 to 64 bytes)")
    })?;
    let key = STANDARD
        .decode(encoded)
        .map_err(|e| format!("a webhook secret is {SECRET_PREFIX} and base64: {e}"))?;
    if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
        return Err(format!(
            "a webhook secret's key is {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes; this one has {}",
            key.len()
        ));
    }
    Ok(key)
}

/// The `webhook-signature` header of a message: `v1,` and the base64 HMAC-SHA256 of
/// `{id}.{timestamp}.{body}` under `key`.
pub fn signature(key: &[u8], id: &str, timestamp: u64, body: &str) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_the_standard_s_example() {
        // The example of the Standard Webhooks specification (and its libraries' tests).
        let key = key_of("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            signature(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                r#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_new_secret_is_a_valid_one_and_bad_ones_say_why() {
        let s = new_secret();
        assert_eq!(key_of(&s).unwrap().len(), 32);
        assert_ne!(s, new_secret());
        assert!(key_of("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap_err()
            .contains("starts with whsec_"));
        assert!(key_of("whsec_!!").unwrap_err().contains("base64"));
        assert!(key_of("whsec_c2hvcnQ=")
            .unwrap_err()
            .contains("this one has 5"));
    }
}
