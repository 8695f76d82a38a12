//! TLS for the SSL and SASL_SSL listeners (issue 19): rustls with the ring provider, built
//! once at start from Kafka's PEM settings, and the mTLS principal Kafka derives from a client
//! certificate.
//!
//! Settings (each also as `listener.name.<name>.<key>`): `ssl.keystore.type=PEM` with
//! `ssl.keystore.location` (one PEM file: the private key and the certificate chain, as
//! Kafka's PEM keystore), `ssl.truststore.location` (PEM CA certificates, for client
//! certificates), `ssl.client.auth` (none, requested, required), `ssl.enabled.protocols`
//! (TLSv1.2, TLSv1.3), `ssl.cipher.suites` (IANA names; empty: rustls' defaults) and
//! `ssl.principal.mapping.rules` (Kafka's `SslPrincipalMapper`: [`PrincipalMapper`]).
//!
//! The principal of a connection to an SSL listener with a verified client certificate is
//! `User:` and the name the mapping rules make of its subject DN; a DN no rule matches fails
//! the handshake (Kafka: "No rules apply to ..."). On a SASL_SSL listener the SASL login names
//! the principal, as in Kafka, and the certificate is not mapped. The handshake runs on the
//! shard's `auth` task queue (`frontend::handshake`); the rules are compiled once at start.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use regex::Regex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// A listener's TLS server configuration and how its client certificates name principals.
/// Equal only to itself (listeners compare by value elsewhere; two configurations are never
/// compared for content).
#[derive(Clone)]
pub struct TlsConfig {
    pub server: Arc<ServerConfig>,
    /// `ssl.principal.mapping.rules`; `None` on a SASL_SSL listener (the SASL login names the
    /// principal).
    pub principal_mapper: Option<Arc<PrincipalMapper>>,
}

impl TlsConfig {
    /// The principal a verified client certificate gives the connection: `Ok(None)` on a
    /// SASL_SSL listener or for a subject that cannot be read (the connection stays
    /// `User:ANONYMOUS`), `Err` when no mapping rule applies to its DN (the connection is
    /// refused, as Kafka refuses it).
    pub fn principal_of(&self, cert: &CertificateDer<'_>) -> Result<Option<String>, String> {
        let Some(mapper) = &self.principal_mapper else {
            return Ok(None);
        };
        let Some(dn) = subject_dn(cert) else {
            return Ok(None);
        };
        mapper.name_of(&dn).map(|name| Some(format!("User:{name}")))
    }
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.server, &other.server)
    }
}

impl Eq for TlsConfig {}

/// Builds listener `name`'s TLS configuration; `value(key)` is the listener's value of a
/// setting (its `listener.name.<name>.` override, else the broker's). `sasl`: a SASL_SSL
/// listener, where the SASL login names the principal, not the certificate.
pub fn server_config(name: &str, sasl: bool, value: &dyn Fn(&str) -> String) -> Result<TlsConfig> {
    let what = |key: &str| format!("listener {name}: {key}");
    // Checked first: a bad rule is a mistake in the settings, whatever the key files hold.
    let rules = value("ssl.principal.mapping.rules");
    let principal_mapper = PrincipalMapper::parse(&rules)
        .map_err(|e| anyhow!("{}: {e}", what("ssl.principal.mapping.rules")))?;
    let principal_mapper = (!sasl).then(|| Arc::new(principal_mapper));
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
    let (chain, key, location) = read_keystore(&what, value)?;

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
            let roots = read_truststore(&what, &trust)?;
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
    Ok(TlsConfig {
        server: Arc::new(config),
        principal_mapper,
    })
}

/// The listener's keystore (`ssl.keystore.location`, one PEM file: key and certificate chain)
/// and its location.
fn read_keystore(
    what: &dyn Fn(&str) -> String,
    value: &dyn Fn(&str) -> String,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String)> {
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
    Ok((chain, key, location))
}

/// The CA certificates of a truststore (`ssl.truststore.location`, PEM).
fn read_truststore(what: &dyn Fn(&str) -> String, trust: &str) -> Result<RootCertStore> {
    let pem = std::fs::read(trust)
        .with_context(|| format!("{}: reading {trust}", what("ssl.truststore.location")))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert =
            cert.map_err(|e| anyhow!("{}: {trust}: {e:?}", what("ssl.truststore.location")))?;
        roots
            .add(cert)
            .map_err(|e| anyhow!("{}: {trust}: {e}", what("ssl.truststore.location")))?;
    }
    Ok(roots)
}

/// Mutual TLS for the controller transport on the SSL listener `name` (Kafka's
/// `controller.listener.names`): the listener's server configuration with client certificates
/// required whatever `ssl.client.auth` says, a client configuration that presents the same
/// keystore's certificate and trusts the truststore, and the admission of a peer: its
/// certificate's principal (through `ssl.principal.mapping.rules`) must be one of
/// `super_users`.
pub fn controller_tls(
    name: &str,
    value: &dyn Fn(&str) -> String,
    super_users: Vec<String>,
) -> Result<keel_raft::network::ControllerTls> {
    let what = |key: &str| format!("controller listener {name}: {key}");
    let trust = value("ssl.truststore.location");
    if trust.is_empty() {
        bail!(
            "{} is needed: controller peers authenticate with certificates",
            what("ssl.truststore.location")
        );
    }
    if super_users.is_empty() {
        bail!(
            "controller listener {name}: super.users must name the principals of the \
             controllers' and brokers' certificates (only super users may reach it)"
        );
    }
    let required = |key: &str| {
        if key == "ssl.client.auth" {
            "required".to_string()
        } else {
            value(key)
        }
    };
    let server = server_config(name, false, &required)?;
    let mapper = server
        .principal_mapper
        .clone()
        .ok_or_else(|| anyhow!("controller listener {name}: no principal mapping"))?;
    let client = client_config(&what, value)?;
    let super_users: std::collections::HashSet<String> = super_users.into_iter().collect();
    let admit = move |cert: &CertificateDer<'_>| -> std::result::Result<String, String> {
        let dn = subject_dn(cert).ok_or_else(|| "unreadable certificate subject".to_string())?;
        let principal = format!("User:{}", mapper.name_of(&dn)?);
        if super_users.contains(&principal) {
            Ok(principal)
        } else {
            Err(format!("{principal} is not a super user"))
        }
    };
    Ok(keel_raft::network::ControllerTls {
        server: server.server,
        client,
        admit: Arc::new(admit),
    })
}

/// The TLS client side of a listener, for this broker's own connections to its peers (the
/// controller transport, replica fetchers, the WriteTxnMarkers client): the peer's certificate
/// is checked against the listener's truststore (`ssl.truststore.location`, needed) and the
/// name dialled, and the listener's keystore certificate is presented when the peer asks for
/// one (mTLS), as a Kafka broker presents its keystore. `what(key)` names a setting in errors.
pub fn client_config(
    what: &dyn Fn(&str) -> String,
    value: &dyn Fn(&str) -> String,
) -> Result<Arc<rustls::ClientConfig>> {
    let trust = value("ssl.truststore.location");
    if trust.is_empty() {
        bail!(
            "{} is needed: this broker checks its peers' certificates against it",
            what("ssl.truststore.location")
        );
    }
    let (chain, key, location) = read_keystore(what, value)?;
    let roots = read_truststore(what, &trust)?;
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| anyhow!("{}: {e}", what("ssl.enabled.protocols")))?
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .map_err(|e| anyhow!("{}: {location}: {e}", what("ssl.keystore.location")))?;
    Ok(Arc::new(client))
}

/// A client certificate's subject distinguished name as Java's `X500Principal.getName()`
/// writes it (RFC 2253: the most specific RDN first, `,` between them, no spaces), the name
/// Kafka's `ssl.principal.mapping.rules` apply to.
pub fn subject_dn(cert: &CertificateDer<'_>) -> Option<String> {
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
    Some(rdns.join(","))
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

/// Kafka's `ssl.principal.mapping.rules` (`SslPrincipalMapper`): a comma-separated list of
/// `DEFAULT` (the DN itself) and `RULE:pattern/replacement/` with an optional `L` or `U`
/// (lower or upper case the result). A rule applies when its pattern matches the whole DN; the
/// DN is then rewritten as Java's `replaceAll(pattern, replacement)` with `$1`-style groups
/// (and `${name}`); the first rule that applies names the principal. `/` and `\` are escaped
/// with `\` inside a pattern or replacement.
///
/// The rules are split and parsed with Kafka's own regular expressions. Patterns are compiled
/// by the `regex` crate (RE2 syntax: Java's look-around and back-references are refused at
/// start). A replacement Java would refuse only when a rule first matches (a group the
/// pattern does not have, a `$` or `\` with nothing after it) is refused at start here.
#[derive(Debug)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

#[derive(Debug)]
enum Rule {
    Default,
    Pattern {
        /// The rule as Kafka prints it (`RULE:pattern/replacement/L`), for errors.
        text: String,
        /// The pattern anchored at both ends: whether the rule applies.
        whole: Regex,
        /// The pattern itself: what the replacement rewrites.
        pattern: Regex,
        replacement: Vec<Part>,
        case: Case,
    },
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Group(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Kafka's `SslPrincipalMapper.RULE_PATTERN`: group 1 `DEFAULT`, 2 the pattern, 4 the
/// replacement, 6 the case flag, 7 anything else (an empty rule, ignored, or an invalid one).
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

impl PrincipalMapper {
    /// Parses a rules value; the error names the rule at fault.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, String> {
        // Kafka's regexes; they compile (a unit test says so).
        let splitter = Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(,\s*|$)"))
            .map_err(|e| format!("internal: {e}"))?;
        let parser =
            Regex::new(&format!(r"\A(?:{RULE_PATTERN})")).map_err(|e| format!("internal: {e}"))?;
        let mut parsed = Vec::new();
        for split in splitter.captures_iter(rules.trim()) {
            let rule = split.get(1).map_or("", |m| m.as_str());
            let Some(m) = parser.captures(rule) else {
                return Err(format!("Invalid rule: {rule}"));
            };
            let end = m.get(0).map_or(0, |g| g.end());
            if end != rule.len() {
                return Err(format!(
                    "Invalid rule: `{rule}`, unmatched substring: `{}`",
                    &rule[end..]
                ));
            }
            if m.get(1).is_some() {
                parsed.push(Rule::Default);
            } else if let Some(pattern) = m.get(2) {
                let replacement = m.get(4).map_or("", |g| g.as_str());
                let case = match m.get(6).map(|g| g.as_str()) {
                    Some("L") => Case::Lower,
                    Some("U") => Case::Upper,
                    _ => Case::Keep,
                };
                parsed.push(
                    Rule::pattern(pattern.as_str(), replacement, case)
                        .map_err(|why| format!("Invalid rule: `{rule}`: {why}"))?,
                );
            }
            // Else an empty rule (`DEFAULT,,` or an empty value), which Kafka ignores.
        }
        if parsed.is_empty() {
            return Err(format!(
                "{rules:?} names no rule (DEFAULT or RULE:pattern/replacement/), so no \
                 certificate would be accepted"
            ));
        }
        Ok(PrincipalMapper { rules: parsed })
    }

    /// The principal's name for `dn`: the first rule that applies, else Kafka's error.
    pub fn name_of(&self, dn: &str) -> Result<String, String> {
        self.rules.iter().find_map(|r| r.apply(dn)).ok_or_else(|| {
            let rules: Vec<&str> = self.rules.iter().map(Rule::text).collect();
            format!("No rules apply to {dn}, rules [{}]", rules.join(", "))
        })
    }
}

impl Rule {
    fn pattern(pattern: &str, replacement: &str, case: Case) -> Result<Rule, String> {
        let compiled = Regex::new(pattern).map_err(|e| e.to_string())?;
        let whole = Regex::new(&format!(r"\A(?:{pattern})\z")).map_err(|e| e.to_string())?;
        let replacement_text = replacement;
        let replacement = parse_replacement(replacement, &compiled)?;
        let flag = match case {
            Case::Keep => "",
            Case::Lower => "L",
            Case::Upper => "U",
        };
        Ok(Rule::Pattern {
            text: format!("RULE:{pattern}/{replacement_text}/{flag}"),
            whole,
            pattern: compiled,
            replacement,
            case,
        })
    }

    fn text(&self) -> &str {
        match self {
            Rule::Default => "DEFAULT",
            Rule::Pattern { text, .. } => text,
        }
    }

    /// The rewritten DN when the rule applies to it (Java's `replaceAll` of every match).
    fn apply(&self, dn: &str) -> Option<String> {
        let Rule::Pattern {
            whole,
            pattern,
            replacement,
            case,
            ..
        } = self
        else {
            return Some(dn.to_string());
        };
        if !whole.is_match(dn) {
            return None;
        }
        // Java's find loop: an empty match right after a non-empty one counts (`(.*)` rewrites
        // the DN, then the empty string at its end); after an empty match the search moves on
        // one character.
        let mut out = String::with_capacity(dn.len());
        let (mut last, mut from) = (0, 0);
        while let Some(caps) = pattern.captures_at(dn, from) {
            let Some(m) = caps.get(0) else { break };
            out.push_str(&dn[last..m.start()]);
            for part in replacement {
                match part {
                    Part::Literal(text) => out.push_str(text),
                    Part::Group(g) => out.push_str(caps.get(*g).map_or("", |c| c.as_str())),
                }
            }
            last = m.end();
            from = if m.is_empty() {
                match dn[m.end()..].chars().next() {
                    Some(c) => m.end() + c.len_utf8(),
                    None => break,
                }
            } else {
                m.end()
            };
        }
        out.push_str(&dn[last..]);
        Some(match case {
            Case::Keep => out,
            Case::Lower => out.to_lowercase(),
            Case::Upper => out.to_uppercase(),
        })
    }
}

/// A replacement as Kafka hands it to Java's `Matcher.replaceAll`: `\x` is `x`; `$` and
/// digits is a group, the longest run of digits that names one (`$12` with 3 groups is group 1
/// then `2`); a first digit beyond the groups leaves the `$` literal (Kafka's
/// `escapeLiteralBackReferences`), unless the pattern has no group at all (Java's "No group");
/// `${name}` is a named group.
fn parse_replacement(text: &str, pattern: &Regex) -> Result<Vec<Part>, String> {
    let groups = pattern.captures_len() - 1;
    let chars: Vec<char> = text.chars().collect();
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let c = chars
                    .get(i + 1)
                    .ok_or("the replacement ends with `\\` (character to be escaped is missing)")?;
                literal.push(*c);
                i += 2;
            }
            '$' => {
                let next = *chars
                    .get(i + 1)
                    .ok_or("the replacement ends with `$` (group index is missing)")?;
                let group = if next == '{' {
                    let close = chars[i + 2..]
                        .iter()
                        .position(|&c| c == '}')
                        .ok_or("`${` without its `}`")?;
                    let name: String = chars[i + 2..i + 2 + close].iter().collect();
                    let index = pattern
                        .capture_names()
                        .position(|n| n == Some(name.as_str()))
                        .ok_or_else(|| format!("no group named {name:?}"))?;
                    i += 3 + close;
                    index
                } else {
                    let first = next
                        .to_digit(10)
                        .ok_or_else(|| format!("illegal group reference `${next}`"))?
                        as usize;
                    if first > groups {
                        if groups == 0 {
                            return Err(format!("no group {first}: the pattern has no group"));
                        }
                        literal.push('$');
                        i += 1;
                        continue;
                    }
                    let mut index = first;
                    i += 2;
                    while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                        let longer = index * 10 + d as usize;
                        if longer > groups {
                            break;
                        }
                        index = longer;
                        i += 1;
                    }
                    index
                };
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Part::Group(group));
            }
            c => {
                literal.push(c);
                i += 1;
            }
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
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

    /// Kafka's documented example (docs/security.md, "Customizing SSL User Name").
    const KAFKA_DOC_RULES: &str = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\
        RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\
        RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";

    fn name(rules: &str, dn: &str) -> Result<String, String> {
        PrincipalMapper::parse(rules).unwrap().name_of(dn)
    }

    #[test]
    fn kafka_documented_rules_map_as_kafka_maps() {
        let m = PrincipalMapper::parse(KAFKA_DOC_RULES).unwrap();
        let n = |dn: &str| m.name_of(dn).unwrap();
        assert_eq!(
            n("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
            "serviceuser"
        );
        assert_eq!(
            n("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
            "adminuser@admin"
        );
        assert_eq!(n("CN=Client-One,OU=Tests,O=Keel"), "client");
        assert_eq!(
            n("OU=JavaSoft,O=Sun Microsystems,C=US"),
            "OU=JavaSoft,O=Sun Microsystems,C=US"
        );
    }

    #[test]
    fn kafka_mapper_tests() {
        // SslPrincipalMapperTest.testSslPrincipalMapper.
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, \
                     RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, \
                     RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, \
                     RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT";
        let m = PrincipalMapper::parse(rules).unwrap();
        let n = |dn: &str| m.name_of(dn).unwrap();
        assert_eq!(n("CN=Duke,OU=ServiceUsers,O=Org,C=US"), "duke");
        assert_eq!(n("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"), "duke@sme");
        assert_eq!(n("cn=duke,ou=sme,dc=mycp,dc=com"), "DUKE@SME");
        assert_eq!(n("cN=duke,OU=JavaSoft,O=Sun Microsystems"), "DUKE");
        assert_eq!(
            n("OU=JavaSoft,O=Sun Microsystems,C=US"),
            "OU=JavaSoft,O=Sun Microsystems,C=US"
        );
        // testCommaWithWhitespace: an escaped comma inside the DN, `\\` in the pattern.
        assert_eq!(
            name(
                r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT",
                r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz"
            )
            .unwrap(),
            r"Tkac\, Adam"
        );
        // A slash escaped in the pattern and the replacement.
        assert_eq!(
            name(r"RULE:^CN=(.*)\/x,O=(.*)$/$2\/$1/U", "CN=a/x,O=b").unwrap(),
            "B/A"
        );
    }

    #[test]
    fn valid_and_invalid_rules_as_kafka_tests_them() {
        for ok in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,",
            " DEFAULT , ,",
        ] {
            assert!(PrincipalMapper::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "default",
            "DEFAUL",
            "DEFAULT/L",
            "DEFAULT/U",
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/LU",
            "DEFAULT,RULE:^CN=(.*$/$1/",
            "RULE:^CN=(?=x)(.*)$/$1/",
            "RULE:^CN=.*$/$1/",
            "RULE:^CN=(.*)$/$x/",
            "RULE:^CN=(.*)$/${nope}/",
            "RULE:^CN=(.*)$/$1\\/",
            "",
            " , ",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad:?}");
        }
        let e = PrincipalMapper::parse("DEFAULT,RULE:^CN=(.*$/$1/").unwrap_err();
        assert!(e.contains("RULE:^CN=(.*$/$1/"), "{e}");
        let e = PrincipalMapper::parse("DEFAULT/L").unwrap_err();
        assert!(e.contains("unmatched substring: `/L`"), "{e}");
    }

    #[test]
    fn the_whole_dn_must_match_and_the_first_rule_wins() {
        // A pattern that matches only part of the DN does not apply.
        let e = name("RULE:CN=([a-z]+)/$1/", "CN=alice,O=Keel").unwrap_err();
        assert_eq!(
            e,
            "No rules apply to CN=alice,O=Keel, rules [RULE:CN=([a-z]+)/$1/]"
        );
        assert_eq!(
            name("RULE:CN=([a-z]+).*/$1/", "CN=alice,O=Keel").unwrap(),
            "alice"
        );
        assert_eq!(
            name("RULE:^CN=(.*?),.*$/$1/,RULE:^(.*)$/other/", "CN=a,O=b").unwrap(),
            "a"
        );
        assert_eq!(
            name("RULE:^O=x$/no/,DEFAULT", "CN=a,O=b").unwrap(),
            "CN=a,O=b"
        );
    }

    #[test]
    fn replacement_groups_as_java_reads_them() {
        // Named groups, `$0`, a literal `\$`, the longest group number that exists, a first
        // digit beyond the groups left literal (Kafka's escapeLiteralBackReferences).
        assert_eq!(
            name(r"RULE:^CN=(?P<cn>\w+),O=(\w+)$/${cn}-$0-\$-$2/", "CN=a,O=b").unwrap(),
            "a-CN=a,O=b-$-b"
        );
        assert_eq!(
            name(r"RULE:^CN=(\w+),O=(\w+)$/$12$3/", "CN=a,O=b").unwrap(),
            "a2$3"
        );
        assert_eq!(name(r"RULE:^CN=(\w+)(x)?$/[$2]/", "CN=a").unwrap(), "[]");
        // Java's replaceAll also rewrites the empty match at the end of an unanchored `(.*)`.
        assert_eq!(name("RULE:(.*)/x$1/", "CN=a").unwrap(), "xCN=ax");
        assert_eq!(name("RULE:^(.*)$/x$1/", "CN=a").unwrap(), "xCN=a");
    }

    #[test]
    fn a_subject_dn_maps_to_user_principal() {
        let m = PrincipalMapper::parse("RULE:^CN=([^,]+),.*$/$1/L").unwrap();
        assert_eq!(
            m.name_of("CN=Client-One,OU=Tests,O=Keel").unwrap(),
            "client-one"
        );
    }
}
