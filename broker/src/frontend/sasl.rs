//! SASL authentication of a connection to a SASL listener, before any other request (Kafka's
//! `SaslServerAuthenticator`).
//!
//! Until the connection is authenticated it may send ApiVersions, then SaslHandshake (v0-1),
//! then the mechanism's messages: in SaslAuthenticate requests after a v1 handshake, or as
//! bare length-prefixed tokens after a v0 handshake (Kafka's legacy framing, which Sarama's
//! PLAIN login below its `V1_0_0_0` uses). Anything else closes the connection without an
//! answer, so an unauthenticated client learns nothing but the API list. Frames are capped at
//! `sasl.server.max.receive.size`; the whole exchange at
//! `sasl.server.authentication.timeout.ms`. A failure (a wrong password and an unknown user
//! alike) is answered with SASL_AUTHENTICATION_FAILED after
//! `connection.failed.authentication.delay.ms`, and the connection closes.
//!
//! Credentials are the SCRAM credentials in the metadata image (AlterUserScramCredentials):
//! SCRAM-SHA-256/512 run RFC 5802 against them; PLAIN derives the salted password from the
//! password it is given (PBKDF2, run in slices on the shard's `auth` task queue so that a
//! burst of logins does not hold up produce and fetch) and compares StoredKeys. OAUTHBEARER
//! checks an unsecured JWT with keel-auth's validator and the listener's options, against the
//! wall clock: a rejected token gets RFC 7628's JSON error challenge, the client's `%x01`
//! answer then fails the login as the others do.

use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::AsyncReadExt;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::ResponseError;
use keel_auth::oauthbearer::{OAuthBearerError, OAuthBearerServer, ServerStep};
use keel_auth::scram::{self, Mechanism, ScramCredential, ScramServer};

use crate::config::{Listener, SaslMechanism};
use crate::frontend::dispatch::{self, Framed, Reply};
use crate::frontend::framing::{decode_body, encode_response, str_bytes, Frame};
use crate::frontend::io::{read_frame, send_frames, ReadSide, WriteSide};
use crate::security::Session;
use crate::shard::BrokerShard;

/// PBKDF2 iterations computed between two yields of the `auth` task queue (about 0.1 ms).
const PBKDF2_SLICE: u32 = 256;

/// Where an exchange stands.
enum Phase {
    /// Before the handshake: ApiVersions and SaslHandshake are allowed.
    Start,
    /// After the handshake: the mechanism's first message is due. `raw`: tokens come bare
    /// (handshake v0), not in SaslAuthenticate requests.
    Handshaken { mechanism: SaslMechanism, raw: bool },
    /// SCRAM, after the server-first message: the client-final message is due.
    ScramFinal { server: Box<ScramServer>, raw: bool },
    /// OAUTHBEARER, after an error challenge: the client's `%x01` (or a new token) is due.
    /// `rejected`: why the token was refused, for the log.
    OAuthBearer {
        server: Box<OAuthBearerServer>,
        raw: bool,
        rejected: String,
    },
}

/// What one mechanism message leads to.
enum Step {
    /// Send this and wait for the next message.
    Continue(Vec<u8>),
    /// Authenticated as this user; send the last server message.
    Done(Vec<u8>, String),
    /// Failed: what the client is told, and why (for the log).
    Failed(String, String),
}

/// Authenticates a connection on a SASL listener (`session` is its identity before, the
/// anonymous one): `Ok(user)` once a mechanism succeeds,
/// `Err(why)` when the connection is to close (a refusal already answered, a request that
/// is not allowed yet, a timeout, the peer gone, shutdown).
pub(crate) async fn authenticate(
    shard: &Rc<BrokerShard>,
    reader: &mut BufReader<ReadSide>,
    out: &mut WriteSide,
    listener: &Listener,
    session: &Session,
) -> Result<String, String> {
    let timeout = Duration::from_millis(shard.config.sasl_server_authentication_timeout_ms);
    futures_lite::future::or(exchange(shard, reader, out, listener, session), async {
        futures_lite::future::or(glommio::timer::sleep(timeout), shard.shutdown.wait()).await;
        Err(if shard.shutdown.is_fired() {
            "shutting down".to_string()
        } else {
            format!("not authenticated within {} ms", timeout.as_millis())
        })
    })
    .await
}

async fn exchange(
    shard: &Rc<BrokerShard>,
    reader: &mut BufReader<ReadSide>,
    out: &mut WriteSide,
    listener: &Listener,
    session: &Session,
) -> Result<String, String> {
    let max = shard.config.sasl_server_max_receive_size;
    let mut phase = Phase::Start;
    loop {
        let raw = matches!(
            phase,
            Phase::Handshaken { raw: true, .. }
                | Phase::ScramFinal { raw: true, .. }
                | Phase::OAuthBearer { raw: true, .. }
        );
        let frame = read_limited(reader, max, raw).await?;
        shard.counters.add_bytes_in(frame.len() + 4);
        if raw {
            let step = step(shard, listener, &mut phase, &frame).await;
            match step {
                Step::Continue(token) => send(out, raw_frame(&token)).await?,
                Step::Done(token, user) => {
                    send(out, raw_frame(&token)).await?;
                    return Ok(user);
                }
                Step::Failed(_, why) => {
                    failure_delay(shard).await;
                    return Err(why);
                }
            }
            continue;
        }
        let (api, hdr, mut body) = match dispatch::frame(frame) {
            Framed::Request { api, hdr, body } => (api, hdr, body),
            Framed::ApiVersionsFallback { correlation_id } if matches!(phase, Phase::Start) => {
                let answer = dispatch::api_versions_fallback(shard, correlation_id);
                send_reply(out, answer).await?;
                continue;
            }
            Framed::ApiVersionsFallback { .. } => {
                return Err("ApiVersions after the SASL handshake".to_string())
            }
            Framed::Unsupported { api, .. } => {
                return Err(format!(
                    "{} before authentication",
                    api.map_or("an unknown API".to_string(), |a| format!("{a:?}"))
                ))
            }
            Framed::Malformed(e) => return Err(e.to_string()),
        };
        shard.counters.count_request(Some(api));
        let version = hdr.request_api_version;
        match (api, &phase) {
            (ApiKey::ApiVersions, Phase::Start) => {
                let answer = crate::handlers::call(shard, &hdr, api, &mut body, session)
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(frame) = answer {
                    send(out, frame).await?;
                }
            }
            (ApiKey::SaslHandshake, Phase::Start) => {
                let req: SaslHandshakeRequest =
                    decode_body(api, version, &mut body).map_err(|e| e.to_string())?;
                let asked = req.mechanism.to_string();
                let offered = listener.sasl_mechanisms.iter().copied();
                let mut resp = SaslHandshakeResponse::default()
                    .with_mechanisms(offered.clone().map(|m| str_bytes(m.name())).collect());
                let chosen = listener
                    .sasl_mechanisms
                    .iter()
                    .copied()
                    .find(|m| m.name() == asked);
                if chosen.is_none() {
                    resp.error_code = ResponseError::UnsupportedSaslMechanism.code();
                }
                send(out, encode(api, &hdr, &resp)?).await?;
                let Some(mechanism) = chosen else {
                    return Err(format!("SASL mechanism {asked:?} is not enabled"));
                };
                phase = Phase::Handshaken {
                    mechanism,
                    raw: version == 0,
                };
            }
            (ApiKey::SaslAuthenticate, Phase::Start) => {
                let resp = SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_error_message(Some(str_bytes(
                        "SaslAuthenticate before SaslHandshake".to_string(),
                    )));
                send(out, encode(api, &hdr, &resp)?).await?;
                return Err("SaslAuthenticate before SaslHandshake".to_string());
            }
            (ApiKey::SaslAuthenticate, _) => {
                let req: SaslAuthenticateRequest =
                    decode_body(api, version, &mut body).map_err(|e| e.to_string())?;
                match step(shard, listener, &mut phase, &req.auth_bytes).await {
                    Step::Continue(token) => {
                        let resp =
                            SaslAuthenticateResponse::default().with_auth_bytes(token.into());
                        send(out, encode(api, &hdr, &resp)?).await?;
                    }
                    Step::Done(token, user) => {
                        // No re-authentication (KIP-368 is out of scope): no session lifetime.
                        let resp =
                            SaslAuthenticateResponse::default().with_auth_bytes(token.into());
                        send(out, encode(api, &hdr, &resp)?).await?;
                        return Ok(user);
                    }
                    Step::Failed(message, why) => {
                        failure_delay(shard).await;
                        let resp = SaslAuthenticateResponse::default()
                            .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                            .with_error_message(Some(str_bytes(message)));
                        send(out, encode(api, &hdr, &resp)?).await?;
                        return Err(why);
                    }
                }
            }
            (api, _) => return Err(format!("{api:?} before authentication")),
        }
    }
}

/// Runs the mechanism on one client message.
async fn step(shard: &Rc<BrokerShard>, listener: &Listener, phase: &mut Phase, msg: &[u8]) -> Step {
    match std::mem::replace(phase, Phase::Start) {
        Phase::Handshaken {
            mechanism: SaslMechanism::Plain,
            ..
        } => plain(shard, msg).await,
        Phase::Handshaken {
            mechanism: SaslMechanism::OAuthBearer,
            raw,
        } => {
            let options = listener.oauthbearer.clone().unwrap_or_default();
            let server = Box::new(OAuthBearerServer::new(options));
            oauthbearer(phase, server, raw, None, msg)
        }
        Phase::OAuthBearer {
            server,
            raw,
            rejected,
        } => oauthbearer(phase, server, raw, Some(rejected), msg),
        Phase::Handshaken {
            mechanism: SaslMechanism::Scram(mech),
            raw,
        } => {
            let mut server = Box::new(ScramServer::new(
                mech,
                scram::random_nonce(24),
                mock_secret(),
            ));
            let image = shard.image();
            let first = server.client_first(msg, |user| credential_of(&image, user, mech));
            match first {
                Ok(server_first) => {
                    *phase = Phase::ScramFinal { server, raw };
                    Step::Continue(server_first)
                }
                Err(e) => Step::Failed(e.client_message(), format!("{}: {e}", mech.name())),
            }
        }
        Phase::ScramFinal { mut server, .. } => {
            let mech = server.mechanism();
            match server.client_final(msg) {
                Ok((server_final, user)) => {
                    // A user deleted during the exchange does not log in.
                    if credential_of(&shard.image(), &user, mech).is_none() {
                        return Step::Failed(
                            scram::ScramError::Credentials.client_message(),
                            format!("{}: user {user:?} was removed", mech.name()),
                        );
                    }
                    Step::Done(server_final, user)
                }
                Err(e) => Step::Failed(e.client_message(), format!("{}: {e}", mech.name())),
            }
        }
        Phase::Start => Step::Failed(
            "Authentication failed: no SASL handshake".to_string(),
            "a SASL message before the handshake".to_string(),
        ),
    }
}

/// OAUTHBEARER: one client message through the exchange. A rejected token leaves the exchange
/// waiting for the client's `%x01` (`rejected` is why, for the log).
fn oauthbearer(
    phase: &mut Phase,
    mut server: Box<OAuthBearerServer>,
    raw: bool,
    rejected: Option<String>,
    msg: &[u8],
) -> Step {
    match server.evaluate_response(msg, unix_now_ms()) {
        Ok(ServerStep::Challenge { challenge, reason }) => {
            *phase = Phase::OAuthBearer {
                server,
                raw,
                rejected: reason,
            };
            Step::Continue(challenge)
        }
        Ok(ServerStep::Done(token)) => Step::Done(Vec::new(), token.principal),
        Err(e) => {
            let why = match (&e, rejected) {
                (OAuthBearerError::TokenRejected(_), Some(r)) => r,
                _ => e.to_string(),
            };
            Step::Failed(e.client_message(), format!("OAUTHBEARER: {why}"))
        }
    }
}

/// The wall clock in milliseconds since the Unix epoch (the times in a token are); a clock
/// before 1970 reads 0, where every token has expired.
fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// PLAIN: the password is checked against the user's SCRAM-SHA-256 credential, else its
/// SCRAM-SHA-512 one. An unknown user costs the same PBKDF2 as a known one.
async fn plain(shard: &Rc<BrokerShard>, msg: &[u8]) -> Step {
    const FAILED: &str = "Authentication failed: Invalid username or password";
    let parsed = match keel_auth::plain::parse(msg) {
        Ok(p) => p,
        Err(e) => return Step::Failed(FAILED.to_string(), format!("PLAIN: {e}")),
    };
    let user = parsed.user.to_string();
    let image = shard.image();
    let found = Mechanism::ALL
        .iter()
        .find_map(|m| credential_of(&image, &user, *m).map(|c| (*m, c)));
    drop(image);
    let (mech, cred, known) = match found {
        Some((m, c)) => (m, c, true),
        None => {
            let mech = Mechanism::ScramSha256;
            (
                mech,
                scram::mock_credential(mech, mock_secret(), &user),
                false,
            )
        }
    };
    let salted = salted_password_off_queue(shard, mech, parsed.password, &cred).await;
    if known && scram::verify_password(mech, &salted, &cred) {
        Step::Done(Vec::new(), user)
    } else {
        Step::Failed(
            FAILED.to_string(),
            format!("PLAIN: invalid credentials for {user:?}"),
        )
    }
}

/// PBKDF2 of `password` with the credential's salt and iterations, in slices on the shard's
/// `auth` task queue (or inline where the shard has none, as in unit tests).
async fn salted_password_off_queue(
    shard: &Rc<BrokerShard>,
    mech: Mechanism,
    password: &[u8],
    cred: &ScramCredential,
) -> Vec<u8> {
    let mut job = scram::SaltedPasswordJob::new(mech, password, &cred.salt, cred.iterations);
    let work = async move {
        while !job.step(PBKDF2_SLICE) {
            // Each slice is a step of its own: the paced queue yields after it.
            futures_lite::future::yield_now().await;
        }
        job.finish().unwrap_or_default()
    };
    match crate::frontend::auth_queue::run(shard, work).await {
        Ok(salted) => salted,
        // Cannot happen (the queue lives as long as the shard); if it did, the login fails
        // closed: an empty salted password matches no StoredKey.
        Err(e) => {
            tracing::warn!(error = %e, "refusing the login");
            Vec::new()
        }
    }
}

/// The user's stored credential for `mech`, if any.
fn credential_of(
    image: &crate::metadata::MetadataImage,
    user: &str,
    mech: Mechanism,
) -> Option<ScramCredential> {
    let info = image
        .cluster
        .scram_credentials
        .get(user)?
        .get(&mech.kafka_type())?;
    Some(ScramCredential {
        salt: info.salt.clone(),
        stored_key: info.stored_key.clone(),
        server_key: info.server_key.clone(),
        iterations: u32::try_from(info.iterations).ok()?,
    })
}

/// The per-process secret behind unknown users' mock salts: stable while the broker runs, so
/// retries see the same salt, and unknown to clients.
fn mock_secret() -> &'static [u8] {
    static SECRET: OnceLock<Vec<u8>> = OnceLock::new();
    SECRET.get_or_init(|| scram::random_nonce(32).into_bytes())
}

async fn failure_delay(shard: &BrokerShard) {
    let delay = shard.config.connection_failed_authentication_delay_ms;
    if delay > 0 {
        glommio::timer::sleep(Duration::from_millis(delay)).await;
    }
}

/// Reads one frame of at most `max` bytes: a Kafka request (at least 8 bytes), or with
/// `raw` a bare SASL token (any length, even 0).
async fn read_limited(
    reader: &mut BufReader<ReadSide>,
    max: usize,
    raw: bool,
) -> Result<Bytes, String> {
    let mut size = [0u8; 4];
    reader
        .read_exact(&mut size)
        .await
        .map_err(|e| format!("connection closed: {e}"))?;
    let size = i32::from_be_bytes(size);
    let min = if raw { 0 } else { 8 };
    if size < min || size as i64 > max as i64 {
        return Err(format!(
            "frame of {size} bytes before authentication is outside {min}..={max} \
             (sasl.server.max.receive.size)"
        ));
    }
    read_frame(reader, size as usize)
        .await
        .map_err(|e| format!("connection closed mid-frame: {e}"))
}

fn raw_frame(token: &[u8]) -> Frame {
    let mut buf = BytesMut::with_capacity(4 + token.len());
    buf.extend_from_slice(&(token.len() as u32).to_be_bytes());
    buf.extend_from_slice(token);
    buf.freeze().into()
}

fn encode<T>(api: ApiKey, hdr: &RequestHeader, body: &T) -> Result<Frame, String>
where
    T: kafka_protocol::protocol::Encodable
        + kafka_protocol::protocol::HeaderVersion
        + std::any::Any,
{
    encode_response(api, hdr.request_api_version, hdr.correlation_id, body)
        .map_err(|e| e.to_string())
}

async fn send(out: &mut WriteSide, frame: Frame) -> Result<(), String> {
    send_frames(out, std::iter::once(&frame))
        .await
        .map_err(|e| format!("write failed: {e}"))
}

async fn send_reply(out: &mut WriteSide, reply: Reply) -> Result<(), String> {
    match reply {
        Reply::Frame(f) | Reply::FrameThenClose(f) => send(out, f).await,
        Reply::None => Ok(()),
        Reply::Close(e) => Err(e.to_string()),
    }
}
