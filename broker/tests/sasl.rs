//! SASL_PLAINTEXT listeners (issue 19): a broker with a PLAINTEXT and a SASL listener, users
//! made with AlterUserScramCredentials on the first. librdkafka (the rdkafka crate) produces
//! and consumes through the SASL listener as a PLAIN user (its SCRAM logins over TLS are in
//! `tls.rs`), and a wrong password delivers nothing; SCRAM-SHA-256 and SCRAM-SHA-512 run on
//! the wire with keel-auth's client, with the server's signature checked; an unauthenticated
//! connection gets ApiVersions and is closed at its first other request.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::client::Client;
use common::{free_port, Broker};
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::*;
use keel_auth::scram::{random_nonce, salted_password, Mechanism, ScramClient};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

const PASSWORD: &str = "alice-secret";

/// What a producer's callbacks saw: each delivery's success, and the client errors.
#[derive(Clone, Default)]
struct Outcome {
    delivered: Arc<Mutex<Vec<bool>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl ClientContext for Outcome {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors
            .lock()
            .unwrap()
            .push(format!("{error}: {reason}"));
    }
}

impl ProducerContext for Outcome {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        self.delivered.lock().unwrap().push(result.is_ok());
    }
}

/// A broker with PLAINTEXT on `port` and SASL_PLAINTEXT (PLAIN and both SCRAMs) on the
/// returned port.
fn broker() -> (Broker, u16) {
    let sasl = free_port();
    let mut b = Broker::prepare(&[]);
    let args = [
        format!(
            "listeners=PLAINTEXT://127.0.0.1:{},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            b.port
        ),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
            .to_string(),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".to_string(),
        "connection.failed.authentication.delay.ms=200".to_string(),
    ];
    for a in args {
        b.extra.push("--set".into());
        b.extra.push(a);
    }
    let start = b.spawn_nowait();
    b.wait_serving(start);
    (b, sasl)
}

fn add_user(b: &Broker, user: &str, mech: Mechanism) {
    let salt = format!("salt-of-{user}").into_bytes();
    let salted = salted_password(mech, PASSWORD.as_bytes(), &salt, 4096);
    let mut c = Client::connect(&b.bootstrap());
    let resp: AlterUserScramCredentialsResponse = c.send(
        ApiKey::AlterUserScramCredentials,
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(user.to_string().into())
                .with_mechanism(mech.kafka_type())
                .with_iterations(4096)
                .with_salt(salt.into())
                .with_salted_password(salted.into()),
        ]),
    );
    assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
}

fn sasl_config(port: u16, password: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "PLAIN")
        .set("sasl.username", "alice")
        .set("sasl.password", password);
    cfg
}

/// The SCRAM exchange on the wire; `Ok` once the server's signature checks out.
fn scram_login(
    c: &mut Client,
    mech: Mechanism,
    user: &str,
    password: &str,
) -> Result<(), (i16, String)> {
    let hs: SaslHandshakeResponse = c.send(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(mech.name().to_string().into()),
    );
    assert_eq!(hs.error_code, 0);
    let mut client = ScramClient::new(mech, user, password.as_bytes(), random_nonce(24));
    let first: SaslAuthenticateResponse = c.send(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(client.client_first().into()),
    );
    if first.error_code != 0 {
        return Err((
            first.error_code,
            first.error_message.unwrap_or_default().to_string(),
        ));
    }
    let fin = client.server_first(&first.auth_bytes).unwrap();
    let last: SaslAuthenticateResponse = c.send(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(fin.into()),
    );
    if last.error_code != 0 {
        return Err((
            last.error_code,
            last.error_message.unwrap_or_default().to_string(),
        ));
    }
    client
        .server_final(&last.auth_bytes)
        .expect("the server's signature");
    Ok(())
}

fn metadata(c: &mut Client) -> Result<MetadataResponse, String> {
    c.try_send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false),
    )
}

#[test]
fn librdkafka_logs_in_with_plain_and_a_wrong_password_delivers_nothing() {
    let (b, sasl) = broker();
    add_user(&b, "alice", Mechanism::ScramSha256);

    let producer: BaseProducer = sasl_config(sasl, PASSWORD).create().unwrap();
    for i in 0..20 {
        let key = format!("key-{i}");
        let value = format!("value-{i}");
        let headers = OwnedHeaders::new().insert(Header {
            key: "n",
            value: Some(&i.to_string()),
        });
        producer
            .send(
                BaseRecord::to("sasl-topic")
                    .partition(0)
                    .key(&key)
                    .payload(&value)
                    .headers(headers),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    let consumer: BaseConsumer = sasl_config(sasl, PASSWORD)
        .set("group.id", "sasl-readers")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&["sasl-topic"]).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 20 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let header = m
                .headers()
                .and_then(|h| h.iter().next())
                .map(|h| String::from_utf8_lossy(h.value.unwrap()).to_string());
            got.push((
                m.offset(),
                String::from_utf8_lossy(m.key().unwrap()).to_string(),
                String::from_utf8_lossy(m.payload().unwrap()).to_string(),
                header,
            ));
        }
    }
    let want: Vec<(i64, String, String, Option<String>)> = (0..20)
        .map(|i| {
            (
                i,
                format!("key-{i}"),
                format!("value-{i}"),
                Some(i.to_string()),
            )
        })
        .collect();
    assert_eq!(got, want);

    // A wrong password: librdkafka reports an authentication error, the record fails, and
    // the topic still holds 20.
    let outcome = Outcome::default();
    let wrong: BaseProducer<Outcome> = sasl_config(sasl, "not-the-password")
        .set("message.timeout.ms", "3000")
        .create_with_context(outcome.clone())
        .unwrap();
    wrong
        .send(
            BaseRecord::to("sasl-topic")
                .partition(0)
                .key("x")
                .payload("y"),
        )
        .unwrap();
    wrong.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(*outcome.delivered.lock().unwrap(), vec![false]);
    let errors = outcome.errors.lock().unwrap().clone();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("Authentication failed: Invalid username or password")),
        "{errors:?}"
    );
    let mut c = Client::connect(&b.bootstrap());
    let offsets: ListOffsetsResponse = c.send(
        ApiKey::ListOffsets,
        4,
        &common::client::list_offsets_request("sasl-topic", 0, -1),
    );
    assert_eq!(offsets.topics[0].partitions[0].offset, 20);
}

#[test]
fn scram_logs_in_on_the_wire_and_unauthenticated_requests_close_the_connection() {
    let (b, sasl) = broker();
    add_user(&b, "alice", Mechanism::ScramSha256);
    add_user(&b, "alice", Mechanism::ScramSha512);
    let addr = format!("127.0.0.1:{sasl}");

    for mech in Mechanism::ALL {
        let mut c = Client::connect(&addr);
        let versions: ApiVersionsResponse =
            c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        assert_eq!(versions.error_code, 0);
        let keys: Vec<i16> = versions.api_keys.iter().map(|k| k.api_key).collect();
        assert!(keys.contains(&17) && keys.contains(&36), "{keys:?}");
        scram_login(&mut c, mech, "alice", PASSWORD).unwrap();
        let md = metadata(&mut c).expect("an authenticated connection is served");
        assert_eq!(md.brokers.len(), 1);
        assert_eq!(
            md.brokers[0].port,
            i32::from(sasl),
            "the SASL listener's endpoint"
        );

        // A wrong password and an unknown user: the same answer, after the delay.
        for (user, password) in [("alice", "wrong"), ("nobody", PASSWORD)] {
            let mut c = Client::connect(&addr);
            let started = Instant::now();
            let err = scram_login(&mut c, mech, user, password).unwrap_err();
            assert_eq!(
                err,
                (
                    58,
                    "Authentication failed: Invalid user credentials".to_string()
                ),
                "{user}"
            );
            assert!(started.elapsed() >= Duration::from_millis(200));
            assert!(metadata(&mut c).is_err(), "closed after a failed login");
        }
    }

    // Before authentication, Metadata gets no answer: the connection closes.
    let mut c = Client::connect(&addr);
    assert!(metadata(&mut c).is_err());
    // On the PLAINTEXT listener the SASL requests are out of place and answered so.
    let mut c = Client::connect(&b.bootstrap());
    let hs: SaslHandshakeResponse = c.send(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism("PLAIN".to_string().into()),
    );
    assert_eq!(hs.error_code, 34);
    assert!(metadata(&mut c).is_ok());
}
