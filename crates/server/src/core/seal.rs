//! Sealing state handed to clients so it comes back unchanged: HMAC-SHA256 over the payload with the
//! server's secret (`[server] request_state_secret`, the same on every replica; random without it).

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a sealed value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unsealed {
    /// Not of the form this sealer makes.
    #[error("malformed")]
    Malformed,
    /// The signature does not match: changed, or sealed by another server.
    #[error("signature does not match (tampered or issued by another server)")]
    BadSignature,
}

/// Signs and checks opaque values.
pub(crate) struct Sealer {
    key: Vec<u8>,
}

impl Sealer {
    /// A sealer with `secret`, or a random one (then sealed values do not survive a restart or cross
    /// replicas).
    pub(crate) fn new(secret: Option<&[u8]>) -> Sealer {
        let key = match secret {
            Some(s) => s.to_vec(),
            None => {
                let mut k = vec![0u8; 32];
                getrandom::fill(&mut k)
                    .expect("the operating system's random number generator failed");
                k
            }
        };
        Sealer { key }
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length")
    }

    /// A keyed digest of `data` as 64 lowercase hex digits: the same on every replica that shares
    /// the secret, and not computable without it.
    pub(crate) fn tag(&self, data: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(data);
        hex::encode(mac.finalize().into_bytes())
    }

    /// `payload` and its signature, as one URL-safe string.
    pub(crate) fn seal(&self, payload: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut mac = self.mac();
        mac.update(payload);
        format!(
            "{}.{}",
            b64.encode(payload),
            b64.encode(mac.finalize().into_bytes())
        )
    }

    /// The payload of a value [`Sealer::seal`] made with this secret.
    pub(crate) fn open(&self, sealed: &str) -> Result<Vec<u8>, Unsealed> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (payload, sig) = sealed.split_once('.').ok_or(Unsealed::Malformed)?;
        let payload = b64.decode(payload).map_err(|_| Unsealed::Malformed)?;
        let sig = b64.decode(sig).map_err(|_| Unsealed::Malformed)?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&sig).map_err(|_| Unsealed::BadSignature)?;
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_unchanged_and_with_the_same_secret() {
        let s = Sealer::new(Some(b"k"));
        let sealed = s.seal(b"payload");
        assert_eq!(s.open(&sealed).unwrap(), b"payload");
        let mut tampered = sealed.clone();
        tampered.insert(3, 'x');
        assert!(s.open(&tampered).is_err());
        assert_eq!(
            Sealer::new(Some(b"other")).open(&sealed),
            Err(Unsealed::BadSignature)
        );
        assert_eq!(s.open("no-dot"), Err(Unsealed::Malformed));
    }
}
