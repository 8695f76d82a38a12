//! How a connection secures itself, Kafka's `security.protocol`: TLS with a rustls client
//! configuration, a SASL login, both, or neither. Transport-independent: the blocking and the
//! glommio transports take the same [`Security`]; the SASL exchange itself is the sans-I/O
//! [`crate::core::sasl`], and reading PEM files into a rustls configuration is
//! [`tls_client_config`], for the CLI, keel-bench and tests alike.
//!
//! TLS is rustls on the ring provider (the one keel-auth's SCRAM uses): TLS 1.2 and 1.3, the
//! broker's certificate checked against the given CA certificates and the name the client
//! dialled, and optionally a client certificate (mTLS).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::ClientError;

/// How a connection secures itself. The default is [`Security::PLAINTEXT`].
#[derive(Clone, Default)]
pub struct Security {
    /// TLS with this configuration; the broker's certificate must name the address's host.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// A SASL login after the connection (and TLS) is up, before the first request.
    pub sasl: Option<SaslLogin>,
}

impl Security {
    /// No TLS, no login (Kafka's PLAINTEXT).
    pub const PLAINTEXT: Security = Security {
        tls: None,
        sasl: None,
    };

    /// Kafka's name for it: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub fn protocol_name(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}

/// The password never appears: only whether TLS is on and who logs in with what.
impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

/// The SASL mechanisms a client can log in with.
pub const SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// A SASL login: `mechanism` is one of [`SASL_MECHANISMS`], by Kafka's name.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A rustls client configuration from PEM files: the CA certificates that sign the broker's
/// certificate (Kafka's `ssl.truststore.location` with `ssl.truststore.type=PEM`), and for
/// mTLS the client's certificate chain and its unencrypted private key (`client`: the chain's
/// file and the key's file; they may be one file holding both, as Kafka's PEM keystore does).
pub fn tls_client_config(
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certificates(ca)? {
        roots
            .add(cert)
            .map_err(|e| tls_config_error(ca, e.to_string()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_config_error(ca, e.to_string()))?
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = read_certificates(cert)?;
            let pem = read(key)?;
            let key_der = PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|e| tls_config_error(key, format!("no private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| tls_config_error(key, e.to_string()))?
        }
    };
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| tls_config_error(path, e.to_string()))
}

/// Every certificate of a PEM file; at least one.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_config_error(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(tls_config_error(path, "no PEM certificate".to_string()));
    }
    Ok(certs)
}

fn tls_config_error(path: &Path, reason: String) -> ClientError {
    ClientError::TlsConfig {
        path: path.display().to_string(),
        reason,
    }
}

/// The name TLS checks the broker's certificate against: the host of `addr` (`host:port`,
/// `[v6]:port`), a DNS name or an IP address.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, ClientError> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_matches(['[', ']']);
    ServerName::try_from(host.to_string()).map_err(|e| ClientError::Tls {
        addr: addr.to_string(),
        reason: format!("{host:?} is no server name: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_and_server_names() {
        let login = SaslLogin {
            mechanism: "PLAIN".into(),
            username: "alice".into(),
            password: "s3cret".into(),
        };
        let sasl = Security {
            sasl: Some(login),
            ..Security::PLAINTEXT
        };
        assert_eq!(Security::PLAINTEXT.protocol_name(), "PLAINTEXT");
        assert_eq!(sasl.protocol_name(), "SASL_PLAINTEXT");
        assert!(!format!("{sasl:?}").contains("s3cret"), "{sasl:?}");
        assert_eq!(
            server_name("broker-1.example:9093").unwrap(),
            ServerName::try_from("broker-1.example").unwrap()
        );
        assert!(matches!(
            server_name("127.0.0.1:9093").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("[::1]:9093").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("bad name:1"),
            Err(ClientError::Tls { .. })
        ));
    }

    #[test]
    fn unreadable_or_empty_pem_files_name_the_file() {
        let dir = std::env::temp_dir().join(format!("keel-client-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let r = tls_client_config(&empty, None);
        assert!(
            matches!(&r, Err(ClientError::TlsConfig { path, reason }) if path.ends_with("empty.pem") && reason.contains("no PEM certificate")),
            "{:?}",
            r.err()
        );
        let r = tls_client_config(&dir.join("missing.pem"), None);
        assert!(
            matches!(&r, Err(ClientError::TlsConfig { path, .. }) if path.ends_with("missing.pem")),
            "{:?}",
            r.err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
