//! Webhook secrets encrypted at rest: with `[webhooks] secret_keys` set, the secret a client
//! registers is sealed (XChaCha20-Poly1305, a random 192-bit nonce per secret) before it reaches
//! the store, and opened only to sign a delivery. A copy of the database, a backup or a replica's
//! disk then holds no usable secret; the keys live in the config or the environment.
//!
//! The first key seals; every key listed opens, so a key is rotated by putting the new one first
//! and keeping the old one listed until the tasks sealed with it are gone. A sealed secret names
//! its key by a short id (a hash of the key), so opening never tries keys in turn.
//!
//! Secrets stored before a key was configured stay as they were (plain `whsec_`) and still open.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

/// The prefix of a key's text form.
pub const KEY_PREFIX: &str = "whkey_";
/// The prefix of a sealed secret, then the key's id, a `.`, and the base64 of nonce and ciphertext.
const SEALED_PREFIX: &str = "whsealed.v1.";
/// Bound into every seal, so a sealed secret cannot be passed off as anything else sealed.
const CONTEXT: &[u8] = b"mcp-tasks webhook secret v1";
const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;

/// One key: its id and its cipher.
#[derive(Clone)]
struct SealKey {
    id: String,
    cipher: XChaCha20Poly1305,
}

/// The keys secrets are sealed and opened with (`[webhooks] secret_keys`); none: secrets are
/// stored as given.
#[derive(Clone, Default)]
pub struct SecretKeys {
    keys: Vec<SealKey>,
}

impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ids only: they say which keys are configured without giving any away.
        f.debug_list()
            .entries(self.keys.iter().map(|k| &k.id))
            .finish()
    }
}

impl PartialEq for SecretKeys {
    fn eq(&self, other: &Self) -> bool {
        self.ids() == other.ids()
    }
}

impl Eq for SecretKeys {}

/// A new key, `whkey_` and the base64 of 32 random bytes.
pub fn new_key() -> String {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key).expect("the operating system's random number generator failed");
    format!("{KEY_PREFIX}{}", STANDARD.encode(key))
}

impl SecretKeys {
    /// The keys from their text forms, the sealing one first; an entry that is not a key says
    /// which (by its place, never its text) and why.
    pub fn parse(texts: &[String]) -> Result<SecretKeys, String> {
        let mut keys: Vec<SealKey> = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let place = i + 1;
            let encoded = text.trim().strip_prefix(KEY_PREFIX).ok_or_else(|| {
                format!(
                    "secret key #{place} does not start with {KEY_PREFIX} \
                     (make one with `mcp-tasks key seal`)"
                )
            })?;
            let bytes = STANDARD
                .decode(encoded)
                .map_err(|e| format!("secret key #{place} is {KEY_PREFIX} and base64: {e}"))?;
            if bytes.len() != KEY_BYTES {
                return Err(format!(
                    "secret key #{place} holds {} bytes; a key is {KEY_BYTES}",
                    bytes.len()
                ));
            }
            let id = key_id(&bytes);
            if keys.iter().any(|k| k.id == id) {
                return Err(format!("secret key #{place} is listed twice"));
            }
            let key = Key::try_from(bytes.as_slice())
                .map_err(|_| format!("secret key #{place} holds a key of the wrong length"))?;
            keys.push(SealKey {
                id,
                cipher: XChaCha20Poly1305::new(&key),
            });
        }
        Ok(SecretKeys { keys })
    }

    /// Whether any key is configured (then new secrets are sealed).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The ids of the keys, the sealing one first.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.id.as_str()).collect()
    }

    /// `secret` as it is stored: sealed with the first key, or as given when there is none.
    pub fn seal(&self, secret: &str) -> String {
        let Some(key) = self.keys.first() else {
            return secret.to_string();
        };
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).expect("the operating system's random number generator failed");
        let sealed = key
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: CONTEXT,
                },
            )
            .expect("XChaCha20-Poly1305 seals any secret of a sane length");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{SEALED_PREFIX}{}.{}", key.id, STANDARD.encode(out))
    }

    /// The secret `stored` holds: opened when sealed, as it is otherwise (stored before a key was
    /// configured). A seal no configured key opens says which key it needs.
    pub fn open(&self, stored: &str) -> Result<String, String> {
        let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_string());
        };
        let (id, body) = rest
            .split_once('.')
            .ok_or("the stored webhook secret is sealed but malformed")?;
        let key = self.keys.iter().find(|k| k.id == id).ok_or_else(|| {
            format!(
                "the webhook secret was sealed with key {id}, which is not among \
                 [webhooks] secret_keys (configured: {})",
                if self.keys.is_empty() {
                    "none".to_string()
                } else {
                    self.ids().join(", ")
                }
            )
        })?;
        let bytes = STANDARD
            .decode(body)
            .map_err(|e| format!("the stored webhook secret is sealed but not base64: {e}"))?;
        if bytes.len() < NONCE_BYTES {
            return Err("the stored webhook secret is sealed but too short".into());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce =
            XNonce::try_from(nonce).map_err(|_| "the sealed secret's nonce is malformed")?;
        let plain = key
            .cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: sealed,
                    aad: CONTEXT,
                },
            )
            .map_err(|_| {
                format!("the stored webhook secret does not open with key {id}: it was altered")
            })?;
        String::from_utf8(plain).map_err(|_| "the opened webhook secret is not text".into())
    }
}

/// A key's id: the hex of the first 4 bytes of its SHA-256 (not secret: it names the key).
fn key_id(key: &[u8]) -> String {
    Sha256::digest(key)[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn a_sealed_secret_opens_and_hides_the_secret() {
        let keys = SecretKeys::parse(&[new_key()]).unwrap();
        let sealed = keys.seal(SECRET);
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
        assert_ne!(sealed, keys.seal(SECRET), "a new nonce each time");
        assert_eq!(keys.open(&sealed).unwrap(), SECRET);
    }

    #[test]
    fn without_keys_a_secret_is_stored_as_given_and_plain_ones_always_open() {
        let none = SecretKeys::default();
        assert_eq!(none.seal(SECRET), SECRET);
        let keys = SecretKeys::parse(&[new_key()]).unwrap();
        assert_eq!(keys.open(SECRET).unwrap(), SECRET, "stored before the key");
    }

    #[test]
    fn rotation_seals_with_the_first_key_and_opens_with_any_listed() {
        let (old, new) = (new_key(), new_key());
        let before = SecretKeys::parse(std::slice::from_ref(&old)).unwrap();
        let sealed_old = before.seal(SECRET);
        let rotated = SecretKeys::parse(&[new.clone(), old]).unwrap();
        assert_eq!(rotated.open(&sealed_old).unwrap(), SECRET);
        let sealed_new = rotated.seal(SECRET);
        assert!(sealed_new.contains(rotated.ids()[0]));
        let after = SecretKeys::parse(&[new]).unwrap();
        assert_eq!(after.open(&sealed_new).unwrap(), SECRET);
        let e = after.open(&sealed_old).unwrap_err();
        assert!(
            e.contains(before.ids()[0]) && e.contains("not among"),
            "{e}"
        );
    }

    #[test]
    fn an_altered_seal_is_refused_and_bad_keys_say_why() {
        let keys = SecretKeys::parse(&[new_key()]).unwrap();
        let sealed = keys.seal(SECRET);
        let (head, body) = sealed.rsplit_once('.').unwrap();
        let mut bytes = STANDARD.decode(body).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        let altered = format!("{head}.{}", STANDARD.encode(bytes));
        assert!(keys.open(&altered).unwrap_err().contains("altered"));
        assert!(keys.open("whsealed.v1.nodot").is_err());
        let e = SecretKeys::parse(&["whsec_abc".into()]).unwrap_err();
        assert!(e.contains("#1") && e.contains(KEY_PREFIX), "{e}");
        let short = format!("{KEY_PREFIX}{}", STANDARD.encode([1u8; 16]));
        assert!(SecretKeys::parse(&[short])
            .unwrap_err()
            .contains("16 bytes"));
        let k = new_key();
        assert!(SecretKeys::parse(&[k.clone(), k])
            .unwrap_err()
            .contains("twice"));
        assert!(!format!("{keys:?}").contains(KEY_PREFIX));
    }
}
