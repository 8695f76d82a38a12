//! The SASL messages a client sends before it has authenticated, through `keel-auth` as the
//! broker runs them: SCRAM's client-first and client-final through one `ScramServer` exchange,
//! and PLAIN's single message through `plain::parse`, then, for the one known user, the sliced
//! PBKDF2 (`SaltedPasswordJob`) and `verify_password` as a PLAIN login against a stored SCRAM
//! credential.
//!
//! Input: a control byte (bit 0: SCRAM-SHA-512 instead of SCRAM-SHA-256; bits 1-7: the job's
//! slice, in iterations), the client-first message, a 0xFF byte (never in UTF-8, so never in a
//! message the server accepts), the client-final message. The whole input, control byte
//! included, is also the PLAIN message. Nothing may panic, and only `alice` with her password
//! logs in. The seeds (fuzz/corpus/scram_server) were written by a `ScramClient` against this
//! file's server nonce, salt and password, so they complete an exchange.

#![no_main]

use std::sync::OnceLock;

use keel_auth::plain;
use keel_auth::scram::{
    credential, salted_password, verify_password, Mechanism, SaltedPasswordJob, ScramCredential,
    ScramError, ScramServer, MIN_ITERATIONS,
};
use libfuzzer_sys::fuzz_target;

const USER: &str = "alice";
const PASSWORD: &[u8] = b"alice-password";
const SALT: &[u8] = b"scram_server salt";
const SERVER_NONCE: &str = "fuzzServerNonce";
const MOCK_SECRET: &[u8] = b"scram_server mock secret";
/// PLAIN's credential: a few iterations keep each input cheap; SCRAM's server side never runs
/// PBKDF2, so its credential has Kafka's minimum (what `ScramClient` accepts).
const PLAIN_ITERATIONS: u32 = 3;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let mech = Mechanism::ALL[usize::from(control & 1)];
    let (first, last) = match rest.iter().position(|&b| b == 0xFF) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    scram_exchange(mech, first, last);
    plain_login(mech, data, u32::from(control >> 1).max(1));
});

/// One exchange: a success is `alice`'s, and nothing is accepted after the exchange ends.
fn scram_exchange(mech: Mechanism, first: &[u8], last: &[u8]) {
    let mut server = ScramServer::new(mech, SERVER_NONCE.into(), MOCK_SECRET);
    let known = scram_credential(mech);
    let server_first = server.client_first(first, |user| (user == USER).then(|| known.clone()));
    if let Ok(server_first) = &server_first {
        assert!(server_first.starts_with(b"r="), "{server_first:?}");
    }
    match server.client_final(last) {
        Ok((server_final, user)) => {
            assert!(
                server_first.is_ok(),
                "a final message accepted after a failed first"
            );
            assert_eq!(user, USER);
            assert!(server_final.starts_with(b"v="), "{server_final:?}");
        }
        Err(e) => {
            if server_first.is_err() {
                assert_eq!(e, ScramError::State);
            }
        }
    }
    assert_eq!(server.client_final(last), Err(ScramError::State));
}

/// PLAIN's parse, then `alice`'s password checked in slices of `slice` iterations.
fn plain_login(mech: Mechanism, msg: &[u8], slice: u32) {
    let Ok(m) = plain::parse(msg) else {
        return;
    };
    assert!(!m.user.is_empty() && !m.password.is_empty());
    assert!(!m.user.contains('\0') && !m.password.contains(&0));
    assert!(m.authzid.is_empty() || m.authzid == m.user);
    if m.user != USER {
        return;
    }
    let mut job = SaltedPasswordJob::new(mech, m.password, SALT, PLAIN_ITERATIONS);
    let mut slices = 0u32;
    while !job.step(slice) {
        slices += 1;
        assert!(slices < PLAIN_ITERATIONS, "a job that does not end");
    }
    let salted = job.finish().expect("a finished job has its result");
    assert_eq!(
        salted,
        salted_password(mech, m.password, SALT, PLAIN_ITERATIONS)
    );
    let accepted = verify_password(mech, &salted, plain_credential(mech));
    assert_eq!(accepted, m.password == PASSWORD);
}

fn scram_credential(mech: Mechanism) -> &'static ScramCredential {
    static CREDENTIALS: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    &CREDENTIALS.get_or_init(|| Mechanism::ALL.map(|m| stored(m, MIN_ITERATIONS)))[slot(mech)]
}

fn plain_credential(mech: Mechanism) -> &'static ScramCredential {
    static CREDENTIALS: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    &CREDENTIALS.get_or_init(|| Mechanism::ALL.map(|m| stored(m, PLAIN_ITERATIONS)))[slot(mech)]
}

/// `mech`'s place in `Mechanism::ALL`.
fn slot(mech: Mechanism) -> usize {
    usize::from(mech == Mechanism::ScramSha512)
}

fn stored(mech: Mechanism, iterations: u32) -> ScramCredential {
    let salted = salted_password(mech, PASSWORD, SALT, iterations);
    credential(mech, &salted, SALT, iterations)
}
