//! Where a webhook may go: https to a public address, unless the operator allows a host
//! (`[webhooks] allowed_hosts`), which may then be plain http and private or loopback. The address
//! is checked when a webhook is registered and again on every connection ([`GuardedResolver`]), so a
//! name that resolves elsewhere later (DNS rebinding) is refused then.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The hosts an operator allows beyond the public internet: `host` (any port) or `host:port`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts(Vec<(String, Option<u16>)>);

impl AllowedHosts {
    /// Parses entries `host` or `host:port` (IPv6 in brackets: `[::1]:8080`).
    pub fn parse(entries: &[String]) -> Result<AllowedHosts, String> {
        let mut out = Vec::new();
        for e in entries {
            let e = e.trim();
            let (host, port) = match e.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.starts_with('[')) => {
                    let port = p.parse::<u16>().map_err(|_| {
                        format!("[webhooks] allowed_hosts: {e:?} is not host or host:port")
                    })?;
                    (h, Some(port))
                }
                _ => (e, None),
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() || host.contains('/') {
                return Err(format!(
                    "[webhooks] allowed_hosts: {e:?} is not host or host:port"
                ));
            }
            out.push((host.to_ascii_lowercase(), port));
        }
        Ok(AllowedHosts(out))
    }

    /// Allows `host` too, on any port.
    pub fn add(&mut self, host: &str) {
        self.0.push((host.to_ascii_lowercase(), None));
    }

    /// Whether `host` on `port` is allowed.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.0
            .iter()
            .any(|(h, p)| *h == host && p.is_none_or(|p| p == port))
    }
}

/// Whether `ip` is an address a webhook may reach without the operator allowing its host: not
/// loopback, private, link-local (cloud metadata at 169.254.169.254), shared (100.64/10),
/// unspecified, multicast or reserved, also as an IPv4-mapped IPv6 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || a >= 240)
}

/// Global unicast (2000::/3) outside the special-purpose blocks of the IANA registry, or an
/// address that carries a public IPv4 one (NAT64's well-known prefix, 6to4): everything else
/// (unique local, link-local, site-local, multicast, discard, IPv4-compatible, …) is not a
/// place to send to. An address embedding an IPv4 one is judged by it, so that
/// `64:ff9b::a9fe:a9fe` does not reach 169.254.169.254 through a NAT64 gateway.
fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // NAT64, well-known prefix 64:ff9b::/96 (RFC 6052).
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded(s[6], s[7]));
    }
    // 6to4, 2002::/16 (RFC 3056): the IPv4 address is the next 32 bits.
    if s[0] == 0x2002 {
        return is_public_v4(embedded(s[1], s[2]));
    }
    if s[0] & 0xe000 != 0x2000 {
        return false;
    }
    !(s[0] == 0x2001 && s[1] == 0 // Teredo, 2001::/32
        || s[0] == 0x2001 && s[1] == 0x0002 && s[2] == 0 // benchmarking, 2001:2::/48
        || s[0] == 0x2001 && (s[1] & 0xfff0) == 0x0010 // ORCHID, 2001:10::/28
        || s[0] == 0x2001 && (s[1] & 0xfff0) == 0x0020 // ORCHIDv2, 2001:20::/28
        || s[0] == 0x2001 && s[1] == 0x0db8 // documentation, 2001:db8::/32
        || (s[0] & 0xfff0) == 0x3ff0) // documentation, 3fff::/20
}

/// Why a webhook URL is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a URL, or not one we send to.
    #[error("webhook URL {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
    /// The host resolves (or is) an address that is not public, and the operator did not allow it.
    #[error(
        "webhook URL {url:?}: {host} is {ip}, a private, loopback or link-local address; \
         such hosts must be allowed by the operator ([webhooks] allowed_hosts)"
    )]
    Address {
        /// The URL.
        url: String,
        /// Its host.
        host: String,
        /// The address refused.
        ip: IpAddr,
    },
    /// The host does not resolve.
    #[error("webhook URL {url:?}: {host} does not resolve: {why}")]
    Unresolved {
        /// The URL.
        url: String,
        /// Its host.
        host: String,
        /// The resolver's error.
        why: String,
    },
}

/// A webhook URL that passed the checks that need no lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The URL.
    pub url: reqwest::Url,
    /// Its host (without brackets).
    pub host: String,
    /// Its port (the scheme's default when absent).
    pub port: u16,
    /// Whether the operator allows the host (then any address and plain http are fine).
    pub allowed: bool,
}

/// Checks what can be checked of `url` without a lookup: an absolute http(s) URL without
/// credentials, https unless the host is allowed, and an IP literal's address.
pub fn check_url(url: &str, allowed: &AllowedHosts) -> Result<Checked, Refused> {
    let refuse = |why: &str| Refused::Url {
        url: url.to_string(),
        why: why.to_string(),
    };
    let parsed =
        reqwest::Url::parse(url).map_err(|e| refuse(&format!("not an absolute URL ({e})")))?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(refuse("only https (or http to an allowed host) is sent to"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(refuse(
            "credentials in the URL are refused (the signature authenticates the sender)",
        ));
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| refuse("it has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let port = parsed.port_or_known_default().unwrap_or(443);
    let is_allowed = allowed.allows(&host, port);
    if parsed.scheme() == "http" && !is_allowed {
        return Err(refuse(
            "plain http is sent only to hosts the operator allows ([webhooks] allowed_hosts); use https",
        ));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if !is_allowed && !is_public(ip) {
            return Err(Refused::Address {
                url: url.to_string(),
                host: host.clone(),
                ip,
            });
        }
    }
    Ok(Checked {
        url: parsed,
        host,
        port,
        allowed: is_allowed,
    })
}

/// Resolves a checked URL's host and refuses it when an address it resolves to is not public (an
/// allowed host is not looked up here: it may be anything).
pub async fn check_resolved(c: &Checked) -> Result<(), Refused> {
    if c.allowed || c.host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let addrs = tokio::net::lookup_host((c.host.as_str(), c.port))
        .await
        .map_err(|e| Refused::Unresolved {
            url: c.url.to_string(),
            host: c.host.clone(),
            why: e.to_string(),
        })?;
    for a in addrs {
        if !is_public(a.ip()) {
            return Err(Refused::Address {
                url: c.url.to_string(),
                host: c.host.clone(),
                ip: a.ip(),
            });
        }
    }
    Ok(())
}

/// The HTTP client's resolver: every connection's lookup keeps only public addresses, unless the
/// host is allowed. A name that resolves to nothing public fails the connection with the reason.
#[derive(Clone, Debug)]
pub struct GuardedResolver {
    /// The allowed hosts.
    pub allowed: Arc<AllowedHosts>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            // The port is not known here: an entry with a port allows the host on that port only,
            // and the URL was checked against it already; here a host allowed on any port passes.
            let host_allowed = allowed.0.iter().any(|(h, _)| *h == host);
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| host_allowed || is_public(a.ip()))
                .collect();
            if kept.is_empty() {
                let shown = addrs
                    .first()
                    .map_or_else(|| "nothing".to_string(), |a| a.ip().to_string());
                return Err(format!(
                    "{host} resolves to {shown}, a private, loopback or link-local address; \
                     such hosts must be allowed by the operator ([webhooks] allowed_hosts)"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str]) -> AllowedHosts {
        AllowedHosts::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn private_loopback_link_local_and_metadata_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            // IPv6 that carries a private IPv4 address, or is not global unicast.
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::10.0.0.1",
            "64:ff9b:1::1",
            "2002:a9fe:a9fe::1",
            "2002:7f00:1::1",
            "::127.0.0.1",
            "::10.0.0.1",
            "fec0::1",
            "100::1",
            "ff02::1",
            "2001::1",
            "2001:2::1",
            "2001:10::1",
            "2001:20::1",
            "2001:db8::1",
            "3fff::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "2a00:1450:4001:800::200e",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_are_https_to_public_hosts_unless_allowed() {
        let none = AllowedHosts::default();
        assert!(check_url("https://hooks.example.com/x", &none).is_ok());
        for (url, says) in [
            ("http://hooks.example.com/x", "plain http"),
            ("ftp://hooks.example.com/x", "only https"),
            ("https://user:pw@hooks.example.com/x", "credentials"),
            ("hooks.example.com/x", "not an absolute URL"),
            (
                "https://169.254.169.254/latest/meta-data",
                "169.254.169.254",
            ),
            ("https://10.0.0.1/x", "private"),
            ("https://[::1]:8443/x", "::1"),
        ] {
            let e = check_url(url, &none).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        let local = allowed(&["127.0.0.1:9000", "localhost"]);
        let c = check_url("http://127.0.0.1:9000/hook", &local).unwrap();
        assert!(c.allowed);
        assert!(
            check_url("http://127.0.0.1:9001/hook", &local).is_err(),
            "another port is not allowed"
        );
        assert!(check_url("http://LOCALHOST:1234/", &local).unwrap().allowed);
        assert!(AllowedHosts::parse(&["a/b".into()]).is_err());
        assert!(allowed(&["[::1]:80"]).allows("::1", 80));
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_unless_allowed() {
        let none = AllowedHosts::default();
        let c = check_url("https://localhost:9/x", &none).unwrap();
        let e = check_resolved(&c).await.unwrap_err().to_string();
        assert!(
            e.contains("localhost is 127.0.0.1") || e.contains("localhost is ::1"),
            "{e}"
        );
        let resolver = GuardedResolver {
            allowed: Arc::new(none),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let err = reqwest::dns::Resolve::resolve(&resolver, name)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("private, loopback or link-local"), "{err}");
        let ok = GuardedResolver {
            allowed: Arc::new(allowed(&["localhost"])),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(reqwest::dns::Resolve::resolve(&ok, name).await.is_ok());
    }
}
