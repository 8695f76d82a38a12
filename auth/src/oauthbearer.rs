//! SASL OAUTHBEARER (RFC 7628) with unsecured JWTs, as Kafka's `OAuthBearerSaslServer` runs it
//! with its default server callback handler, `OAuthBearerUnsecuredValidatorCallbackHandler`
//! (KIP-255). An unsecured JWT carries no signature: whoever reaches the listener names any
//! principal. It is for development and tests, as in Kafka.
//!
//! The exchange ([`OAuthBearerServer`]): the client's initial response (a GS2 header `n,,` or
//! `n,a=<authzid>,`, then `%x01`-separated `key=value` pairs, one of them
//! `auth=Bearer <token>`, ending `%x01%x01`) is parsed ([`parse_client_initial_response`]) and
//! its token validated ([`validate_unsecured_token`]). A valid token ends the exchange with an
//! empty server message and the token's principal. A rejected one is answered with RFC 7628's
//! JSON error challenge (`{"status":"invalid_token"}`); the client replies `%x01` and the
//! exchange fails with that challenge as its message. A malformed message fails at once.
//!
//! The validator reads Kafka's options of the listener's `OAuthBearerLoginModule` JAAS entry
//! ([`UnsecuredValidatorOptions`]). Everything here is a pure function of bytes, options and a
//! clock value the caller passes (`now_ms`, milliseconds since the Unix epoch): no I/O. Inputs
//! are bounded by the caller's frame limit (`sasl.server.max.receive.size`); every step is
//! linear in the input and JSON nesting is bounded by `serde_json`'s recursion limit.

use std::collections::{BTreeMap, BTreeSet};

use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use serde_json::Value;

use crate::jaas::{self, JaasError};

/// The SASL mechanism name.
pub const MECHANISM: &str = "OAUTHBEARER";
/// The login module a listener's `oauthbearer.sasl.jaas.config` names.
pub const LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";
/// Kafka's option names (`OAuthBearerUnsecuredValidatorCallbackHandler`).
pub const PRINCIPAL_CLAIM_NAME_OPTION: &str = "unsecuredValidatorPrincipalClaimName";
pub const SCOPE_CLAIM_NAME_OPTION: &str = "unsecuredValidatorScopeClaimName";
pub const REQUIRED_SCOPE_OPTION: &str = "unsecuredValidatorRequiredScope";
pub const ALLOWABLE_CLOCK_SKEW_MS_OPTION: &str = "unsecuredValidatorAllowableClockSkewMs";

const SEPARATOR: char = '\u{1}';

/// The message of a failure Kafka does not explain to the client (a `SaslException` in its
/// `SaslServerAuthenticator`).
const INVALID_CREDENTIALS: &str = "Authentication failed during authentication due to invalid \
                                   credentials with SASL mechanism OAUTHBEARER";

/// Why an OAUTHBEARER exchange failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OAuthBearerError {
    #[error("Invalid OAUTHBEARER client first message: {0}")]
    Malformed(&'static str),
    #[error(
        "Authentication failed: Client requested an authorization id ({authzid}) that is \
         different from the token's principal name ({principal})"
    )]
    AuthzidMismatch { authzid: String, principal: String },
    /// The client acknowledged the error challenge of a rejected token (`%x01`): the exchange
    /// fails with the challenge as its message, as Kafka's.
    #[error("{0}")]
    TokenRejected(String),
    #[error("Authentication exchange has completed")]
    State,
}

impl OAuthBearerError {
    /// What the broker tells the client in SaslAuthenticate's error message (Kafka's texts: a
    /// malformed message gets its generic one).
    pub fn client_message(&self) -> String {
        match self {
            OAuthBearerError::Malformed(_) | OAuthBearerError::State => {
                INVALID_CREDENTIALS.to_string()
            }
            other => other.to_string(),
        }
    }
}

/// Why a listener's OAUTHBEARER options were refused (at start).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error(transparent)]
    Jaas(#[from] JaasError),
    #[error("JAAS config property contains {0} login modules, should be 1 module")]
    Modules(usize),
    #[error("the login module is {0}; OAUTHBEARER needs {LOGIN_MODULE}")]
    LoginModule(String),
    #[error("{name}: {why}")]
    Invalid { name: &'static str, why: String },
}

/// The unsecured validator's options (Kafka's `unsecuredValidator*` JAAS options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredValidatorOptions {
    /// The claim naming the principal: `sub` unless set.
    pub principal_claim_name: String,
    /// The claim holding the scope (a string or a list of strings): `scope` unless set.
    pub scope_claim_name: String,
    /// Scope items a token must all hold; empty: none.
    pub required_scope: Vec<String>,
    /// Allowed difference between the broker's clock and the token's times (Kafka's int).
    pub allowable_clock_skew_ms: u32,
}

impl Default for UnsecuredValidatorOptions {
    fn default() -> Self {
        UnsecuredValidatorOptions {
            principal_claim_name: "sub".to_string(),
            scope_claim_name: "scope".to_string(),
            required_scope: Vec::new(),
            allowable_clock_skew_ms: 0,
        }
    }
}

impl UnsecuredValidatorOptions {
    /// The options of a listener's `oauthbearer.sasl.jaas.config`: exactly one entry, for
    /// [`LOGIN_MODULE`]. Empty text: the defaults (Kafka would refuse to start without an
    /// entry; its defaults are what an entry without options gives).
    pub fn from_jaas_config(text: &str) -> Result<Self, OptionsError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let entries = jaas::parse(text)?;
        let [entry] = entries.as_slice() else {
            return Err(OptionsError::Modules(entries.len()));
        };
        if entry.login_module != LOGIN_MODULE {
            return Err(OptionsError::LoginModule(entry.login_module.clone()));
        }
        Self::from_options(&entry.options)
    }

    /// The options from a JAAS entry's `key=value` options (others are ignored, as Kafka's
    /// validator ignores the login module's own options).
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self, OptionsError> {
        let mut out = Self::default();
        let get = |name: &str| {
            options
                .get(name)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        if let Some(name) = get(PRINCIPAL_CLAIM_NAME_OPTION) {
            out.principal_claim_name = name.to_string();
        }
        if let Some(name) = get(SCOPE_CLAIM_NAME_OPTION) {
            out.scope_claim_name = name.to_string();
        }
        if let Some(scope) = get(REQUIRED_SCOPE_OPTION) {
            out.required_scope = parse_scope(scope).map_err(|why| OptionsError::Invalid {
                name: REQUIRED_SCOPE_OPTION,
                why,
            })?;
        }
        if let Some(skew) = get(ALLOWABLE_CLOCK_SKEW_MS_OPTION) {
            let invalid = |why: String| OptionsError::Invalid {
                name: ALLOWABLE_CLOCK_SKEW_MS_OPTION,
                why,
            };
            let skew: i32 = skew
                .parse()
                .map_err(|_| invalid(format!("not an int: {skew:?}")))?;
            out.allowable_clock_skew_ms = u32::try_from(skew).map_err(|_| {
                invalid(format!(
                    "Allowable clock skew millis must not be negative: {skew}"
                ))
            })?;
        }
        Ok(out)
    }
}

/// Kafka's `OAuthBearerScopeUtils.parseScope`: items separated by spaces (a comma is part of
/// an item), each of RFC 6749's scope-token characters.
fn parse_scope(space_delimited: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in space_delimited.split(' ').filter(|i| !i.is_empty()) {
        let valid = item
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b));
        if !valid {
            return Err(format!("Invalid scope item: {item}"));
        }
        out.push(item.to_string());
    }
    Ok(out)
}

/// What an OAUTHBEARER client sent first (RFC 7628 §3.1, as Kafka's
/// `OAuthBearerClientInitialResponse` reads it).
#[derive(Debug, PartialEq, Eq)]
pub struct ClientInitialResponse<'a> {
    /// The GS2 header's authorization id; empty when not given. Kept as sent (`=2C` and `=3D`
    /// not decoded), as Kafka compares it.
    pub authzid: &'a str,
    /// The bearer token.
    pub token: &'a str,
    /// SASL extensions: the pairs other than `auth` (a key given twice keeps the last value).
    pub extensions: BTreeMap<&'a str, &'a str>,
}

/// Parses a client initial response: `n,` `[a=<saslname>]` `,` `%x01` then `key=value%x01`
/// pairs (keys `[A-Za-z]+`, values of `%x21-7E`, space, tab, CR and LF) and a final `%x01`;
/// `auth` must be `<scheme> <token>` with scheme `Bearer` (any case) and a token of
/// `[-_.a-zA-Z0-9]`.
pub fn parse_client_initial_response(
    msg: &[u8],
) -> Result<ClientInitialResponse<'_>, OAuthBearerError> {
    use OAuthBearerError::Malformed;
    // Every byte Kafka's pattern accepts is ASCII.
    let text = std::str::from_utf8(msg)
        .ok()
        .filter(|t| t.is_ascii())
        .ok_or(Malformed("not ASCII"))?;
    let rest = text
        .strip_prefix("n,")
        .ok_or(Malformed("no GS2 header `n,`"))?;
    let (authzid, rest) = match rest.strip_prefix("a=") {
        Some(r) => {
            let end = r
                .find(',')
                .ok_or(Malformed("unterminated authorization id"))?;
            if !is_saslname(&r[..end]) {
                return Err(Malformed("invalid authorization id"));
            }
            (&r[..end], &r[end..])
        }
        None => ("", rest),
    };
    let rest = rest
        .strip_prefix(",\u{1}")
        .ok_or(Malformed("no separator after the GS2 header"))?;
    let pairs = rest
        .strip_suffix(SEPARATOR)
        .ok_or(Malformed("no final separator"))?;
    let mut properties = BTreeMap::new();
    if !pairs.is_empty() {
        let pairs = pairs
            .strip_suffix(SEPARATOR)
            .ok_or(Malformed("a key-value pair without its separator"))?;
        for pair in pairs.split(SEPARATOR) {
            let (key, value) = pair
                .split_once('=')
                .ok_or(Malformed("a pair that is not key=value"))?;
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
                return Err(Malformed("invalid key"));
            }
            if value.is_empty() || !value.bytes().all(is_value_byte) {
                return Err(Malformed("invalid value"));
            }
            properties.insert(key, value);
        }
    }
    let auth = properties
        .remove("auth")
        .ok_or(Malformed("'auth' not specified"))?;
    let (scheme, token) = auth
        .split_once(' ')
        .ok_or(Malformed("invalid 'auth' format"))?;
    let token = token.trim_start_matches(' ');
    let scheme_ok = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let token_ok = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !scheme_ok || !token_ok {
        return Err(Malformed("invalid 'auth' format"));
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Malformed("invalid scheme"));
    }
    Ok(ClientInitialResponse {
        authzid,
        token,
        extensions: properties,
    })
}

/// RFC 5801's saslname as Kafka's pattern has it: `%x01-7F` but `=` and `,`, or `=2C`, `=3D`.
fn is_saslname(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'=' => {
                if !matches!(b.get(i + 1..i + 3), Some(b"2C") | Some(b"3D")) {
                    return false;
                }
                i += 3;
            }
            0 | b',' | 0x80.. => return false,
            _ => i += 1,
        }
    }
    !b.is_empty()
}

fn is_value_byte(b: u8) -> bool {
    (0x21..=0x7E).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// A validated unsecured token.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsecuredToken {
    /// The principal claim's value (the name after `User:`).
    pub principal: String,
    /// The scope claim's items, trimmed, blanks left out.
    pub scope: BTreeSet<String>,
    /// `exp` in milliseconds since the Unix epoch.
    pub lifetime_ms: i64,
}

/// Why a token was rejected: the reason (for the broker's log) and, for a missing required
/// scope, the required scope Kafka names in the error challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRejection {
    pub reason: String,
    pub failure_scope: Option<String>,
}

impl TokenRejection {
    fn new(reason: impl Into<String>) -> Self {
        TokenRejection {
            reason: reason.into(),
            failure_scope: None,
        }
    }

    /// RFC 7628's error status: `insufficient_scope` for a missing scope, else `invalid_token`.
    pub fn status(&self) -> &'static str {
        if self.failure_scope.is_some() {
            "insufficient_scope"
        } else {
            "invalid_token"
        }
    }

    /// The server's error challenge, as Kafka's `OAuthBearerSaslServer.jsonErrorResponse`
    /// writes it (the scope holds only scope-token characters: nothing to escape).
    pub fn challenge(&self) -> String {
        match &self.failure_scope {
            None => format!("{{\"status\":\"{}\"}}", self.status()),
            Some(scope) => format!(
                "{{\"status\":\"{}\", \"scope\":\"{scope}\"}}",
                self.status()
            ),
        }
    }
}

/// A claim as Kafka's `OAuthBearerUnsecuredJws` holds it: a JSON number, a list (each element
/// as text) or anything else as text (Jackson's `asText`).
#[derive(Debug, Clone, PartialEq)]
enum Claim {
    Number(f64),
    Text(String),
    List(Vec<String>),
}

impl Claim {
    fn of(value: &Value) -> Claim {
        match value {
            Value::Array(items) => Claim::List(items.iter().map(as_text).collect()),
            Value::Number(n) => Claim::Number(n.as_f64().unwrap_or(f64::NAN)),
            other => Claim::Text(as_text(other)),
        }
    }

    /// Java's simple class name, for the error texts.
    fn kind(&self) -> &'static str {
        match self {
            Claim::Number(_) => "Number",
            Claim::Text(_) => "String",
            Claim::List(_) => "List",
        }
    }
}

/// Jackson's `JsonNode.asText()`.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

type Claims = BTreeMap<String, Claim>;

/// Decodes one base64url part of a compact serialization into its JSON object's members (a
/// JSON value that is not an object has none, as Jackson's `fields()`).
fn decode_part(part: &str) -> Result<Claims, TokenRejection> {
    const BASE64URL: GeneralPurpose = GeneralPurpose::new(
        &URL_SAFE,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let bytes = BASE64URL
        .decode(part)
        .map_err(|_| TokenRejection::new("malformed Base64 URL encoded value"))?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|_| TokenRejection::new("malformed JSON"))?;
    Ok(match value {
        Value::Object(members) => members
            .iter()
            .map(|(k, v)| (k.clone(), Claim::of(v)))
            .collect(),
        _ => Claims::new(),
    })
}

/// A claim of the wanted kind, or none; another kind rejects the token.
fn claim<'c>(
    claims: &'c Claims,
    name: &str,
    kind: &'static str,
) -> Result<Option<&'c Claim>, TokenRejection> {
    match claims.get(name) {
        Some(c) if c.kind() != kind => Err(TokenRejection::new(format!(
            "The '{name}' claim was not of type {kind}: {}",
            c.kind()
        ))),
        other => Ok(other),
    }
}

fn number(claims: &Claims, name: &str) -> Result<Option<f64>, TokenRejection> {
    Ok(match claim(claims, name, "Number")? {
        Some(Claim::Number(n)) => Some(*n),
        _ => None,
    })
}

/// Validates an unsecured JWS compact serialization at `now_ms` as Kafka's
/// `OAuthBearerUnsecuredJws` and `OAuthBearerUnsecuredValidatorCallbackHandler` do, in their
/// order: three dot-separated base64url parts, the last (the signature) empty; a header with
/// `"alg":"none"`; a scope claim that is a string or a list; `exp` a number of seconds; the
/// principal claim a non-blank string; `iat` (optional) a number no later than now plus the
/// skew; now minus the skew before `exp`; `exp` after `iat`; every required scope item in the
/// token's scope.
pub fn validate_unsecured_token(
    token: &str,
    options: &UnsecuredValidatorOptions,
    now_ms: i64,
) -> Result<UnsecuredToken, TokenRejection> {
    if token.contains("..") {
        return Err(TokenRejection::new(
            "Malformed compact serialization contains '..'",
        ));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return Err(TokenRejection::new(
            "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded \
             values",
        ));
    };
    let header = decode_part(header)?;
    let claims = decode_part(claims)?;
    match header.get("alg") {
        None => {
            return Err(TokenRejection::new(
                "JWS header must have an Algorithm value",
            ))
        }
        Some(Claim::Text(alg)) if alg == "none" => {}
        Some(_) => {
            return Err(TokenRejection::new(
                "Unsecured JWS must have 'none' for an algorithm",
            ))
        }
    }
    if !signature.is_empty() {
        return Err(TokenRejection::new(
            "Unsecured JWS must not contain a digital signature",
        ));
    }
    let scope = scope_of(&claims, &options.scope_claim_name)?;
    let exp =
        number(&claims, "exp")?.ok_or_else(|| TokenRejection::new("No expiration time in JWT"))?;
    let principal = match claim(&claims, &options.principal_claim_name, "String")? {
        Some(Claim::Text(p)) if !p.trim().is_empty() => p.clone(),
        _ => {
            return Err(TokenRejection::new(format!(
                "No principal name in JWT claim: {}",
                options.principal_claim_name
            )))
        }
    };
    let iat = number(&claims, "iat")?;
    let skew_ms = i64::from(options.allowable_clock_skew_ms);
    if let Some(iat) = iat {
        if 1000.0 * iat > now_ms.saturating_add(skew_ms) as f64 {
            return Err(TokenRejection::new(format!(
                "The Issued At value ({iat:.6} seconds) was after the indicated time ({now_ms} \
                 ms) plus allowable clock skew ({skew_ms} ms)"
            )));
        }
    }
    if now_ms.saturating_sub(skew_ms) as f64 >= 1000.0 * exp {
        return Err(TokenRejection::new(format!(
            "The indicated time ({now_ms} ms) minus allowable clock skew ({skew_ms} ms) was on \
             or after the Expiration Time value ({exp:.6} seconds)"
        )));
    }
    if let Some(iat) = iat {
        if exp <= iat {
            return Err(TokenRejection::new(format!(
                "The Expiration Time time ({exp:.6} seconds) was not after the Issued At time \
                 ({iat:.6} seconds)"
            )));
        }
    }
    if let Some(missing) = options
        .required_scope
        .iter()
        .find(|s| !scope.contains(s.as_str()))
    {
        let required = format!("[{}]", options.required_scope.join(", "));
        let provided = format!(
            "[{}]",
            scope
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Err(TokenRejection {
            reason: format!(
                "The provided scope ({provided}) was missing a required scope ({missing}).  All \
                 required scope elements: {required}"
            ),
            failure_scope: Some(required),
        });
    }
    Ok(UnsecuredToken {
        principal,
        scope,
        // Java's Math.round of a double to a long (saturating, as Rust's cast).
        lifetime_ms: (exp * 1000.0).round() as i64,
    })
}

/// Kafka's `calculateScope`: a string claim is one item, a list's items each; trimmed, blanks
/// left out; no claim, no scope; any other kind rejects the token.
fn scope_of(claims: &Claims, name: &str) -> Result<BTreeSet<String>, TokenRejection> {
    let items: Vec<&String> = match claims.get(name) {
        None => Vec::new(),
        Some(Claim::Text(s)) => vec![s],
        Some(Claim::List(items)) => items.iter().collect(),
        Some(other) => {
            return Err(TokenRejection::new(format!(
                "The '{name}' claim was not of type List: {}",
                other.kind()
            )))
        }
    };
    Ok(items
        .into_iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// What one client message leads to.
#[derive(Debug, PartialEq)]
pub enum ServerStep {
    /// The token was rejected: send `challenge` (RFC 7628's JSON error); the client is to
    /// answer `%x01`, which fails the exchange. `reason` is for the broker's log.
    Challenge { challenge: Vec<u8>, reason: String },
    /// Authenticated as `token.principal`; the server's last message is empty.
    Done(UnsecuredToken),
}

/// One OAUTHBEARER exchange on the broker (Kafka's `OAuthBearerSaslServer` with the unsecured
/// validator).
#[derive(Debug)]
pub struct OAuthBearerServer {
    options: UnsecuredValidatorOptions,
    /// The error challenge last sent, until the client's next message.
    error_challenge: Option<String>,
    complete: bool,
}

impl OAuthBearerServer {
    pub fn new(options: UnsecuredValidatorOptions) -> Self {
        OAuthBearerServer {
            options,
            error_challenge: None,
            complete: false,
        }
    }

    /// Evaluates a client message at `now_ms`. After an error challenge, `%x01` fails the
    /// exchange with it; any other message is a new initial response (as Kafka's).
    pub fn evaluate_response(
        &mut self,
        msg: &[u8],
        now_ms: i64,
    ) -> Result<ServerStep, OAuthBearerError> {
        if self.complete {
            return Err(OAuthBearerError::State);
        }
        if let Some(challenge) = self.error_challenge.take() {
            if msg == [0x01] {
                self.complete = true;
                return Err(OAuthBearerError::TokenRejected(challenge));
            }
        }
        let response = parse_client_initial_response(msg)?;
        match validate_unsecured_token(response.token, &self.options, now_ms) {
            Err(rejection) => {
                let challenge = rejection.challenge();
                self.error_challenge = Some(challenge.clone());
                Ok(ServerStep::Challenge {
                    challenge: challenge.into_bytes(),
                    reason: rejection.reason,
                })
            }
            Ok(token) => {
                if !response.authzid.is_empty() && response.authzid != token.principal {
                    return Err(OAuthBearerError::AuthzidMismatch {
                        authzid: response.authzid.to_string(),
                        principal: token.principal,
                    });
                }
                // Extensions: the unsecured validator accepts every one and uses none.
                self.complete = true;
                Ok(ServerStep::Done(token))
            }
        }
    }
}

/// A client's initial response carrying `token` (for tests and Keel's own clients).
pub fn client_initial_response(authzid: &str, token: &str) -> Vec<u8> {
    let header = if authzid.is_empty() {
        "n,,".to_string()
    } else {
        format!("n,a={authzid},")
    };
    format!("{header}\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
}

/// An unsecured JWS compact serialization of `claims` (a JSON object), as Kafka's
/// `OAuthBearerUnsecuredLoginCallbackHandler` and librdkafka build them.
pub fn unsecured_token(claims: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.",
        b64.encode(r#"{"alg":"none"}"#),
        b64.encode(claims)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_700_000_000_000;
    const NOW_S: i64 = NOW_MS / 1000;

    fn token(claims: &str) -> String {
        unsecured_token(claims)
    }

    fn options() -> UnsecuredValidatorOptions {
        UnsecuredValidatorOptions::default()
    }

    fn rejected(token: &str, options: &UnsecuredValidatorOptions) -> TokenRejection {
        validate_unsecured_token(token, options, NOW_MS).unwrap_err()
    }

    #[test]
    fn parses_the_client_initial_response() {
        let m = parse_client_initial_response(b"n,,\x01auth=Bearer abc.def.\x01\x01").unwrap();
        assert_eq!(m.authzid, "");
        assert_eq!(m.token, "abc.def.");
        assert!(m.extensions.is_empty());
        let m = parse_client_initial_response(
            b"n,a=al=2Cice,\x01traceId=x y=z\x01auth=bearer   t\x01auth=BEARER u\x01\x01",
        )
        .unwrap();
        assert_eq!(m.authzid, "al=2Cice");
        assert_eq!(m.token, "u", "a key given twice keeps its last value");
        assert_eq!(m.extensions.get("traceId"), Some(&"x y=z"));
        assert_eq!(
            parse_client_initial_response(&client_initial_response("bob", "a.b.")).unwrap(),
            ClientInitialResponse {
                authzid: "bob",
                token: "a.b.",
                extensions: BTreeMap::new()
            }
        );
    }

    #[test]
    fn refuses_malformed_client_messages() {
        for bad in [
            &b""[..],
            b"\x01",
            b"y,,\x01auth=Bearer t\x01\x01",
            b"n,\x01auth=Bearer t\x01\x01",
            b"n,,auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01auth=Bearer t",
            b"n,,\x01\x01",
            b"n,,\x01x=1\x01\x01",
            b"n,a=,\x01auth=Bearer t\x01\x01",
            b"n,a=a=2,\x01auth=Bearer t\x01\x01",
            b"n,a=a\x00,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01auth=Bearer\x01\x01",
            b"n,,\x01auth=Bearer \x01\x01",
            b"n,,\x01auth=Bearer t+/=\x01\x01",
            b"n,,\x01auth=Bearer t u\x01\x01",
            b"n,,\x01auth=Bearer t\x01k1=v\x01\x01",
            b"n,,\x01auth=Bearer t\x01k=\x01\x01",
            b"n,,\x01auth=Bearer t\x01=v\x01\x01",
            b"n,,\x01auth=Bearer t\x01k=\x7f\x01\x01",
            b"n,,\x01auth=Bearer t\x01\x01\x01",
            b"n,,\x01auth=Bearer \xc3\xa9\x01\x01",
            b"n,,\x01auth=Bearer t\x01\x01trailing",
        ] {
            assert!(
                matches!(
                    parse_client_initial_response(bad),
                    Err(OAuthBearerError::Malformed(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_good_token_names_its_principal_and_scope() {
        let t = token(&format!(
            r#"{{"sub":"alice","iat":{},"exp":{}.5,"scope":["read"," write ",""]}}"#,
            NOW_S - 10,
            NOW_S + 60
        ));
        let ok = validate_unsecured_token(&t, &options(), NOW_MS).unwrap();
        assert_eq!(ok.principal, "alice");
        assert_eq!(
            ok.scope,
            BTreeSet::from(["read".to_string(), "write".to_string()])
        );
        assert_eq!(ok.lifetime_ms, (NOW_S + 60) * 1000 + 500);
        // librdkafka's tokens: fractional seconds, a string scope is one item.
        let t = token(&format!(
            r#"{{"iat":{}.123,"exp":{}.123,"sub":"bob","scope":"a b"}}"#,
            NOW_S,
            NOW_S + 3600
        ));
        let ok = validate_unsecured_token(&t, &options(), NOW_MS + 200).unwrap();
        assert_eq!(ok.scope, BTreeSet::from(["a b".to_string()]));
        // Padding is accepted where a token has it.
        let padded = format!(
            "eyJhbGciOiJub25lIn0=.{}.",
            base64::engine::general_purpose::URL_SAFE
                .encode(format!(r#"{{"sub":"c","exp":{}}}"#, NOW_S + 1))
        );
        assert_eq!(
            validate_unsecured_token(&padded, &options(), NOW_MS)
                .unwrap()
                .principal,
            "c"
        );
    }

    #[test]
    fn expired_tokens_and_the_clock_skew() {
        let exp = token(&format!(r#"{{"sub":"alice","exp":{NOW_S}}}"#));
        let r = rejected(&exp, &options());
        assert!(
            r.reason.contains("on or after the Expiration Time"),
            "{r:?}"
        );
        assert_eq!(r.challenge(), r#"{"status":"invalid_token"}"#);
        let mut skewed = options();
        skewed.allowable_clock_skew_ms = 1;
        assert!(validate_unsecured_token(&exp, &skewed, NOW_MS).is_ok());
        assert!(validate_unsecured_token(&exp, &skewed, NOW_MS + 1).is_err());
        // Issued in the future: refused beyond the skew.
        let future = token(&format!(
            r#"{{"sub":"alice","iat":{},"exp":{}}}"#,
            NOW_S + 2,
            NOW_S + 60
        ));
        let r = rejected(&future, &options());
        assert!(r.reason.contains("Issued At"), "{r:?}");
        skewed.allowable_clock_skew_ms = 2000;
        assert!(validate_unsecured_token(&future, &skewed, NOW_MS).is_ok());
        // exp not after iat.
        let t = token(&format!(
            r#"{{"sub":"alice","iat":{},"exp":{}}}"#,
            NOW_S + 1,
            NOW_S + 1
        ));
        let r = validate_unsecured_token(&t, &skewed, NOW_MS).unwrap_err();
        assert!(r.reason.contains("was not after the Issued At"), "{r:?}");
    }

    #[test]
    fn refuses_what_kafka_refuses() {
        let exp = NOW_S + 60;
        let claims = format!(r#"{{"sub":"alice","exp":{exp}}}"#);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let cases: Vec<(String, &str)> = vec![
            (
                format!(
                    "{}.{}.",
                    b64.encode(r#"{"alg":"HS256"}"#),
                    b64.encode(&claims)
                ),
                "'none' for an algorithm",
            ),
            (
                format!(
                    "{}.{}.",
                    b64.encode(r#"{"typ":"JWT"}"#),
                    b64.encode(&claims)
                ),
                "must have an Algorithm",
            ),
            (
                format!(
                    "{}.{}.",
                    b64.encode(r#"{"alg":["none"]}"#),
                    b64.encode(&claims)
                ),
                "'none' for an algorithm",
            ),
            (
                format!("{}sig", token(&claims)),
                "must not contain a digital signature",
            ),
            (
                token(&claims).trim_end_matches('.').to_string(),
                "3 dot-separated",
            ),
            (format!("{}.", token(&claims)), "contains '..'"),
            (format!("a.{}", token(&claims)), "3 dot-separated"),
            (
                format!("{}.{}.", b64.encode("{\"alg\":\"none\"}"), "a"),
                "Base64",
            ),
            (
                format!("{}.{}.", b64.encode("{\"alg\":\"none\"}"), "a$b"),
                "Base64",
            ),
            (
                format!(
                    "{}.{}.",
                    b64.encode("{\"alg\":\"none\""),
                    b64.encode(&claims)
                ),
                "malformed JSON",
            ),
            (
                token(&format!(r#"{{"sub":"alice","exp":{exp}}} x"#)),
                "malformed JSON",
            ),
            (
                token(&format!(r#"{{"exp":{exp}}}"#)),
                "No principal name in JWT claim: sub",
            ),
            (
                token(&format!(r#"{{"sub":"  ","exp":{exp}}}"#)),
                "No principal name",
            ),
            (
                token(&format!(r#"{{"sub":7,"exp":{exp}}}"#)),
                "'sub' claim was not of type String",
            ),
            (
                token(&format!(r#"{{"sub":["a"],"exp":{exp}}}"#)),
                "not of type String",
            ),
            (token(r#"{"sub":"alice"}"#), "No expiration time"),
            (
                token(&format!(r#"{{"sub":"alice","exp":"{exp}"}}"#)),
                "'exp' claim was not of type Number",
            ),
            (
                token(&format!(r#"{{"sub":"alice","exp":{exp},"iat":"1"}}"#)),
                "'iat' claim was not of type Number",
            ),
            (
                token(&format!(r#"{{"sub":"alice","exp":{exp},"scope":5}}"#)),
                "'scope' claim was not of type List",
            ),
            (token("[1,2]"), "No expiration time"),
            (token(&"[".repeat(10_000)), "malformed JSON"),
        ];
        for (t, why) in cases {
            let r = rejected(&t, &options());
            assert!(r.reason.contains(why), "{t}: {r:?}, wanted {why}");
            assert_eq!(r.status(), "invalid_token");
        }
    }

    #[test]
    fn claim_names_and_required_scope_come_from_the_options() {
        let o = UnsecuredValidatorOptions::from_jaas_config(&format!(
            "{LOGIN_MODULE} required unsecuredValidatorPrincipalClaimName=\"user\" \
             unsecuredValidatorScopeClaimName=\"perms\" unsecuredValidatorRequiredScope=\" a  b,c \" \
             unsecuredValidatorAllowableClockSkewMs=\"1500\" unsecuredLoginStringClaim_sub=\"x\";"
        ))
        .unwrap();
        assert_eq!(
            o,
            UnsecuredValidatorOptions {
                principal_claim_name: "user".into(),
                scope_claim_name: "perms".into(),
                required_scope: vec!["a".into(), "b,c".into()],
                allowable_clock_skew_ms: 1500,
            }
        );
        let exp = NOW_S + 60;
        let good = token(&format!(
            r#"{{"user":"carol","exp":{exp},"perms":["a","b,c","d"]}}"#
        ));
        assert_eq!(
            validate_unsecured_token(&good, &o, NOW_MS)
                .unwrap()
                .principal,
            "carol"
        );
        let short = token(&format!(r#"{{"user":"carol","exp":{exp},"perms":"a"}}"#));
        let r = rejected(&short, &o);
        assert_eq!(r.status(), "insufficient_scope");
        assert_eq!(r.failure_scope.as_deref(), Some("[a, b,c]"));
        assert_eq!(
            r.challenge(),
            r#"{"status":"insufficient_scope", "scope":"[a, b,c]"}"#
        );
        assert!(r.reason.contains("missing a required scope (b,c)"), "{r:?}");
        let none = token(&format!(r#"{{"user":"carol","exp":{exp}}}"#));
        assert_eq!(rejected(&none, &o).status(), "insufficient_scope");
        // The default `sub` is not read when another claim names the principal.
        let sub = token(&format!(
            r#"{{"sub":"carol","exp":{exp},"perms":["a","b,c"]}}"#
        ));
        assert!(rejected(&sub, &o)
            .reason
            .contains("No principal name in JWT claim: user"));

        assert_eq!(
            UnsecuredValidatorOptions::from_jaas_config("").unwrap(),
            UnsecuredValidatorOptions::default()
        );
        for bad in [
            format!("{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs=\"-1\";"),
            format!("{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs=\"1s\";"),
            format!("{LOGIN_MODULE} required unsecuredValidatorRequiredScope=\"a\\\"b\";"),
            format!("{LOGIN_MODULE} required; {LOGIN_MODULE} required;"),
            "org.apache.kafka.common.security.plain.PlainLoginModule required;".to_string(),
            format!("{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs=5;"),
        ] {
            assert!(
                UnsecuredValidatorOptions::from_jaas_config(&bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_exchange_answers_a_bad_token_with_a_challenge_then_fails() {
        let exp = NOW_S + 60;
        let mut server = OAuthBearerServer::new(options());
        let expired = client_initial_response("", &token(r#"{"sub":"alice","exp":1}"#));
        let step = server.evaluate_response(&expired, NOW_MS).unwrap();
        let ServerStep::Challenge { challenge, reason } = step else {
            panic!("{step:?}")
        };
        assert_eq!(challenge, br#"{"status":"invalid_token"}"#);
        assert!(reason.contains("Expiration"), "{reason}");
        let failed = server.evaluate_response(b"\x01", NOW_MS).unwrap_err();
        assert_eq!(
            failed,
            OAuthBearerError::TokenRejected(r#"{"status":"invalid_token"}"#.into())
        );
        assert_eq!(failed.client_message(), r#"{"status":"invalid_token"}"#);
        assert_eq!(
            server.evaluate_response(b"\x01", NOW_MS),
            Err(OAuthBearerError::State)
        );

        // A `%x01` with no challenge pending is a malformed message.
        let mut server = OAuthBearerServer::new(options());
        let e = server.evaluate_response(b"\x01", NOW_MS).unwrap_err();
        assert!(matches!(e, OAuthBearerError::Malformed(_)));
        assert_eq!(e.client_message(), INVALID_CREDENTIALS);

        // After a challenge, a new initial response is evaluated afresh (as Kafka's).
        let good = client_initial_response(
            "alice",
            &token(&format!(r#"{{"sub":"alice","exp":{exp}}}"#)),
        );
        let mut server = OAuthBearerServer::new(options());
        assert!(matches!(
            server.evaluate_response(&expired, NOW_MS),
            Ok(ServerStep::Challenge { .. })
        ));
        let Ok(ServerStep::Done(t)) = server.evaluate_response(&good, NOW_MS) else {
            panic!("a good token after a challenge")
        };
        assert_eq!(t.principal, "alice");
        assert_eq!(
            server.evaluate_response(&good, NOW_MS),
            Err(OAuthBearerError::State)
        );

        // An authorization id other than the principal fails.
        let other =
            client_initial_response("bob", &token(&format!(r#"{{"sub":"alice","exp":{exp}}}"#)));
        let e = OAuthBearerServer::new(options())
            .evaluate_response(&other, NOW_MS)
            .unwrap_err();
        assert!(matches!(e, OAuthBearerError::AuthzidMismatch { .. }));
        assert!(e.client_message().contains("(bob)"), "{e}");
    }

    #[test]
    fn a_huge_message_is_linear_work() {
        // The broker caps a frame at sasl.server.max.receive.size (512 KiB by default); a
        // message of that size parses and validates in one pass.
        let exp = NOW_S + 60;
        let big = "x".repeat(500_000);
        let t = token(&format!(r#"{{"sub":"alice","exp":{exp},"pad":"{big}"}}"#));
        let msg = client_initial_response("", &t);
        let Ok(ServerStep::Done(ok)) =
            OAuthBearerServer::new(options()).evaluate_response(&msg, NOW_MS)
        else {
            panic!("a big token is still a token")
        };
        assert_eq!(ok.principal, "alice");
        let mut msg = vec![b'n', b',', b',', 1];
        msg.extend(std::iter::repeat_n(b'a', 500_000));
        assert!(parse_client_initial_response(&msg).is_err());
    }

    /// A good message with bytes replaced at random, and arbitrary bytes: never a panic, and a
    /// login only with a non-blank principal.
    fn evaluate_never_panics(msg: &[u8]) {
        let mut server = OAuthBearerServer::new(UnsecuredValidatorOptions {
            required_scope: vec!["kafka".into()],
            ..UnsecuredValidatorOptions::default()
        });
        if let Ok(ServerStep::Done(t)) = server.evaluate_response(msg, NOW_MS) {
            assert!(!t.principal.trim().is_empty());
            assert!(t.scope.contains("kafka"));
        }
        let _ = server.evaluate_response(b"\x01", NOW_MS);
        let _ = jaas::parse(&String::from_utf8_lossy(msg));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_messages_never_panic(
            junk in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 0..8),
        ) {
            evaluate_never_panics(&junk);
            let mut msg = client_initial_response(
                "",
                &token(&format!(r#"{{"sub":"alice","exp":{},"scope":["kafka"]}}"#, NOW_S + 60)),
            );
            for (at, byte) in edits {
                let at = at % msg.len();
                msg[at] = byte;
            }
            evaluate_never_panics(&msg);
        }
    }
}
