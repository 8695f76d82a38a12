//! keel-bench's TLS and SASL options, as Kafka's clients name them: `--security-protocol
//! PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL`, `--ssl-ca FILE` (PEM CA certificates),
//! `--ssl-cert FILE --ssl-key FILE` (a client certificate, mTLS), `--sasl-mechanism`,
//! `--sasl-username` and `--sasl-password-env VAR`: the password comes from a variable, never
//! from the command line, and is never written to a report.
//!
//! A target address may name its own protocol, as Kafka's listeners do
//! (`SASL_SSL://127.0.0.1:9094`), so one `compare` can set a broker's listeners side by side;
//! a bare `HOST:PORT` takes `--security-protocol` (PLAINTEXT without it). The TLS
//! configuration is keel-client's `tls_client_config`, the CLI's too.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use keel_client::security::{tls_client_config, SaslLogin, Security, SASL_MECHANISMS};

/// Kafka's `security.protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl Protocol {
    pub fn parse(name: &str) -> Result<Protocol> {
        Ok(match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Protocol::Plaintext,
            "SSL" => Protocol::Ssl,
            "SASL_PLAINTEXT" => Protocol::SaslPlaintext,
            "SASL_SSL" => Protocol::SaslSsl,
            other => bail!(
                "unknown security protocol {other:?} (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
            ),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Plaintext => "PLAINTEXT",
            Protocol::Ssl => "SSL",
            Protocol::SaslPlaintext => "SASL_PLAINTEXT",
            Protocol::SaslSsl => "SASL_SSL",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }
}

/// The security flags of one command line.
#[derive(Clone, Debug, Default)]
pub struct SecurityArgs {
    /// `--security-protocol`: for addresses that do not name their own.
    pub protocol: Option<Protocol>,
    pub ssl_ca: Option<PathBuf>,
    pub ssl_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
    /// `--sasl-mechanism` (default SCRAM-SHA-512).
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    /// `--sasl-password-env`: the variable that holds the password.
    pub sasl_password_env: Option<String>,
}

/// A target's security: what its connections use, and how reports name it.
#[derive(Clone, Debug)]
pub struct TargetSecurity {
    pub security: Security,
    /// `SASL_SSL (SCRAM-SHA-512 as admin)`, `SSL (client certificate)`, `PLAINTEXT`.
    pub label: String,
}

impl SecurityArgs {
    /// Takes `flag`'s value if `flag` is one of the security flags; `Ok(false)` otherwise.
    pub fn parse_flag(
        &mut self,
        flag: &str,
        value: impl FnOnce() -> Result<String>,
    ) -> Result<bool> {
        match flag {
            "--security-protocol" => self.protocol = Some(Protocol::parse(&value()?)?),
            "--ssl-ca" => self.ssl_ca = Some(value()?.into()),
            "--ssl-cert" => self.ssl_cert = Some(value()?.into()),
            "--ssl-key" => self.ssl_key = Some(value()?.into()),
            "--sasl-mechanism" => self.sasl_mechanism = Some(value()?.to_ascii_uppercase()),
            "--sasl-username" => self.sasl_username = Some(value()?),
            "--sasl-password-env" => self.sasl_password_env = Some(value()?),
            "--sasl-password" => bail!(
                "keel-bench takes no password on the command line: put it in a variable and \
                 name it with --sasl-password-env VAR"
            ),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The address `addr` without its `PROTOCOL://` prefix, and its security.
    pub fn for_address(&self, addr: &str) -> Result<(String, TargetSecurity)> {
        let (protocol, host_port) = match addr.split_once("://") {
            Some((p, rest)) => (Protocol::parse(p).with_context(|| addr.to_string())?, rest),
            None => (self.protocol.unwrap_or(Protocol::Plaintext), addr),
        };
        let security = self
            .build(protocol)
            .with_context(|| format!("{} for {host_port}", protocol.name()))?;
        Ok((host_port.to_string(), security))
    }

    /// The security of `protocol` with these flags.
    pub fn build(&self, protocol: Protocol) -> Result<TargetSecurity> {
        if self.ssl_cert.is_some() != self.ssl_key.is_some() {
            bail!("--ssl-cert and --ssl-key go together (a client certificate and its key)");
        }
        let mut security = Security::PLAINTEXT;
        let mut details = Vec::new();
        if protocol.tls() {
            let ca = self
                .ssl_ca
                .as_deref()
                .context("TLS needs --ssl-ca FILE (PEM CA certificates of the broker's)")?;
            let client = self.ssl_cert.as_deref().zip(self.ssl_key.as_deref());
            security.tls = Some(tls_client_config(ca, client)?);
            if client.is_some() {
                details.push("client certificate".to_string());
            }
        }
        if protocol.sasl() {
            let mechanism = self
                .sasl_mechanism
                .clone()
                .unwrap_or_else(|| "SCRAM-SHA-512".to_string());
            if !SASL_MECHANISMS.contains(&mechanism.as_str()) {
                bail!("--sasl-mechanism {mechanism}: one of {SASL_MECHANISMS:?}");
            }
            let username = self
                .sasl_username
                .clone()
                .context("SASL needs --sasl-username")?;
            let var = self.sasl_password_env.as_deref().context(
                "SASL needs --sasl-password-env VAR (the variable holding the password)",
            )?;
            let password = std::env::var(var)
                .with_context(|| format!("--sasl-password-env: {var} is not set"))?;
            details.push(format!("{mechanism} as {username}"));
            security.sasl = Some(SaslLogin {
                mechanism,
                username,
                password,
            });
        }
        let label = if details.is_empty() {
            protocol.name().to_string()
        } else {
            format!("{} ({})", protocol.name(), details.join(", "))
        };
        Ok(TargetSecurity { security, label })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[(&str, &str)]) -> SecurityArgs {
        let mut a = SecurityArgs::default();
        for (f, v) in flags {
            assert!(a.parse_flag(f, || Ok(v.to_string())).unwrap(), "{f}");
        }
        a
    }

    #[test]
    fn addresses_name_their_protocol_or_take_the_flag() {
        let plain = SecurityArgs::default();
        let (addr, s) = plain.for_address("127.0.0.1:9092").unwrap();
        assert_eq!(
            (addr.as_str(), s.label.as_str()),
            ("127.0.0.1:9092", "PLAINTEXT")
        );
        assert!(s.security.tls.is_none() && s.security.sasl.is_none());

        // SASL_PLAINTEXT needs no CA; the password comes from the named variable.
        let var = format!("KB_TEST_PW_{}", std::process::id());
        std::env::set_var(&var, "s3cret");
        let a = args(&[
            ("--security-protocol", "sasl_plaintext"),
            ("--sasl-username", "admin"),
            ("--sasl-password-env", &var),
        ]);
        let (addr, s) = a.for_address("127.0.0.1:9093").unwrap();
        assert_eq!(addr, "127.0.0.1:9093");
        assert_eq!(s.label, "SASL_PLAINTEXT (SCRAM-SHA-512 as admin)");
        let login = s.security.sasl.unwrap();
        assert_eq!(
            (login.mechanism.as_str(), login.password.as_str()),
            ("SCRAM-SHA-512", "s3cret")
        );
        // A prefix wins over the flag.
        let (addr, s) = a.for_address("PLAINTEXT://127.0.0.1:9092").unwrap();
        assert_eq!(
            (addr.as_str(), s.label.as_str()),
            ("127.0.0.1:9092", "PLAINTEXT")
        );
        std::env::remove_var(&var);
    }

    #[test]
    fn missing_or_unsafe_settings_are_refused() {
        let mut a = SecurityArgs::default();
        assert!(a.parse_flag("--sasl-password", || Ok("x".into())).is_err());
        assert!(!a.parse_flag("--rate", || Ok("1".into())).unwrap());
        assert!(a
            .parse_flag("--security-protocol", || Ok("TLS".into()))
            .is_err());
        let e = a.for_address("SSL://127.0.0.1:9093").unwrap_err();
        assert!(format!("{e:#}").contains("--ssl-ca"), "{e:#}");
        let e = args(&[("--sasl-username", "u")])
            .for_address("SASL_PLAINTEXT://h:1")
            .unwrap_err();
        assert!(format!("{e:#}").contains("--sasl-password-env"), "{e:#}");
        let e = args(&[("--ssl-cert", "c.pem"), ("--ssl-ca", "ca.pem")])
            .for_address("SSL://h:1")
            .unwrap_err();
        assert!(format!("{e:#}").contains("--ssl-key"), "{e:#}");
        let e = args(&[
            ("--sasl-mechanism", "GSSAPI"),
            ("--sasl-username", "u"),
            ("--sasl-password-env", "PATH"),
        ])
        .for_address("SASL_PLAINTEXT://h:1")
        .unwrap_err();
        assert!(format!("{e:#}").contains("SCRAM-SHA-256"), "{e:#}");
    }
}
