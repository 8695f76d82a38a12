//! `--command-config FILE`: Kafka's client properties for TLS and SASL, as Kafka's tools take
//! them (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config` or librdkafka's
//! `sasl.username`/`sasl.password`, `ssl.truststore.location` or `ssl.ca.location` with PEM
//! CA certificates). The password may instead come from the variable `--sasl-password-env`
//! names; it never appears on the command line. The TLS configuration is keel-client's
//! [`tls_client_config`], the one keel-bench uses too.

use std::collections::BTreeMap;
use std::path::Path;

use keel_client::security::{tls_client_config, SaslLogin, Security};

use crate::args::Parsed;
use crate::error::{CliError, Result};

/// The TLS and SASL settings of the command line (plaintext without `--command-config`).
pub fn from_args(p: &Parsed) -> Result<Security> {
    let Some(path) = p.get("--command-config") else {
        if p.get("--sasl-password-env").is_some() {
            return Err(CliError::Usage(
                "--sasl-password-env needs --command-config".into(),
            ));
        }
        return Ok(Security::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        addr: path.to_string(),
        source,
    })?;
    let props = properties(&text);
    let get = |k: &str| props.get(k).map(String::as_str).unwrap_or_default();
    let usage = |m: String| CliError::Usage(format!("{path}: {m}"));
    let protocol = match get("security.protocol") {
        "" => "PLAINTEXT".to_string(),
        p => p.to_ascii_uppercase(),
    };
    let (tls, sasl) = match protocol.as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => return Err(usage(format!("unknown security.protocol {other:?}"))),
    };
    let mut security = Security::default();
    if tls {
        let ca = [get("ssl.truststore.location"), get("ssl.ca.location")]
            .into_iter()
            .find(|c| !c.is_empty())
            .ok_or_else(|| {
                usage("TLS needs ssl.truststore.location (PEM CA certificates)".into())
            })?;
        let config = tls_client_config(Path::new(ca), None).map_err(|e| usage(e.to_string()))?;
        security.tls = Some(config);
    }
    if sasl {
        let mechanism = match get("sasl.mechanism") {
            "" => "GSSAPI".to_string(),
            m => m.to_ascii_uppercase(),
        };
        if !matches!(
            mechanism.as_str(),
            "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
        ) {
            return Err(usage(format!(
                "sasl.mechanism {mechanism} is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
            )));
        }
        let jaas = jaas_options(get("sasl.jaas.config"))
            .map_err(|e| usage(format!("sasl.jaas.config: {e}")))?;
        let username = [
            get("sasl.username"),
            jaas.get("username").map_or("", |s| s.as_str()),
        ]
        .into_iter()
        .find(|u| !u.is_empty())
        .ok_or_else(|| usage("SASL needs sasl.username or a sasl.jaas.config username".into()))?
        .to_string();
        let password = match p.get("--sasl-password-env") {
            Some(var) => std::env::var(var).map_err(|_| {
                CliError::Usage(format!("--sasl-password-env: {var} is not set"))
            })?,
            None => [get("sasl.password"), jaas.get("password").map_or("", |s| s.as_str())]
                .into_iter()
                .find(|p| !p.is_empty())
                .ok_or_else(|| {
                    usage("SASL needs a password (sasl.password, sasl.jaas.config or --sasl-password-env)".into())
                })?
                .to_string(),
        };
        security.sasl = Some(SaslLogin {
            mechanism,
            username,
            password,
        });
    }
    Ok(security)
}

/// `key=value` lines of a Java properties file (`#` and `!` comments; no continuations).
fn properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once(['=', ':']))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The options of a JAAS login module entry
/// (`org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";`),
/// read as Kafka reads them (keel-auth's parser: quotes, escapes, comments); none when empty.
fn jaas_options(jaas: &str) -> std::result::Result<BTreeMap<String, String>, String> {
    if jaas.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    let entries = keel_auth::jaas::parse(jaas).map_err(|e| e.to_string())?;
    Ok(entries
        .into_iter()
        .next()
        .map(|e| e.options)
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_and_jaas_options_are_read_as_kafka_writes_them() {
        let p = properties(
            "# a comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism = SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"alice\" password=\"a=b c\";\n",
        );
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["sasl.mechanism"], "SCRAM-SHA-512");
        let j = jaas_options(&p["sasl.jaas.config"]).unwrap();
        assert_eq!(j["username"], "alice");
        assert_eq!(j["password"], "a=b c");
        // Kafka's quoting: an escaped quote is part of the password; a missing `;` is refused.
        let j =
            jaas_options(r#"ScramLoginModule required username="bob" password="p\"q";"#).unwrap();
        assert_eq!(j["password"], "p\"q");
        assert!(jaas_options(r#"ScramLoginModule required username="bob""#)
            .unwrap_err()
            .contains("semi-colon"));
        assert!(jaas_options("").unwrap().is_empty());
    }
}
