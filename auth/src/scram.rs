//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka runs them (KIP-84).
//!
//! A credential is what Kafka's `UserScramCredentialRecord` holds: the salt, StoredKey =
//! H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key"), and
//! the iteration count. AlterUserScramCredentials carries the SaltedPassword (PBKDF2 runs on
//! the client); it is enough to log in, so only the derived keys are kept.
//!
//! [`ScramServer`] is one exchange on the broker: client-first → server-first, client-final →
//! server-final. Every message is parsed strictly (RFC 5802 §7); a user that does not exist is
//! carried through the exchange with a mock credential and fails at the proof, like a wrong
//! password, so the two cannot be told apart. [`ScramClient`] is the other side, for Keel's
//! own clients (the CLI, keel-bench, replica fetchers).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2};
use std::num::NonZeroU32;

/// Kafka's bounds on the iteration count (`ScramMechanism`'s minIterations and
/// maxIterations): AlterUserScramCredentials outside them is UNACCEPTABLE_CREDENTIAL.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

/// The longest SCRAM message a server reads (a client-first with a long name and nonce is a
/// few hundred bytes; the SASL frame cap bounds it anyway).
pub const MAX_MESSAGE: usize = 8192;

/// The two SCRAM mechanisms Kafka offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// The SASL mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's `ScramMechanism` type as stored in its records (1 = SHA-256, 2 = SHA-512).
    pub fn kafka_type(self) -> i8 {
        match self {
            Mechanism::ScramSha256 => 1,
            Mechanism::ScramSha512 => 2,
        }
    }

    pub fn from_kafka_type(t: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    /// The digest's length in bytes (the length of every key and proof).
    pub fn digest_len(self) -> usize {
        self.digest().output_len()
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::ScramSha256 => &digest::SHA256,
            Mechanism::ScramSha512 => &digest::SHA512,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::ScramSha256 => hmac::HMAC_SHA256,
            Mechanism::ScramSha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::ScramSha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::ScramSha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }
}

/// What the broker stores for one user and mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys log in against this broker (StoredKey) or impersonate it (ServerKey).
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC. What a client
/// computes and sends in AlterUserScramCredentials. `iterations` is at least 1.
pub fn salted_password(mech: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; mech.digest_len()];
    let n = NonZeroU32::new(iterations.max(1)).expect("at least 1");
    pbkdf2::derive(mech.pbkdf2(), n, salt, password, &mut out);
    out
}

/// The stored credential derived from a salted password.
pub fn credential(
    mech: Mechanism,
    salted_password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> ScramCredential {
    let client_key = mech.mac(salted_password, b"Client Key");
    ScramCredential {
        salt: salt.to_vec(),
        stored_key: mech.hash(&client_key),
        server_key: mech.mac(salted_password, b"Server Key"),
        iterations,
    }
}

/// Hi(password, salt, i) of RFC 5802 computed in slices: a PLAIN login is checked against the
/// user's stored SCRAM credential, and 4096 to 16384 iterations take milliseconds, too long for
/// one turn of the broker's cooperative executor. The caller runs [`SaltedPasswordJob::step`]
/// with a bounded slice and yields between slices; the result equals [`salted_password`]'s.
///
/// PBKDF2 for one output block (dkLen = the digest's length, all SCRAM needs):
/// U1 = HMAC(P, S || INT(1)), Ui = HMAC(P, U(i-1)), result = U1 xor ... xor Uc. The password
/// is kept only inside the HMAC key (as its padded inner and outer states). Dropping a job
/// midway is safe: it holds no resources and nothing else depends on it.
pub struct SaltedPasswordJob {
    mech: Mechanism,
    key: hmac::Key,
    /// The next iteration's HMAC input: S || INT(1) before the first, U(i-1) after.
    u: Vec<u8>,
    /// U1 xor ... xor U(iterations_done); the salted password once every iteration is done.
    sum: Vec<u8>,
    iterations_done: u32,
    /// The credential's count (at least 1). Always `iterations_done <= iterations`.
    iterations: u32,
}

impl SaltedPasswordJob {
    /// A job for `iterations` PBKDF2 iterations (at least 1, as [`salted_password`]); nothing is
    /// computed until [`SaltedPasswordJob::step`].
    pub fn new(mech: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Self {
        let digest_len = mech.digest_len();
        let mut u = Vec::with_capacity((salt.len() + 4).max(digest_len));
        u.extend_from_slice(salt);
        // INT(1): the index of the first and only output block.
        u.extend_from_slice(&1u32.to_be_bytes());
        SaltedPasswordJob {
            mech,
            key: hmac::Key::new(mech.hmac(), password),
            u,
            sum: vec![0u8; digest_len],
            iterations_done: 0,
            iterations: iterations.max(1),
        }
    }

    /// Runs up to `iterations_max` more iterations (each one HMAC of a digest-sized block);
    /// true once all are done. `step(0)` only reports.
    pub fn step(&mut self, iterations_max: u32) -> bool {
        let n = iterations_max.min(self.iterations - self.iterations_done);
        for _ in 0..n {
            let tag = hmac::sign(&self.key, &self.u);
            let tag = tag.as_ref();
            debug_assert_eq!(tag.len(), self.sum.len());
            self.u.clear();
            self.u.extend_from_slice(tag);
            for (s, t) in self.sum.iter_mut().zip(tag) {
                *s ^= t;
            }
        }
        self.iterations_done += n;
        assert!(self.iterations_done <= self.iterations);
        self.is_done()
    }

    /// Whether every iteration has run ([`SaltedPasswordJob::finish`] then gives the result).
    pub fn is_done(&self) -> bool {
        self.iterations_done == self.iterations
    }

    /// The salted password once every iteration is done; `None` (and the job is gone) before.
    pub fn finish(self) -> Option<Vec<u8>> {
        self.is_done().then_some(self.sum)
    }
}

impl std::fmt::Debug for SaltedPasswordJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is the password and the running sum becomes the salted password.
        f.debug_struct("SaltedPasswordJob")
            .field("mech", &self.mech)
            .field("iterations_done", &self.iterations_done)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Whether `salted_password` (a [`SaltedPasswordJob`]'s result for the credential's salt and
/// iteration count) logs in as `cred`: its StoredKey, derived as [`credential`] derives it,
/// compared in constant time. A caller checking a user without a credential should still run a
/// job of the same count and call this, so the time taken does not tell the user is unknown.
pub fn verify_password(mech: Mechanism, salted_password: &[u8], cred: &ScramCredential) -> bool {
    let client_key = mech.mac(salted_password, b"Client Key");
    equal(&mech.hash(&client_key), &cred.stored_key)
}

/// Why an exchange failed. The broker answers every one of them with
/// SASL_AUTHENTICATION_FAILED; [`ScramError::client_message`] is the text it may send.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScramError {
    #[error("invalid SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("authorization id differs from the user name")]
    AuthzidMismatch,
    #[error("SCRAM extensions are not supported: {0}")]
    Extension(String),
    #[error("nonce mismatch")]
    Nonce,
    #[error("channel binding data mismatch")]
    ChannelBindingData,
    /// A wrong password, or a user without a credential for this mechanism.
    #[error("invalid credentials")]
    Credentials,
    #[error("message out of order")]
    State,
    #[error("server signature mismatch")]
    ServerSignature,
    #[error("iteration count {0} outside {MIN_ITERATIONS}..={MAX_ITERATIONS}")]
    Iterations(u32),
    #[error("server error: {0}")]
    ServerError(String),
}

impl ScramError {
    /// What the broker tells the client: the same for a wrong password and an unknown user.
    pub fn client_message(&self) -> String {
        match self {
            ScramError::Credentials => "Authentication failed: Invalid user credentials".into(),
            e => format!("Authentication failed: {e}"),
        }
    }
}

/// A SASL name (RFC 5802 §5.1): `=2C` is `,` and `=3D` is `=`; any other `=` is invalid.
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in a name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(ScramError::Malformed("empty name"));
    }
    Ok(out)
}

fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// A nonce's characters: printable ASCII but `,` (RFC 5802 §7).
fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// The value of attribute `key` (`"r"` for `r=...`) in `field`.
fn attr<'a>(field: Option<&'a str>, key: char, what: &'static str) -> Result<&'a str, ScramError> {
    let f = field.ok_or(ScramError::Malformed(what))?;
    let mut chars = f.chars();
    if chars.next() == Some(key) && chars.next() == Some('=') {
        Ok(&f[2..])
    } else {
        Err(ScramError::Malformed(what))
    }
}

/// Optional extensions after the required attributes: Kafka's only one is `tokenauth`
/// (delegation tokens, not supported here); any other is refused too.
fn refuse_extensions<'a>(mut rest: impl Iterator<Item = &'a str>) -> Result<(), ScramError> {
    match rest.next() {
        None => Ok(()),
        Some(ext) => Err(ScramError::Extension(
            ext.split('=')
                .next()
                .unwrap_or_default()
                .chars()
                .take(32)
                .collect(),
        )),
    }
}

fn utf8(msg: &[u8]) -> Result<&str, ScramError> {
    if msg.len() > MAX_MESSAGE {
        return Err(ScramError::Malformed("message too long"));
    }
    std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))
}

/// A parsed client-first message.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// The GS2 header as sent (`n,,` or `y,,` or with `a=`), echoed in client-final's `c=`.
    pub gs2_header: String,
    pub user: String,
    pub nonce: String,
    /// Everything after the GS2 header, part of the AuthMessage.
    pub bare: String,
}

/// Parses a client-first message (RFC 5802 §7): no channel binding (`p=` is refused), an
/// authzid only if it names the user, a user name and a nonce, no extensions.
pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, ScramError> {
    let text = utf8(msg)?;
    let mut fields = text.splitn(3, ',');
    let cbind = fields.next().unwrap_or_default();
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => return Err(ScramError::ChannelBinding),
        _ => return Err(ScramError::Malformed("bad GS2 header")),
    }
    let authzid = fields
        .next()
        .ok_or(ScramError::Malformed("bad GS2 header"))?;
    let bare = fields.next().ok_or(ScramError::Malformed("no user name"))?;
    let gs2_header = format!("{cbind},{authzid},");
    let mut parts = bare.split(',');
    let first = parts.next();
    if first.is_some_and(|f| f.starts_with("m=")) {
        return Err(ScramError::Extension("m".into()));
    }
    let user = decode_saslname(attr(first, 'n', "no user name")?)?;
    let nonce = attr(parts.next(), 'r', "no nonce")?;
    if !valid_nonce(nonce) {
        return Err(ScramError::Malformed("bad nonce"));
    }
    refuse_extensions(parts)?;
    if !authzid.is_empty() {
        let a = decode_saslname(attr(Some(authzid), 'a', "bad authzid")?)?;
        if a != user {
            return Err(ScramError::AuthzidMismatch);
        }
    }
    Ok(ClientFirst {
        gs2_header,
        user,
        nonce: nonce.to_string(),
        bare: bare.to_string(),
    })
}

/// A parsed client-final message.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFinal {
    pub channel_binding: Vec<u8>,
    pub nonce: String,
    pub proof: Vec<u8>,
    /// The message without `,p=...`, part of the AuthMessage.
    pub without_proof: String,
}

pub fn parse_client_final(msg: &[u8]) -> Result<ClientFinal, ScramError> {
    let text = utf8(msg)?;
    let cut = text.rfind(",p=").ok_or(ScramError::Malformed("no proof"))?;
    let (without_proof, proof) = (&text[..cut], &text[cut + 3..]);
    let mut parts = without_proof.split(',');
    let cbind = attr(parts.next(), 'c', "no channel binding")?;
    let nonce = attr(parts.next(), 'r', "no nonce")?;
    refuse_extensions(parts)?;
    let channel_binding = B64
        .decode(cbind)
        .map_err(|_| ScramError::Malformed("channel binding is not base64"))?;
    let proof = B64
        .decode(proof)
        .map_err(|_| ScramError::Malformed("proof is not base64"))?;
    Ok(ClientFinal {
        channel_binding,
        nonce: nonce.to_string(),
        proof,
        without_proof: without_proof.to_string(),
    })
}

struct AwaitingFinal {
    first: ClientFirst,
    server_first: String,
    nonce: String,
    credential: ScramCredential,
    known: bool,
}

enum ServerState {
    First,
    Final(Box<AwaitingFinal>),
    Done,
}

/// One SCRAM exchange on the server. Any error ends it: later messages get
/// [`ScramError::State`].
pub struct ScramServer {
    mech: Mechanism,
    server_nonce: String,
    /// Keys the mock credential of users that do not exist (stable per user and server).
    mock_secret: Vec<u8>,
    state: ServerState,
}

impl ScramServer {
    /// `server_nonce`: fresh random printable characters (see [`random_nonce`]);
    /// `mock_secret`: a per-process secret that makes an unknown user's mock salt stable
    /// across attempts, so a retry does not reveal the user is unknown.
    pub fn new(mech: Mechanism, server_nonce: String, mock_secret: &[u8]) -> ScramServer {
        ScramServer {
            mech,
            server_nonce,
            mock_secret: mock_secret.to_vec(),
            state: ServerState::First,
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mech
    }

    /// Reads the client-first message; `lookup` gives the user's credential for this
    /// mechanism, if any. Returns the server-first message.
    pub fn client_first(
        &mut self,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, ServerState::First) {
            self.state = ServerState::Done;
            return Err(ScramError::State);
        }
        self.state = ServerState::Done;
        let first = parse_client_first(msg)?;
        let (credential, known) = match lookup(&first.user) {
            Some(c) => (c, true),
            None => (self.mock_credential(&first.user), false),
        };
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let out = server_first.clone().into_bytes();
        self.state = ServerState::Final(Box::new(AwaitingFinal {
            first,
            server_first,
            nonce,
            credential,
            known,
        }));
        Ok(out)
    }

    /// Reads the client-final message; returns the server-final message and the
    /// authenticated user.
    pub fn client_final(&mut self, msg: &[u8]) -> Result<(Vec<u8>, String), ScramError> {
        let ServerState::Final(awaiting) = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(ScramError::State);
        };
        let AwaitingFinal {
            first,
            server_first,
            nonce,
            credential,
            known,
        } = *awaiting;
        let fin = parse_client_final(msg)?;
        // Kafka's rule (`ScramSaslServer`): the client's nonce must end with the combined one.
        // librdkafka sends its own nonce before the combined nonce (which already starts with
        // it); the server's part still ends the message, so a replay cannot match.
        if !fin.nonce.ends_with(&nonce) {
            return Err(ScramError::Nonce);
        }
        if fin.channel_binding != first.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBindingData);
        }
        let mech = self.mech;
        if fin.proof.len() != mech.digest_len() {
            return Err(ScramError::Malformed("proof length"));
        }
        let auth_message = format!("{},{},{}", first.bare, server_first, fin.without_proof);
        let client_signature = mech.mac(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = fin
            .proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let stored = mech.hash(&client_key);
        let matches = equal(&stored, &credential.stored_key);
        if !(matches && known) {
            return Err(ScramError::Credentials);
        }
        let server_signature = mech.mac(&credential.server_key, auth_message.as_bytes());
        let server_final = format!("v={}", B64.encode(server_signature));
        Ok((server_final.into_bytes(), first.user))
    }

    fn mock_credential(&self, user: &str) -> ScramCredential {
        mock_credential(self.mech, &self.mock_secret, user)
    }
}

/// A credential for a user that does not exist: a salt derived from the user name and the
/// server's secret (the same on every attempt), keys no password matches. Logins of unknown
/// users run against it, so that they look and cost the same as a wrong password.
pub fn mock_credential(mech: Mechanism, mock_secret: &[u8], user: &str) -> ScramCredential {
    let salt = mech.mac(mock_secret, user.as_bytes())[..16].to_vec();
    let key = mech.mac(mock_secret, &salt);
    ScramCredential {
        salt,
        stored_key: mech.hash(&key),
        server_key: key,
        iterations: MIN_ITERATIONS,
    }
}

/// Compares in time that depends only on the lengths (which are public: the digest's).
fn equal(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.ct_eq(b).into()
}

/// `len` random printable nonce characters (base64 of random bytes, without `,`).
pub fn random_nonce(len: usize) -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = vec![0u8; len];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source");
    let mut s = B64.encode(&bytes);
    s.truncate(len);
    s
}

enum ClientState {
    First {
        bare: String,
    },
    /// The server-first message was read; PBKDF2 of the password is what remains.
    Salting {
        /// client-first-bare, server-first, client-final-without-proof.
        auth_message: String,
        without_proof: String,
    },
    Final {
        auth_message: String,
        salted: Vec<u8>,
    },
    Done,
}

/// One SCRAM exchange on a client (no channel binding, no authzid).
pub struct ScramClient {
    mech: Mechanism,
    password: Vec<u8>,
    nonce: String,
    state: ClientState,
}

impl ScramClient {
    pub fn new(mech: Mechanism, user: &str, password: &[u8], nonce: String) -> ScramClient {
        let bare = format!("n={},r={nonce}", encode_saslname(user));
        ScramClient {
            mech,
            password: password.to_vec(),
            nonce,
            state: ClientState::First { bare },
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> Vec<u8> {
        match &self.state {
            ClientState::First { bare } => format!("n,,{bare}").into_bytes(),
            _ => Vec::new(),
        }
    }

    /// Reads the server-first message; returns the client-final message. Runs PBKDF2 with
    /// the server's iteration count inline (milliseconds): a caller on a cooperative executor
    /// uses [`ScramClient::server_first_job`] and [`ScramClient::client_final`] instead.
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let mut job = self.server_first_job(msg)?;
        job.step(u32::MAX);
        self.client_final(job.finish().unwrap_or_default())
    }

    /// Reads the server-first message: the PBKDF2 job for the password with the server's salt
    /// and iteration count, whose result goes to [`ScramClient::client_final`].
    pub fn server_first_job(&mut self, msg: &[u8]) -> Result<SaltedPasswordJob, ScramError> {
        let ClientState::First { bare } = std::mem::replace(&mut self.state, ClientState::Done)
        else {
            return Err(ScramError::State);
        };
        let text = utf8(msg)?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.chars().take(200).collect()));
        }
        let mut parts = text.split(',');
        let nonce = attr(parts.next(), 'r', "no nonce")?;
        let salt = attr(parts.next(), 's', "no salt")?;
        let iterations = attr(parts.next(), 'i', "no iteration count")?;
        refuse_extensions(parts)?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() || !valid_nonce(nonce)
        {
            return Err(ScramError::Nonce);
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| ScramError::Malformed("iteration count"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Iterations(iterations));
        }
        let without_proof = format!("c={},r={nonce}", B64.encode(b"n,,"));
        self.state = ClientState::Salting {
            auth_message: format!("{bare},{text},{without_proof}"),
            without_proof,
        };
        Ok(SaltedPasswordJob::new(
            self.mech,
            &self.password,
            &salt,
            iterations,
        ))
    }

    /// The client-final message, from the finished job of [`ScramClient::server_first_job`].
    pub fn client_final(&mut self, salted: Vec<u8>) -> Result<Vec<u8>, ScramError> {
        let ClientState::Salting {
            auth_message,
            without_proof,
        } = std::mem::replace(&mut self.state, ClientState::Done)
        else {
            return Err(ScramError::State);
        };
        let mech = self.mech;
        if salted.len() != mech.digest_len() {
            return Err(ScramError::State);
        }
        let client_key = mech.mac(&salted, b"Client Key");
        let stored_key = mech.hash(&client_key);
        let signature = mech.mac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        self.state = ClientState::Final {
            auth_message,
            salted,
        };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Reads the server-final message: the server proved it holds the ServerKey.
    pub fn server_final(&mut self, msg: &[u8]) -> Result<(), ScramError> {
        let ClientState::Final {
            auth_message,
            salted,
        } = std::mem::replace(&mut self.state, ClientState::Done)
        else {
            return Err(ScramError::State);
        };
        let text = utf8(msg)?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.chars().take(200).collect()));
        }
        let v = attr(text.split(',').next(), 'v', "no verifier")?;
        let got = B64
            .decode(v)
            .map_err(|_| ScramError::Malformed("verifier is not base64"))?;
        let server_key = self.mech.mac(&salted, b"Server Key");
        let want = self.mech.mac(&server_key, auth_message.as_bytes());
        if equal(&got, &want) {
            Ok(())
        } else {
            Err(ScramError::ServerSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"test mock secret";

    fn store(mech: Mechanism, password: &str, iterations: u32) -> ScramCredential {
        let salt = b"0123456789abcdef";
        let salted = salted_password(mech, password.as_bytes(), salt, iterations);
        credential(mech, &salted, salt, iterations)
    }

    /// RFC 7677 §3's example exchange, byte for byte, with the salted password from ring's
    /// PBKDF2 and from the sliced job.
    #[test]
    fn rfc7677_example() {
        let mech = Mechanism::ScramSha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(mech, b"pencil", &salt, 4096);
        let mut job = SaltedPasswordJob::new(mech, b"pencil", &salt, 4096);
        while !job.step(1000) {}
        let sliced = job.finish().unwrap();
        assert_eq!(sliced, salted);
        for salted in [salted, sliced] {
            rfc7677_exchange(&salted, &salt);
        }
    }

    fn rfc7677_exchange(salted: &[u8], salt: &[u8]) {
        let mech = Mechanism::ScramSha256;
        let cred = credential(mech, salted, salt, 4096);
        assert!(verify_password(mech, salted, &cred));
        let mut server = ScramServer::new(mech, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into(), SECRET);
        let mut client = ScramClient::new(mech, "user", b"pencil", "rOprNGfwEbeRWgbNEkqO".into());
        let first = client.client_first();
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let sf = server
            .client_first(&first, |u| (u == "user").then(|| cred.clone()))
            .unwrap();
        assert_eq!(
            String::from_utf8(sf.clone()).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let cf = client.server_first(&sf).unwrap();
        assert_eq!(
            String::from_utf8(cf.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let (fin, user) = server.client_final(&cf).unwrap();
        assert_eq!(user, "user");
        assert_eq!(
            String::from_utf8(fin.clone()).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        client.server_final(&fin).unwrap();
    }

    /// The job's result equals ring's PBKDF2 whatever the slice size, and it is done exactly
    /// after its last slice.
    #[test]
    fn sliced_job_matches_pbkdf2() {
        let salt = b"0123456789abcdef";
        for mech in Mechanism::ALL {
            for iterations in [1, 2, 4096, 4097] {
                let want = salted_password(mech, b"pencil", salt, iterations);
                for slice in [1, 7, 1000, u32::MAX] {
                    let mut job = SaltedPasswordJob::new(mech, b"pencil", salt, iterations);
                    assert!(!job.step(0));
                    let slices_max = iterations.div_ceil(slice);
                    for _ in 1..slices_max {
                        assert!(!job.step(slice), "{mech:?} {iterations} {slice}");
                    }
                    assert!(job.step(slice));
                    assert!(job.step(slice), "stays done");
                    assert_eq!(
                        job.finish().as_deref(),
                        Some(&want[..]),
                        "{mech:?} {iterations} {slice}"
                    );
                }
            }
        }
        // Zero iterations count as one, as `salted_password` counts them.
        let mut job = SaltedPasswordJob::new(Mechanism::ScramSha256, b"pw", salt, 0);
        assert!(job.step(u32::MAX));
        assert_eq!(
            job.finish(),
            Some(salted_password(Mechanism::ScramSha256, b"pw", salt, 1))
        );
    }

    #[test]
    fn an_unfinished_job_has_no_result_and_hides_its_secrets() {
        let mut job = SaltedPasswordJob::new(Mechanism::ScramSha512, b"hunter2", b"salt", 10);
        assert!(!job.step(9));
        assert!(!job.is_done());
        let debug = format!("{job:?}");
        assert!(debug.contains("iterations_done: 9"), "{debug}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("sum"),
            "{debug}"
        );
        assert_eq!(job.finish(), None);
    }

    #[test]
    fn verify_password_accepts_the_right_password_only() {
        for mech in Mechanism::ALL {
            let cred = store(mech, "right", 4096);
            let salted_with = |password: &[u8], iterations: u32| {
                let mut job = SaltedPasswordJob::new(mech, password, &cred.salt, iterations);
                while !job.step(500) {}
                job.finish().unwrap()
            };
            assert!(verify_password(mech, &salted_with(b"right", 4096), &cred));
            assert!(!verify_password(mech, &salted_with(b"wrong", 4096), &cred));
            assert!(!verify_password(mech, &salted_with(b"right", 4095), &cred));
            assert!(!verify_password(mech, &[], &cred));
            // The right password under the other mechanism's credential.
            let other = Mechanism::ALL.into_iter().find(|&m| m != mech).unwrap();
            assert!(!verify_password(
                mech,
                &salted_with(b"right", 4096),
                &store(other, "right", 4096)
            ));
        }
    }

    fn exchange(
        mech: Mechanism,
        stored: Option<&ScramCredential>,
        user: &str,
        password: &str,
    ) -> Result<String, ScramError> {
        let mut server = ScramServer::new(mech, random_nonce(24), SECRET);
        let mut client = ScramClient::new(mech, user, password.as_bytes(), random_nonce(24));
        let sf = server.client_first(&client.client_first(), |_| stored.cloned())?;
        let cf = client.server_first(&sf)?;
        let (fin, who) = server.client_final(&cf)?;
        client.server_final(&fin)?;
        Ok(who)
    }

    /// librdkafka repeats its nonce before the combined one in the client-final message;
    /// Kafka accepts a nonce that ends with the combined one, and so does Keel.
    #[test]
    fn a_client_nonce_ending_with_the_combined_one_is_accepted_as_kafka_does() {
        let mech = Mechanism::ScramSha256;
        let cred = store(mech, "pw", 4096);
        let final_with = |nonce: &str| {
            let mut server = ScramServer::new(mech, "SRV".into(), SECRET);
            let bare = "n=alice,r=CLI";
            let sf = server
                .client_first(format!("n,,{bare}").as_bytes(), |_| Some(cred.clone()))
                .unwrap();
            let sf = String::from_utf8(sf).unwrap();
            assert!(sf.starts_with("r=CLISRV,"), "{sf}");
            let without_proof = format!("c=biws,r={nonce}");
            let auth = format!("{bare},{sf},{without_proof}");
            let salted = salted_password(mech, b"pw", &cred.salt, cred.iterations);
            let client_key = mech.mac(&salted, b"Client Key");
            let signature = mech.mac(&mech.hash(&client_key), auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(k, s)| k ^ s)
                .collect();
            let msg = format!("{without_proof},p={}", B64.encode(proof));
            server.client_final(msg.as_bytes()).map(|(_, user)| user)
        };
        assert_eq!(final_with("CLISRV").as_deref(), Ok("alice"));
        assert_eq!(final_with("CLICLISRV").as_deref(), Ok("alice"));
        assert_eq!(final_with("CLISRVX"), Err(ScramError::Nonce));
        assert_eq!(final_with("CLI"), Err(ScramError::Nonce));
    }

    #[test]
    fn both_mechanisms_log_in_and_refuse_a_wrong_password() {
        for mech in Mechanism::ALL {
            let cred = store(mech, "right", 4096);
            assert_eq!(cred.stored_key.len(), mech.digest_len());
            assert_eq!(
                exchange(mech, Some(&cred), "a,b=c", "right").as_deref(),
                Ok("a,b=c")
            );
            assert_eq!(
                exchange(mech, Some(&cred), "alice", "wrong"),
                Err(ScramError::Credentials)
            );
        }
        // A credential of the other mechanism does not log in.
        let cred = store(Mechanism::ScramSha256, "right", 4096);
        assert!(exchange(Mechanism::ScramSha512, Some(&cred), "alice", "right").is_err());
    }

    /// An unknown user goes through the same steps as a known one and fails at the same step
    /// with the same error; the mock salt is the same on every attempt.
    #[test]
    fn an_unknown_user_looks_like_a_wrong_password() {
        let mech = Mechanism::ScramSha256;
        assert_eq!(
            exchange(mech, None, "nobody", "any"),
            Err(ScramError::Credentials)
        );
        let salt_of = |nonce: &str| {
            let mut s = ScramServer::new(mech, nonce.into(), SECRET);
            let sf = s.client_first(b"n,,n=nobody,r=abc", |_| None).unwrap();
            let text = String::from_utf8(sf).unwrap();
            text.split(',').nth(1).unwrap().to_string()
        };
        assert_eq!(salt_of("x1"), salt_of("x2"));
        assert_eq!(
            ScramError::Credentials.client_message(),
            "Authentication failed: Invalid user credentials"
        );
    }

    #[test]
    fn hostile_client_messages_are_refused() {
        let mech = Mechanism::ScramSha256;
        let first = |m: &[u8]| {
            ScramServer::new(mech, "srv".into(), SECRET)
                .client_first(m, |_| Some(store(mech, "pw", 4096)))
                .map(|_| ())
        };
        assert_eq!(
            first(b"p=tls-unique,,n=u,r=a"),
            Err(ScramError::ChannelBinding)
        );
        assert_eq!(first(b"n,a=v,n=u,r=a"), Err(ScramError::AuthzidMismatch));
        assert_eq!(first(b"n,a=u,n=u,r=a"), Ok(()));
        assert!(matches!(
            first(b"n,,n=u,r=a,tokenauth=true"),
            Err(ScramError::Extension(_))
        ));
        assert!(matches!(
            first(b"n,,m=x,n=u,r=a"),
            Err(ScramError::Extension(_))
        ));
        for bad in [
            &b""[..],
            b"n",
            b"n,,",
            b"x,,n=u,r=a",
            b"n,,r=a,n=u",
            b"n,,n=,r=a",
            b"n,,n=u=,r=a",
            b"n,,n=u=2",
            b"n,,n=u,r=",
            b"n,,n=u,r=a\x01",
            b"n,,n=u,r=\xff",
            b"n,,n=u",
        ] {
            assert!(
                matches!(first(bad), Err(ScramError::Malformed(_))),
                "{:?}: {:?}",
                String::from_utf8_lossy(bad),
                first(bad)
            );
        }
        assert!(matches!(
            first(&[b'n'; MAX_MESSAGE + 1]),
            Err(ScramError::Malformed("message too long"))
        ));
    }

    /// Final messages with a wrong nonce, channel binding, proof, or replayed from another
    /// exchange are refused; nothing is accepted out of order.
    #[test]
    fn hostile_final_messages_are_refused() {
        let mech = Mechanism::ScramSha256;
        let cred = store(mech, "pw", 4096);
        let start = |server_nonce: &str| {
            let mut server = ScramServer::new(mech, server_nonce.into(), SECRET);
            let mut client = ScramClient::new(mech, "u", b"pw", "cli".into());
            let sf = server
                .client_first(&client.client_first(), |_| Some(cred.clone()))
                .unwrap();
            let cf = client.server_first(&sf).unwrap();
            (server, String::from_utf8(cf).unwrap())
        };
        let (mut s, cf) = start("one");
        assert_eq!(
            s.client_final(cf.as_bytes()).map(|r| r.1).as_deref(),
            Ok("u")
        );
        // The same final message again: the exchange is over.
        assert_eq!(s.client_final(cf.as_bytes()), Err(ScramError::State));
        // Replayed into another exchange (another server nonce).
        let (mut s2, _) = start("two");
        assert_eq!(s2.client_final(cf.as_bytes()), Err(ScramError::Nonce));
        // Tampered: nonce, channel binding, proof bits, proof length, no proof.
        let (mut s3, cf3) = start("three");
        let bad = cf3.replace("r=clithree", "r=clithreX");
        assert_eq!(s3.client_final(bad.as_bytes()), Err(ScramError::Nonce));
        let (mut s4, cf4) = start("four");
        let bad = cf4.replace("c=biws", &format!("c={}", B64.encode("y,,")));
        assert_eq!(
            s4.client_final(bad.as_bytes()),
            Err(ScramError::ChannelBindingData)
        );
        let (mut s5, cf5) = start("five");
        let cut = cf5.rfind(",p=").unwrap();
        let mut proof = B64.decode(&cf5[cut + 3..]).unwrap();
        proof[0] ^= 1;
        let bad = format!("{},p={}", &cf5[..cut], B64.encode(&proof));
        assert_eq!(
            s5.client_final(bad.as_bytes()),
            Err(ScramError::Credentials)
        );
        let (mut s6, cf6) = start("six");
        let cut = cf6.rfind(",p=").unwrap();
        let bad = format!("{},p={}", &cf6[..cut], B64.encode([0u8; 16]));
        assert!(matches!(
            s6.client_final(bad.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
        let (mut s7, cf7) = start("seven");
        let bad = &cf7[..cf7.rfind(",p=").unwrap()];
        assert!(matches!(
            s7.client_final(bad.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
        // A final message first.
        let mut s8 = ScramServer::new(mech, "x".into(), SECRET);
        assert_eq!(s8.client_final(cf.as_bytes()), Err(ScramError::State));
        // A client refuses a server that does not know the password, or a weak iteration count.
        let mut c = ScramClient::new(mech, "u", b"pw", "cli".into());
        let sf = format!("r=cliXYZ,s={},i=4096", B64.encode(b"salt"));
        c.server_first(sf.as_bytes()).unwrap();
        assert_eq!(
            c.server_final(format!("v={}", B64.encode([0u8; 32])).as_bytes()),
            Err(ScramError::ServerSignature)
        );
        let mut c = ScramClient::new(mech, "u", b"pw", "cli".into());
        let sf = format!("r=cliXYZ,s={},i=1", B64.encode(b"salt"));
        assert_eq!(
            c.server_first(sf.as_bytes()),
            Err(ScramError::Iterations(1))
        );
        let mut c = ScramClient::new(mech, "u", b"pw", "cli".into());
        assert_eq!(
            c.server_first(b"r=other,s=c2FsdA==,i=4096"),
            Err(ScramError::Nonce)
        );
    }

    #[test]
    fn names_and_kafka_types_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
            assert_eq!(Mechanism::from_kafka_type(m.kafka_type()), Some(m));
        }
        assert_eq!(Mechanism::from_name("SCRAM-SHA-1"), None);
        assert_eq!(Mechanism::ScramSha512.digest_len(), 64);
        let n = random_nonce(24);
        assert_eq!(n.len(), 24);
        assert!(valid_nonce(&n));
        assert_ne!(n, random_nonce(24));
    }

    proptest::proptest! {
        /// No client-first or client-final message panics the server, whatever the bytes.
        #[test]
        fn arbitrary_messages_never_panic(a in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
                                          b in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            static CRED: std::sync::OnceLock<ScramCredential> = std::sync::OnceLock::new();
            let mech = Mechanism::ScramSha512;
            let cred = CRED.get_or_init(|| store(mech, "pw", 4096)).clone();
            let mut s = ScramServer::new(mech, "srv".into(), SECRET);
            let _ = s.client_first(&a, |_| Some(cred));
            let _ = s.client_final(&b);
            let _ = parse_client_first(&a);
            let _ = parse_client_final(&b);
        }
    }
}
