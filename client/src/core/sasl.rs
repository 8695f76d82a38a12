//! A SASL login as a sans-I/O exchange, the same for every transport: SaslHandshake v1 names
//! the mechanism, then SaslAuthenticate v1 carries the mechanism's messages (PLAIN: one;
//! SCRAM-SHA-256/512: client-first, client-final, with keel-auth's client) until the broker
//! has proved itself (SCRAM's server signature) or refused.
//!
//! The transport sends what [`SaslExchange`] gives it, at [`SASL_HANDSHAKE_VERSION`] or
//! [`SASL_AUTHENTICATE_VERSION`], and passes each answer back; [`SaslStep::Done`] means the
//! connection is logged in. Any error ends the exchange, and the connection must be dropped:
//! the broker closes it anyway after a failed authentication.
//!
//! A SCRAM login needs PBKDF2 with the broker's salt and iteration count (4096 and up):
//! milliseconds of CPU. The exchange hands it to the transport as [`SaslStep::Derive`], so a
//! transport on a cooperative executor runs it in slices (the glommio one, on a task queue of
//! its caller's choosing) and a blocking one runs it at once; its result goes to
//! [`SaslExchange::on_derived`].

use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use keel_auth::scram::{Mechanism, SaltedPasswordJob, ScramClient};
use keel_vocab::ErrorCode;

use crate::error::ClientError;
use crate::security::SaslLogin;

/// The SaslHandshake version sent: v1, whose mechanism's messages travel in SaslAuthenticate.
pub const SASL_HANDSHAKE_VERSION: i16 = 1;
/// The SaslAuthenticate version sent (v1 adds the session lifetime, which Keel ignores).
pub const SASL_AUTHENTICATE_VERSION: i16 = 1;

/// What the transport does next.
#[derive(Debug)]
pub enum SaslStep {
    /// Send this at [`SASL_HANDSHAKE_VERSION`]; its answer goes to
    /// [`SaslExchange::on_handshake`].
    Handshake(SaslHandshakeRequest),
    /// Send this at [`SASL_AUTHENTICATE_VERSION`]; its answer goes to
    /// [`SaslExchange::on_authenticate`].
    Authenticate(SaslAuthenticateRequest),
    /// Run this PBKDF2 job to the end and pass its result to [`SaslExchange::on_derived`];
    /// nothing is sent meanwhile.
    Derive(SaltedPasswordJob),
    /// Logged in: the connection may send its requests.
    Done,
}

/// Where the exchange stands: what the next answer is to.
enum State {
    /// The handshake was sent; `first` is the mechanism's first message.
    Handshake {
        first: Vec<u8>,
        next: Mech,
    },
    /// PLAIN's message was sent: its answer ends the exchange.
    PlainAnswer,
    /// SCRAM's client-first was sent: the answer is the server-first.
    ScramServerFirst(ScramClient),
    /// The server-first was read: the transport runs PBKDF2 ([`SaslStep::Derive`]).
    ScramSalting(ScramClient),
    /// SCRAM's client-final was sent: the answer is the server-final, with its signature.
    ScramServerFinal(ScramClient),
    Done,
}

/// The mechanism's state after the handshake.
enum Mech {
    Plain,
    Scram(ScramClient),
}

/// One login on one connection to `addr`.
pub struct SaslExchange {
    addr: String,
    mechanism: String,
    username: String,
    state: State,
}

impl SaslExchange {
    /// Starts a login to the broker at `addr` (named in errors): the exchange and its first
    /// step, the handshake. An unknown mechanism fails here, before anything is sent.
    pub fn start(addr: &str, login: &SaslLogin) -> Result<(SaslExchange, SaslStep), ClientError> {
        let (first, next) = match login.mechanism.as_str() {
            "PLAIN" => (
                keel_auth::plain::client_message(&login.username, login.password.as_bytes()),
                Mech::Plain,
            ),
            name => {
                let mech = Mechanism::from_name(name).ok_or_else(|| ClientError::Sasl {
                    addr: addr.to_string(),
                    mechanism: login.mechanism.clone(),
                    reason: format!(
                        "unknown mechanism (one of {:?})",
                        crate::security::SASL_MECHANISMS
                    ),
                })?;
                let client = ScramClient::new(
                    mech,
                    &login.username,
                    login.password.as_bytes(),
                    keel_auth::scram::random_nonce(24),
                );
                (client.client_first(), Mech::Scram(client))
            }
        };
        let exchange = SaslExchange {
            addr: addr.to_string(),
            mechanism: login.mechanism.clone(),
            username: login.username.clone(),
            state: State::Handshake { first, next },
        };
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(login.mechanism.clone().into());
        Ok((exchange, SaslStep::Handshake(handshake)))
    }

    /// The broker's SaslHandshake answer: on success, the mechanism's first message.
    pub fn on_handshake(
        &mut self,
        answer: &SaslHandshakeResponse,
    ) -> Result<SaslStep, ClientError> {
        let State::Handshake { first, next } = std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(self.out_of_order("SaslHandshake"));
        };
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(self.refused(
                answer.error_code,
                format!(
                    "the broker does not offer {} (it offers {offered:?})",
                    self.mechanism
                ),
            ));
        }
        self.state = match next {
            Mech::Plain => State::PlainAnswer,
            Mech::Scram(client) => State::ScramServerFirst(client),
        };
        Ok(authenticate(first))
    }

    /// The broker's SaslAuthenticate answer: the next message, or [`SaslStep::Done`] once
    /// the broker accepted the login (and, for SCRAM, proved it knows the user's key).
    pub fn on_authenticate(
        &mut self,
        answer: &SaslAuthenticateResponse,
    ) -> Result<SaslStep, ClientError> {
        let state = std::mem::replace(&mut self.state, State::Done);
        if matches!(
            state,
            State::Handshake { .. } | State::ScramSalting(_) | State::Done
        ) {
            return Err(self.out_of_order("SaslAuthenticate"));
        }
        if answer.error_code != 0 {
            let message = answer.error_message.as_deref().unwrap_or_default();
            return Err(self.refused(answer.error_code, message.to_string()));
        }
        match state {
            State::PlainAnswer => Ok(SaslStep::Done),
            State::ScramServerFirst(mut client) => {
                let job = client
                    .server_first_job(&answer.auth_bytes)
                    .map_err(|e| self.failed(format!("the server-first message: {e}")))?;
                self.state = State::ScramSalting(client);
                Ok(SaslStep::Derive(job))
            }
            State::ScramServerFinal(mut client) => {
                client
                    .server_final(&answer.auth_bytes)
                    .map_err(|e| self.failed(format!("the server-final message: {e}")))?;
                Ok(SaslStep::Done)
            }
            State::Handshake { .. } | State::ScramSalting(_) | State::Done => {
                Err(self.out_of_order("SaslAuthenticate"))
            }
        }
    }

    /// The finished [`SaslStep::Derive`] job's result (`None`: it did not finish): the next
    /// message to send.
    pub fn on_derived(&mut self, salted: Option<Vec<u8>>) -> Result<SaslStep, ClientError> {
        let State::ScramSalting(mut client) = std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(self.failed("a derived key out of order".to_string()));
        };
        let salted = salted.ok_or_else(|| self.failed("PBKDF2 did not finish".to_string()))?;
        let client_final = client
            .client_final(salted)
            .map_err(|e| self.failed(format!("the client-final message: {e}")))?;
        self.state = State::ScramServerFinal(client);
        Ok(authenticate(client_final))
    }

    fn refused(&self, error_code: i16, message: String) -> ClientError {
        ClientError::Authentication {
            addr: self.addr.clone(),
            mechanism: self.mechanism.clone(),
            username: self.username.clone(),
            error_code: ErrorCode::from_code(error_code),
            message,
        }
    }

    fn failed(&self, reason: String) -> ClientError {
        ClientError::Sasl {
            addr: self.addr.clone(),
            mechanism: self.mechanism.clone(),
            reason,
        }
    }

    fn out_of_order(&self, what: &str) -> ClientError {
        self.failed(format!("a {what} answer out of order"))
    }
}

fn authenticate(auth_bytes: Vec<u8>) -> SaslStep {
    SaslStep::Authenticate(SaslAuthenticateRequest::default().with_auth_bytes(auth_bytes.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::StrBytes;
    use keel_auth::scram::{credential, salted_password, ScramServer};

    const ADDR: &str = "127.0.0.1:9094";

    fn login(mechanism: &str, password: &str) -> SaslLogin {
        SaslLogin {
            mechanism: mechanism.into(),
            username: "alice".into(),
            password: password.into(),
        }
    }

    fn handshake_ok(mechanism: &str) -> SaslHandshakeResponse {
        SaslHandshakeResponse::default()
            .with_mechanisms(vec![StrBytes::from_string(mechanism.to_string())])
    }

    fn answer(bytes: Vec<u8>) -> SaslAuthenticateResponse {
        SaslAuthenticateResponse::default().with_auth_bytes(bytes.into())
    }

    fn auth_bytes(step: SaslStep) -> Vec<u8> {
        match step {
            SaslStep::Authenticate(r) => r.auth_bytes.to_vec(),
            other => panic!("expected SaslAuthenticate, got {other:?}"),
        }
    }

    /// A SCRAM exchange against keel-auth's server holding alice's credential for
    /// `server_password`; `tamper` may change the server-final message.
    fn scram(
        mech: Mechanism,
        client_password: &str,
        server_password: &str,
        tamper: impl FnOnce(Vec<u8>) -> Vec<u8>,
    ) -> Result<SaslStep, ClientError> {
        let salt = b"0123456789abcdef";
        let salted = salted_password(mech, server_password.as_bytes(), salt, 4096);
        let stored = credential(mech, &salted, salt, 4096);
        let mut server = ScramServer::new(mech, "servernonce".into(), b"mock");

        let (mut x, step) = SaslExchange::start(ADDR, &login(mech.name(), client_password))?;
        match step {
            SaslStep::Handshake(r) => assert_eq!(r.mechanism.as_str(), mech.name()),
            other => panic!("expected SaslHandshake, got {other:?}"),
        }
        let client_first = auth_bytes(x.on_handshake(&handshake_ok(mech.name()))?);
        let server_first = server
            .client_first(&client_first, |user| {
                assert_eq!(user, "alice");
                Some(stored)
            })
            .unwrap();
        let client_final = match x.on_authenticate(&answer(server_first))? {
            SaslStep::Derive(mut job) => {
                job.step(u32::MAX);
                auth_bytes(x.on_derived(job.finish())?)
            }
            other => panic!("expected Derive, got {other:?}"),
        };
        match server.client_final(&client_final) {
            Ok((server_final, user)) => {
                assert_eq!(user, "alice");
                x.on_authenticate(&answer(tamper(server_final)))
            }
            // The broker answers a wrong proof with SASL_AUTHENTICATION_FAILED.
            Err(e) => x.on_authenticate(
                &SaslAuthenticateResponse::default()
                    .with_error_code(58)
                    .with_error_message(Some(StrBytes::from_string(e.client_message()))),
            ),
        }
    }

    #[test]
    fn scram_logs_in_and_checks_the_server_signature() {
        for mech in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let done = scram(mech, "pw", "pw", |m| m).unwrap();
            assert!(matches!(done, SaslStep::Done), "{done:?}");

            // A server that does not hold alice's ServerKey cannot sign the exchange.
            let forged = scram(mech, "pw", "pw", |m| {
                // "v=" and base64: change the signature's first character.
                let mut m = m;
                m[2] = if m[2] == b'A' { b'B' } else { b'A' };
                m
            });
            assert!(
                matches!(&forged, Err(ClientError::Sasl { reason, .. }) if reason.contains("signature")),
                "{forged:?}"
            );

            let wrong = scram(mech, "not-pw", "pw", |m| m).unwrap_err();
            assert!(
                matches!(&wrong, ClientError::Authentication { error_code, username, .. }
                    if error_code.code() == 58 && username == "alice"),
                "{wrong:?}"
            );
            let text = wrong.to_string();
            assert!(
                text.contains("SASL login of alice failed (error 58)")
                    && text.contains("SASL_AUTHENTICATION_FAILED")
                    && text.contains("Invalid user credentials")
                    && text.contains(ADDR),
                "{text}"
            );
        }
    }

    #[test]
    fn plain_sends_one_message_and_the_broker_decides() {
        let (mut x, _) = SaslExchange::start(ADDR, &login("PLAIN", "pw")).unwrap();
        let msg = auth_bytes(x.on_handshake(&handshake_ok("PLAIN")).unwrap());
        let parsed = keel_auth::plain::parse(&msg).unwrap();
        assert_eq!((parsed.user, parsed.password), ("alice", &b"pw"[..]));
        assert!(matches!(
            x.on_authenticate(&answer(Vec::new())),
            Ok(SaslStep::Done)
        ));
        // Nothing more is expected after Done.
        assert!(matches!(
            x.on_authenticate(&answer(Vec::new())),
            Err(ClientError::Sasl { .. })
        ));
    }

    #[test]
    fn a_refused_mechanism_names_the_offered_ones() {
        let (mut x, _) = SaslExchange::start(ADDR, &login("SCRAM-SHA-512", "pw")).unwrap();
        let refused = SaslHandshakeResponse::default()
            .with_error_code(33)
            .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]);
        let e = x.on_handshake(&refused).unwrap_err();
        assert!(
            matches!(&e, ClientError::Authentication { error_code, .. } if error_code.code() == 33),
            "{e:?}"
        );
        assert!(e.to_string().contains("[\"PLAIN\"]"), "{e}");
        // An answer out of order, and an unknown mechanism, never reach the network.
        let (mut x, _) = SaslExchange::start(ADDR, &login("PLAIN", "pw")).unwrap();
        assert!(matches!(
            x.on_authenticate(&answer(Vec::new())),
            Err(ClientError::Sasl { .. })
        ));
        assert!(matches!(
            SaslExchange::start(ADDR, &login("GSSAPI", "pw")),
            Err(ClientError::Sasl { .. })
        ));
    }

    #[test]
    fn a_server_first_with_a_foreign_nonce_is_refused() {
        let (mut x, _) = SaslExchange::start(ADDR, &login("SCRAM-SHA-256", "pw")).unwrap();
        auth_bytes(x.on_handshake(&handshake_ok("SCRAM-SHA-256")).unwrap());
        let e = x
            .on_authenticate(&answer(
                b"r=someone-elses-nonce,s=MDEyMzQ1Njc4OWFiY2RlZg==,i=4096".to_vec(),
            ))
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::Sasl { reason, .. } if reason.contains("nonce")),
            "{e:?}"
        );
    }
}
