//! The OAUTHBEARER messages a client sends before it has authenticated, through `keel-auth` as
//! the broker runs them: `OAuthBearerServer::evaluate_response` (the client initial response
//! parsed, its unsecured JWT validated: base64url, JSON, claims, times, scope) with a required
//! scope and a clock skew, then the client's second message; and the parser and validator on
//! their own.
//!
//! Input: the first message, a 0xFF byte (never in an accepted message, which is ASCII), the
//! second message. Nothing may panic; a login names a non-blank principal and only with a
//! token that holds the required scope; a rejected token is answered with a JSON challenge
//! that the second message `%x01` turns into the exchange's failure; nothing is accepted after
//! the exchange ends. The seeds (fuzz/corpus/oauthbearer_server) are tokens built for
//! [`NOW_MS`]: good, expired, without the scope, malformed.

#![no_main]

use keel_auth::oauthbearer::{
    parse_client_initial_response, validate_unsecured_token, OAuthBearerError, OAuthBearerServer,
    ServerStep, UnsecuredValidatorOptions,
};
use libfuzzer_sys::fuzz_target;

/// 2023-11-14T22:13:20Z, the clock the seeds' tokens were made for.
const NOW_MS: i64 = 1_700_000_000_000;
const REQUIRED_SCOPE: &str = "kafka";

fuzz_target!(|data: &[u8]| {
    let (first, second) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let options = UnsecuredValidatorOptions {
        required_scope: vec![REQUIRED_SCOPE.to_string()],
        allowable_clock_skew_ms: 1000,
        ..UnsecuredValidatorOptions::default()
    };
    exchange(&options, first, second);
    if let Ok(response) = parse_client_initial_response(first) {
        assert!(response.token.bytes().all(|b| b.is_ascii_graphic()));
        assert!(!response.extensions.contains_key("auth"));
        let _ = validate_unsecured_token(response.token, &UnsecuredValidatorOptions::default(), 0);
    }
});

fn exchange(options: &UnsecuredValidatorOptions, first: &[u8], second: &[u8]) {
    let mut server = OAuthBearerServer::new(options.clone());
    match server.evaluate_response(first, NOW_MS) {
        Ok(ServerStep::Done(token)) => {
            assert!(!token.principal.trim().is_empty());
            assert!(token.scope.contains(REQUIRED_SCOPE));
            assert!(token.lifetime_ms >= NOW_MS - 1000);
            assert_eq!(
                server.evaluate_response(second, NOW_MS),
                Err(OAuthBearerError::State)
            );
        }
        Ok(ServerStep::Challenge { challenge, .. }) => {
            let challenge = String::from_utf8(challenge).expect("the challenge is UTF-8");
            assert!(challenge.starts_with("{\"status\":\""), "{challenge}");
            if second == [0x01] {
                assert_eq!(
                    server.evaluate_response(second, NOW_MS),
                    Err(OAuthBearerError::TokenRejected(challenge))
                );
                assert_eq!(
                    server.evaluate_response(second, NOW_MS),
                    Err(OAuthBearerError::State)
                );
            } else {
                let _ = server.evaluate_response(second, NOW_MS);
            }
        }
        Err(e) => {
            assert!(!e.client_message().is_empty());
        }
    }
}
