//! Why a request got no usable answer. Each transport names the peer (`addr`) where it knows
//! it; the sans-I/O core does not.

use kafka_protocol::messages::ApiKey;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("talking to {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} did not answer within {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    #[error("connection to {addr} is closed: {reason}")]
    Closed { addr: String, reason: String },
    /// The TLS handshake failed, or the address names no host TLS can check.
    #[error("TLS with {addr}: {reason}")]
    Tls { addr: String, reason: String },
    /// A PEM file for TLS cannot be read or used.
    #[error("TLS configuration {path}: {reason}")]
    TlsConfig { path: String, reason: String },
    /// The broker refused the SASL login: SaslHandshake (the mechanism) or SaslAuthenticate
    /// (the credentials) answered `error_code` with `message`.
    #[error("{addr}: SASL login of {username} failed (error {}): {}: {message}", .error_code.code(), .error_code.name())]
    Authentication {
        addr: String,
        mechanism: String,
        username: String,
        error_code: keel_vocab::ErrorCode,
        message: String,
    },
    /// The login could not go on on the client's side: an unknown mechanism, or the broker's
    /// part of the exchange is not what the mechanism requires (SCRAM: its nonce, its
    /// iteration count, its signature, which proves it holds the user's ServerKey).
    #[error("SASL {mechanism} login with {addr}: {reason}")]
    Sasl {
        addr: String,
        mechanism: String,
        reason: String,
    },
    #[error("encoding {api:?} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    /// The answer's size prefix is outside `4..=max`.
    #[error("response frame of {size} bytes is outside 4..={max}")]
    FrameSize { size: i32, max: usize },
    /// The answer's header does not decode.
    #[error("cannot decode the response header of {api:?} v{version}: {reason}")]
    Header {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("response correlation id {got} for request {expected}")]
    CorrelationId { expected: i32, got: i32 },
    /// The answer's body does not decode at the version asked.
    #[error("cannot decode the response of {api:?} v{version}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    /// No version of `api` in the client's range is one the broker serves.
    #[error("{addr} does not support {api:?} v{client_min}-v{client_max} (broker: {})", advertised_text(.advertised))]
    Unsupported {
        addr: String,
        api: ApiKey,
        /// The broker's range, `None` when it does not advertise the API.
        advertised: Option<(i16, i16)>,
        client_min: i16,
        client_max: i16,
    },
    /// The broker answered ApiVersions with an error.
    #[error("{addr} answered ApiVersions with error {error_code}")]
    ApiVersions {
        addr: String,
        error_code: keel_vocab::ErrorCode,
    },
}

fn advertised_text(advertised: &Option<(i16, i16)>) -> String {
    match advertised {
        Some((min, max)) => format!("v{min}-v{max}"),
        None => "not advertised".to_string(),
    }
}
