//! TLS for the SSL and SASL_SSL listeners (issue 19): rustls with the ring provider, built
//! once at start from Kafka's PEM settings, and the mTLS principal Kafka derives from a client
//! certificate.
//!
//! Settings (each also as `listener.name.<name>.<key>`): `ssl.keystore.type=PEM` with
//! `ssl.keystore.location` (one PEM file: the private key and the certificate chain, as
//! Kafka's PEM keystore), `ssl.truststore.location` (PEM CA certificates, for client
//! certificates), `ssl.client.auth` (none, requested, required), `ssl.enabled.protocols`
//! (TLSv1.2, TLSv1.3), `ssl.cipher.suites` (IANA names; empty: rustls' defaults) and
//! `ssl.principal.mapping.rules` (DEFAULT only, for now).

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// A listener's TLS server configuration. Equal only to itself (listeners compare by value
/// elsewhere; two configurations are never compared for content).
#[derive(Clone)]
pub struct TlsConfig(pub Arc<ServerConfig>);

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TlsConfig {}

/// Builds listener `name`'s TLS configuration; `value(key)` is the listener's value of a
/// setting (its `listener.name.<name>.` override, else the broker's).
pub fn server_config(name: &str, value: &dyn Fn(&str) -> String) -> Result<TlsConfig> {
    let what = |key: &str| format!("listener {name}: {key}");
    let kind = value("ssl.keystore.type");
    if !kind.eq_ignore_ascii_case("PEM") {
        bail!(
            "{}: {kind:?} is not supported; Keel reads PEM",
            what("ssl.keystore.type")
        );
    }
    if !value("ssl.key.password").is_empty() {
        bail!(
            "{}: encrypted private keys are not supported; give an unencrypted PEM key",
            what("ssl.key.password")
        );
    }
    let location = value("ssl.keystore.location");
    if location.is_empty() {
        bail!(
            "{} is needed for an SSL or SASL_SSL listener",
            what("ssl.keystore.location")
        );
    }
    let pem = std::fs::read(&location)
        .with_context(|| format!("{}: reading {location}", what("ssl.keystore.location")))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow!("{}: {location}: {e:?}", what("ssl.keystore.location")))?;
    if chain.is_empty() {
        bail!(
            "{}: {location} holds no certificate",
            what("ssl.keystore.location")
        );
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        anyhow!(
            "{}: {location} holds no private key ({e:?})",
            what("ssl.keystore.location")
        )
    })?;

    let mut provider = rustls::crypto::ring::default_provider();
    let suites = value("ssl.cipher.suites");
    if !suites.is_empty() {
        let wanted: Vec<String> = suites
            .split(',')
            .map(|s| s.trim().to_ascii_uppercase())
            .filter(|s| !s.is_empty())
            .collect();
        for w in &wanted {
            if !provider
                .cipher_suites
                .iter()
                .any(|s| format!("{:?}", s.suite()) == *w)
            {
                bail!(
                    "{}: unknown or unsupported suite {w}",
                    what("ssl.cipher.suites")
                );
            }
        }
        provider
            .cipher_suites
            .retain(|s| wanted.contains(&format!("{:?}", s.suite())));
    }
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    for p in value("ssl.enabled.protocols")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match p {
            "TLSv1.3" => versions.push(&rustls::version::TLS13),
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            other => bail!(
                "{}: {other} is not supported (TLSv1.2, TLSv1.3)",
                what("ssl.enabled.protocols")
            ),
        }
    }
    if versions.is_empty() {
        bail!("{} is empty", what("ssl.enabled.protocols"));
    }
    let provider = Arc::new(provider);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| anyhow!("listener {name}: the suites and protocols do not match: {e}"))?;

    let client_auth = value("ssl.client.auth").to_ascii_lowercase();
    let builder = match client_auth.as_str() {
        "none" | "" => builder.with_no_client_auth(),
        "requested" | "required" => {
            let trust = value("ssl.truststore.location");
            if trust.is_empty() {
                bail!(
                    "{}: ssl.client.auth={client_auth} needs ssl.truststore.location",
                    what("ssl.truststore.location")
                );
            }
            let pem = std::fs::read(&trust)
                .with_context(|| format!("{}: reading {trust}", what("ssl.truststore.location")))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert
                    .map_err(|e| anyhow!("{}: {trust}: {e:?}", what("ssl.truststore.location")))?;
                roots
                    .add(cert)
                    .map_err(|e| anyhow!("{}: {trust}: {e}", what("ssl.truststore.location")))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let verifier = if client_auth == "requested" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| anyhow!("{}: {e}", what("ssl.truststore.location")))?;
            builder.with_client_cert_verifier(verifier)
        }
        other => bail!(
            "{}: {other:?} (none, requested, required)",
            what("ssl.client.auth")
        ),
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| anyhow!("{}: {location}: {e}", what("ssl.keystore.location")))?;
    let rules = value("ssl.principal.mapping.rules");
    if !rules.is_empty() && rules != "DEFAULT" {
        bail!(
            "{}: only DEFAULT (the certificate's subject) is supported yet",
            what("ssl.principal.mapping.rules")
        );
    }
    Ok(TlsConfig(Arc::new(config)))
}

/// Kafka's principal for a client certificate under `ssl.principal.mapping.rules=DEFAULT`:
/// `User:` and the subject's distinguished name as Java's `X500Principal.getName()` writes it
/// (RFC 2253: the most specific RDN first, `,` between them, no spaces).
pub fn principal_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let mut rdns = Vec::new();
    for rdn in parsed.subject().iter() {
        let mut parts = Vec::new();
        for attr in rdn.iter() {
            let oid = attr.attr_type();
            let key = x509_parser::objects::oid2abbrev(oid, x509_parser::objects::oid_registry())
                .map(str::to_string)
                .unwrap_or_else(|_| oid.to_id_string());
            let value = attr.as_str().ok()?;
            parts.push(format!("{key}={}", escape_rfc2253(value)));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(format!("User:{}", rdns.join(",")))
}

/// RFC 2253 escaping of an attribute value.
fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == ' ' || c == '#'))
            || (i == value.chars().count() - 1 && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_rfc2253() {
        assert_eq!(escape_rfc2253("Keel, Inc."), "Keel\\, Inc.");
        assert_eq!(escape_rfc2253("#a+b "), "\\#a\\+b\\ ");
        assert_eq!(escape_rfc2253("plain"), "plain");
    }
}
