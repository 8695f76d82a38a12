//! SSL and SASL_SSL listeners (issue 19) driven by librdkafka: the rdkafka crate with its `ssl`
//! feature (the system OpenSSL) against the real `keel` binary. Each case produces records with
//! keys, values (one larger than a TLS record, 16 KiB) and headers (one of them null) to a
//! fresh one-partition topic, checks the offsets the delivery reports name, and reads them back
//! through a consumer group, checking content and offsets:
//! - SSL with server authentication only, and a client that does not trust the broker's CA
//!   delivers nothing;
//! - mTLS (`ssl.client.auth=required`): the client certificate's subject DN is the principal
//!   StandardAuthorizer checks, so an ACL on `User:<DN>` lets it write and read one topic and
//!   another is refused with TOPIC_AUTHORIZATION_FAILED; without a certificate nothing goes;
//! - SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, users written by
//!   `keel serve --add-scram`; a wrong SCRAM password delivers nothing;
//! - OAUTHBEARER with librdkafka's unsecured tokens over SASL_PLAINTEXT and SASL_SSL: the
//!   token's principal is the one StandardAuthorizer checks.
//!
//! The CA and certificates are made at test time with the openssl CLI in a temp dir (as
//! tests/python/conftest.py's `certs`), so no private key is committed. Every wait is bounded.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::client::{create_topic, list_offsets_request, Client};
use common::{free_port, Broker};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

/// The client certificate's subject as Java writes a DN (RFC 2253, most specific first).
const CLIENT_DN: &str = "CN=client-one,OU=Tests,O=Keel";
const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const ALICE_PASSWORD: &str = "alice-secret";
const BOB_PASSWORD: &str = "bob-secret";
/// Records per round trip.
const RECORDS: usize = 8;
/// The one record whose value spans several TLS records (at most 16 KiB of plaintext each).
const BIG_RECORD: usize = 5;
const BIG_VALUE_BYTES: usize = 100 * 1024;

const WAIT_MAX: Duration = Duration::from_secs(30);
const OPENSSL_WAIT_MAX: Duration = Duration::from_secs(60);

// ---- certificates ----

/// PEM files made by the openssl CLI: `ca.pem` (the test CA), `keystore.pem` (the broker's
/// key and certificate for 127.0.0.1 and localhost: Kafka's PEM keystore), `client.pem` and
/// `client.key` (subject [`CLIENT_DN`]). The directory and its keys go when this drops.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn generate() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            d,
            "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
             -subj /CN=keel-test-ca",
        );
        std::fs::write(
            d.join("san.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        // X.509 v3 extensions, as webpki requires of a client certificate.
        let client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
        std::fs::write(d.join("client.cnf"), client_ext).unwrap();
        for (name, subject, ext) in [
            ("broker", "/CN=localhost", "san.cnf"),
            ("client", "/O=Keel/OU=Tests/CN=client-one", "client.cnf"),
        ] {
            openssl(
                d,
                &format!(
                    "req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr \
                     -subj {subject}"
                ),
            );
            openssl(
                d,
                &format!(
                    "x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                     -out {name}.pem -days 2 -extfile {ext}"
                ),
            );
        }
        // Kafka's PEM keystore: the private key, then the certificate chain, in one file.
        let keystore = [
            std::fs::read_to_string(d.join("broker.key")).unwrap(),
            std::fs::read_to_string(d.join("broker.pem")).unwrap(),
        ]
        .concat();
        std::fs::write(d.join("keystore.pem"), keystore).unwrap();
        Certs { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).to_str().unwrap().to_string()
    }
}

/// Runs `openssl` with the arguments `args` separates by spaces, in `dir`; panics with its
/// stderr if it fails or outlives [`OPENSSL_WAIT_MAX`].
fn openssl(dir: &Path, args: &str) {
    let mut child = Command::new("openssl")
        .args(args.split(' '))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the openssl CLI (scripts/test.sh installs it)");
    let deadline = Instant::now() + OPENSSL_WAIT_MAX;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("openssl {args} ran past {OPENSSL_WAIT_MAX:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        panic!("openssl {args}: {status}\n{stderr}");
    }
}

// ---- the broker ----

/// A broker with PLAINTEXT on `port` (setup as `User:ANONYMOUS`) and each of `listeners`
/// (name, security protocol) on a port of its own, returned in the same order; the broker's key
/// and certificate and the CA from `certs`; `settings` are more `--set` values and `args` more
/// flags.
fn start_broker(
    certs: &Certs,
    listeners: &[(&str, &str)],
    settings: &[String],
    args: &[&str],
) -> (Broker, Vec<u16>) {
    let mut b = Broker::prepare(args);
    let ports: Vec<u16> = listeners.iter().map(|_| free_port()).collect();
    let mut endpoints = vec![format!("PLAINTEXT://127.0.0.1:{}", b.port)];
    let mut protocols = vec!["PLAINTEXT:PLAINTEXT".to_string()];
    for ((name, protocol), port) in listeners.iter().zip(&ports) {
        endpoints.push(format!("{name}://127.0.0.1:{port}"));
        protocols.push(format!("{name}:{protocol}"));
    }
    let mut all = vec![
        format!("listeners={}", endpoints.join(",")),
        format!("listener.security.protocol.map={}", protocols.join(",")),
        format!("ssl.keystore.location={}", certs.path("keystore.pem")),
        format!("ssl.truststore.location={}", certs.path("ca.pem")),
        "connection.failed.authentication.delay.ms=100".to_string(),
    ];
    all.extend(settings.iter().cloned());
    for setting in all {
        b.extra.push("--set".into());
        b.extra.push(setting);
    }
    let start = b.spawn_nowait();
    b.wait_serving(start);
    (b, ports)
}

fn plaintext_client(b: &Broker) -> Client {
    Client::connect(&b.bootstrap())
}

/// The log end offset of partition 0, asked on the PLAINTEXT listener.
fn log_end_offset(b: &Broker, topic: &str) -> i64 {
    let resp: ListOffsetsResponse =
        plaintext_client(b).send(ApiKey::ListOffsets, 4, &list_offsets_request(topic, 0, -1));
    let partition = &resp.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{resp:?}");
    partition.offset
}

/// Polls `done` every 100 ms until it holds; panics with `what` after [`WAIT_MAX`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---- librdkafka clients ----

/// A delivery report: the (partition, offset) a record was written at, or its error code.
type Delivery = Result<(i32, i64), Option<RDKafkaErrorCode>>;

/// What a producer's callbacks saw: each record's [`Delivery`], and the client-level errors
/// (TLS or SASL failures).
#[derive(Clone, Default)]
struct Reports {
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl ClientContext for Reports {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors
            .lock()
            .unwrap()
            .push(format!("{error}: {reason}"));
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.rdkafka_error_code()),
        };
        self.deliveries.lock().unwrap().push(outcome);
    }
}

/// A record as sent and as read back: key, value, headers (name, value or null).
type Record = (Vec<u8>, Vec<u8>, Vec<(String, Option<Vec<u8>>)>);

/// [`RECORDS`] records naming `case` in keys, values and headers; record [`BIG_RECORD`]'s value
/// is [`BIG_VALUE_BYTES`] long.
fn records(case: &str) -> Vec<Record> {
    (0..RECORDS)
        .map(|i| {
            let value = if i == BIG_RECORD {
                (0..BIG_VALUE_BYTES).map(|n| (n % 251) as u8).collect()
            } else {
                format!("{case}-value-{i}").into_bytes()
            };
            let headers = vec![
                ("i".to_string(), Some(i.to_string().into_bytes())),
                ("case".to_string(), Some(case.as_bytes().to_vec())),
                ("null".to_string(), None),
            ];
            (format!("{case}-key-{i}").into_bytes(), value, headers)
        })
        .collect()
}

fn owned_headers(headers: &[(String, Option<Vec<u8>>)]) -> OwnedHeaders {
    headers
        .iter()
        .fold(OwnedHeaders::new(), |out, (key, value)| {
            out.insert(Header {
                key,
                value: value.as_deref(),
            })
        })
}

/// Sends `records` to partition 0 of `topic` and waits for their delivery reports (bounded by
/// `message.timeout.ms`, which `config` sets); returns what the reports say, in order.
fn produce(config: &ClientConfig, topic: &str, records: &[Record]) -> (Vec<Delivery>, Vec<String>) {
    let reports = Reports::default();
    let producer: BaseProducer<Reports> = config.create_with_context(reports.clone()).unwrap();
    for (key, value, headers) in records {
        producer
            .send(
                BaseRecord::to(topic)
                    .partition(0)
                    .key(key.as_slice())
                    .payload(value.as_slice())
                    .headers(owned_headers(headers)),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    // flush returns once every record has its report: delivered, or failed by
    // message.timeout.ms (below WAIT_MAX).
    producer.flush(WAIT_MAX).unwrap();
    let deliveries = reports.deliveries.lock().unwrap().clone();
    let errors = reports.errors.lock().unwrap().clone();
    (deliveries, errors)
}

/// Reads `want` records of `topic` from the beginning in a consumer group: (offset, record).
fn consume(config: &ClientConfig, topic: &str, group: &str, want: usize) -> Vec<(i64, Record)> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut got = Vec::new();
    let mut errors = Vec::new();
    let deadline = Instant::now() + WAIT_MAX;
    while got.len() < want && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|hs| {
                        hs.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default();
                let record = (
                    m.key().unwrap_or_default().to_vec(),
                    m.payload().unwrap_or_default().to_vec(),
                    headers,
                );
                got.push((m.offset(), record));
            }
            Some(Err(e)) => errors.push(e.to_string()),
            None => {}
        }
    }
    assert_eq!(
        got.len(),
        want,
        "records read from {topic} within {WAIT_MAX:?}; consumer errors: {errors:?}"
    );
    got
}

/// Produces [`records`] of `case` to the empty `topic` and reads them back; asserts the
/// delivery reports' offsets 0.., and the content and offsets read.
fn round_trip(config: &ClientConfig, topic: &str, case: &str) {
    let sent = records(case);
    let (deliveries, errors) = produce(config, topic, &sent);
    let want_offsets: Vec<Delivery> = (0..sent.len() as i64).map(|o| Ok((0, o))).collect();
    assert_eq!(deliveries, want_offsets, "client errors: {errors:?}");

    let got = consume(config, topic, &format!("{case}-readers"), sent.len());
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..sent.len() as i64).collect::<Vec<_>>());
    for ((_, read), written) in got.iter().zip(&sent) {
        assert!(
            read == written,
            "{case}: read back {read:?}, sent {written:?}"
        );
    }
}

/// librdkafka's settings for `security.protocol` at 127.0.0.1:`port`, trusting the test CA
/// (and checking that the broker's certificate names 127.0.0.1, librdkafka's default).
fn tls_config(certs: &Certs, port: u16, protocol: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", protocol)
        .set("ssl.ca.location", certs.path("ca.pem"))
        .set("message.timeout.ms", "20000")
        .set("socket.timeout.ms", "20000");
    config
}

/// `config` with `without` removed, a short `message.timeout.ms` and no retries: for the cases
/// that must fail. (Without `ssl.ca.location` librdkafka trusts the system's CAs, which do not
/// hold the test CA.)
fn failing_config(config: &ClientConfig, without: &[&str]) -> ClientConfig {
    let mut failing = config.clone();
    for key in without {
        failing.remove(key);
    }
    failing
        .set("message.timeout.ms", "3000")
        .set("retries", "0");
    failing
}

// ---- ACLs ----

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_GROUP: i8 = 3;
const PATTERN_LITERAL: i8 = 3;
const OPERATION_READ: i8 = 3;
const OPERATION_WRITE: i8 = 4;
const OPERATION_DESCRIBE: i8 = 8;
const PERMISSION_ALLOW: i8 = 3;

/// ALLOW `principal` each (resource type, name, operation), from any host, with CreateAcls on
/// the PLAINTEXT listener (as `User:ANONYMOUS`, a super user there).
fn allow(b: &Broker, principal: &str, grants: &[(i8, &str, i8)]) {
    let creations = grants
        .iter()
        .map(|&(resource_type, name, operation)| {
            AclCreation::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_resource_pattern_type(PATTERN_LITERAL)
                .with_principal(StrBytes::from_string(principal.to_string()))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(operation)
                .with_permission_type(PERMISSION_ALLOW)
        })
        .collect();
    let resp: CreateAclsResponse = plaintext_client(b).send(
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(creations),
    );
    for result in &resp.results {
        assert_eq!(result.error_code, 0, "{resp:?}");
    }
}

// ---- the cases ----

#[test]
fn ssl_server_auth_round_trips_records_and_an_untrusted_broker_gets_nothing() {
    let certs = Certs::generate();
    let (b, ports) = start_broker(&certs, &[("SSL", "SSL")], &[], &[]);
    let topic = "ssl-records";
    create_topic(&mut plaintext_client(&b), topic, 1);
    let config = tls_config(&certs, ports[0], "SSL");
    round_trip(&config, topic, "ssl");

    // Without the test CA the broker's certificate does not verify: nothing is written.
    let (deliveries, errors) = produce(
        &failing_config(&config, &["ssl.ca.location"]),
        topic,
        &records("untrusted"),
    );
    assert!(
        deliveries.iter().all(|d| d.is_err()),
        "{deliveries:?}; client errors: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("certificate verify failed")),
        "{errors:?}"
    );
    assert_eq!(log_end_offset(&b, topic), RECORDS as i64);
}

#[test]
fn mtls_certificate_subject_is_the_principal_the_authorizer_checks() {
    let certs = Certs::generate();
    let (b, ports) = start_broker(
        &certs,
        &[("MTLS", "SSL")],
        &[
            "listener.name.mtls.ssl.client.auth=required".to_string(),
            format!("authorizer.class.name={STANDARD_AUTHORIZER}"),
            "super.users=User:ANONYMOUS".to_string(),
        ],
        &[],
    );
    let (allowed, described, other) = ("mtls-allowed", "mtls-described", "mtls-other");
    for topic in [allowed, described, other] {
        create_topic(&mut plaintext_client(&b), topic, 1);
    }
    let principal = format!("User:{CLIENT_DN}");
    allow(
        &b,
        &principal,
        &[
            (RESOURCE_TOPIC, allowed, OPERATION_WRITE),
            (RESOURCE_TOPIC, allowed, OPERATION_READ),
            (RESOURCE_TOPIC, described, OPERATION_DESCRIBE),
            (RESOURCE_GROUP, "*", OPERATION_READ),
        ],
    );
    let mut config = tls_config(&certs, ports[0], "SSL");
    config
        .set("ssl.certificate.location", certs.path("client.pem"))
        .set("ssl.key.location", certs.path("client.key"));

    // The ACLs reach every shard once the metadata log is applied there: wait until the
    // certificate's principal may describe the allowed topic.
    let probe: BaseConsumer = config.create().unwrap();
    wait_until("the ACLs to apply", || {
        probe
            .fetch_metadata(Some(allowed), Duration::from_secs(5))
            .is_ok_and(|md| md.topics().iter().all(|t| t.error().is_none()))
    });
    drop(probe);

    round_trip(&config, allowed, "mtls");

    // No ACL on the topic (refused in Metadata), and DESCRIBE without WRITE (refused in
    // Produce): both TOPIC_AUTHORIZATION_FAILED, nothing written.
    let mut refused = config.clone();
    refused
        .set("message.timeout.ms", "10000")
        .set("retries", "0");
    for topic in [other, described] {
        let (deliveries, errors) = produce(&refused, topic, &records("refused")[..1]);
        assert_eq!(
            deliveries,
            vec![Err(Some(RDKafkaErrorCode::TopicAuthorizationFailed))],
            "{topic}; client errors: {errors:?}"
        );
        assert_eq!(log_end_offset(&b, topic), 0, "{topic}");
    }

    // Without a client certificate the handshake fails: nothing is written.
    let without_certificate =
        failing_config(&config, &["ssl.certificate.location", "ssl.key.location"]);
    let (deliveries, errors) = produce(&without_certificate, allowed, &records("no-cert"));
    assert!(
        deliveries.iter().all(|d| d.is_err()),
        "{deliveries:?}; client errors: {errors:?}"
    );
    // rustls' TLS 1.3 alert 116.
    assert!(
        errors.iter().any(|e| e.contains("certificate required")),
        "{errors:?}"
    );
    assert_eq!(log_end_offset(&b, allowed), RECORDS as i64);
}

/// A broker with a SASL_SSL listener offering PLAIN and both SCRAMs, alice with a
/// SCRAM-SHA-256 credential and bob with a SCRAM-SHA-512 one, both written by `--add-scram`;
/// returns once both are in the metadata log. `topic` is created.
fn sasl_ssl_broker(certs: &Certs, topic: &str) -> (Broker, u16) {
    let alice = format!("SCRAM-SHA-256=[name=alice,password={ALICE_PASSWORD}]");
    let bob = format!("SCRAM-SHA-512=[name=bob,password={BOB_PASSWORD}]");
    let (b, ports) = start_broker(
        certs,
        &[("SASL_SSL", "SASL_SSL")],
        &["sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".to_string()],
        &["--add-scram", &alice, "--add-scram", &bob],
    );
    // --add-scram writes the users after the broker starts serving.
    wait_until("--add-scram to write both users", || {
        b.log_text()
            .matches("--add-scram: user written to the metadata log")
            .count()
            == 2
    });
    create_topic(&mut plaintext_client(&b), topic, 1);
    (b, ports[0])
}

fn sasl_ssl_config(
    certs: &Certs,
    port: u16,
    mechanism: &str,
    user: &str,
    password: &str,
) -> ClientConfig {
    let mut config = tls_config(certs, port, "SASL_SSL");
    config
        .set("sasl.mechanism", mechanism)
        .set("sasl.username", user)
        .set("sasl.password", password);
    config
}

/// Waits until `config` logs in and gets the cluster's metadata (the users reach every shard
/// once the metadata log is applied there).
fn wait_for_login(config: &ClientConfig) {
    wait_until("a SASL_SSL login", || {
        let probe: BaseConsumer = config.create().unwrap();
        probe
            .fetch_metadata(None, Duration::from_secs(5))
            .is_ok_and(|md| !md.brokers().is_empty())
    });
}

#[test]
fn sasl_ssl_plain_round_trips_records_for_either_scram_credential() {
    let certs = Certs::generate();
    let (b, port) = sasl_ssl_broker(&certs, "plain-alice");
    create_topic(&mut plaintext_client(&b), "plain-bob", 1);
    // PLAIN checks alice's password against her SCRAM-SHA-256 credential, bob's against his
    // SCRAM-SHA-512 one.
    for (user, password) in [("alice", ALICE_PASSWORD), ("bob", BOB_PASSWORD)] {
        let config = sasl_ssl_config(&certs, port, "PLAIN", user, password);
        wait_for_login(&config);
        round_trip(&config, &format!("plain-{user}"), &format!("plain-{user}"));
    }
}

#[test]
fn sasl_ssl_scram_sha_256_round_trips_records() {
    let certs = Certs::generate();
    let topic = "scram-256";
    let (_b, port) = sasl_ssl_broker(&certs, topic);
    let config = sasl_ssl_config(&certs, port, "SCRAM-SHA-256", "alice", ALICE_PASSWORD);
    wait_for_login(&config);
    round_trip(&config, topic, topic);
}

#[test]
fn sasl_ssl_scram_sha_512_round_trips_records_and_a_wrong_password_delivers_nothing() {
    let certs = Certs::generate();
    let topic = "scram-512";
    let (b, port) = sasl_ssl_broker(&certs, topic);
    let config = sasl_ssl_config(&certs, port, "SCRAM-SHA-512", "bob", BOB_PASSWORD);
    wait_for_login(&config);
    round_trip(&config, topic, topic);

    let mut wrong = sasl_ssl_config(&certs, port, "SCRAM-SHA-512", "bob", "not-bobs");
    wrong.set("message.timeout.ms", "3000");
    let (deliveries, errors) = produce(&wrong, topic, &records("wrong")[..1]);
    assert_eq!(deliveries.len(), 1);
    assert!(deliveries[0].is_err(), "{deliveries:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("Authentication failed: Invalid user credentials")),
        "{errors:?}"
    );
    assert_eq!(log_end_offset(&b, topic), RECORDS as i64);
}

/// librdkafka's unsecured OAUTHBEARER tokens (`enable.sasl.oauthbearer.unsecure.jwt`, the
/// token built from `sasl.oauthbearer.config`) over SASL_PLAINTEXT and SASL_SSL: the token's
/// `principal` is the connection's principal, the one the authorizer checks — alice's ACLs let
/// her round trip records, mallory's token gets TOPIC_AUTHORIZATION_FAILED and writes nothing.
#[test]
fn oauthbearer_unsecured_tokens_name_the_principal_over_sasl_plaintext_and_sasl_ssl() {
    let certs = Certs::generate();
    let (b, ports) = start_broker(
        &certs,
        &[
            ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
            ("SASL_SSL", "SASL_SSL"),
        ],
        &[
            "sasl.enabled.mechanisms=OAUTHBEARER".to_string(),
            format!("authorizer.class.name={STANDARD_AUTHORIZER}"),
            "super.users=User:ANONYMOUS".to_string(),
        ],
        &[],
    );
    let topics = ["oauth-plaintext", "oauth-ssl"];
    for topic in topics {
        create_topic(&mut plaintext_client(&b), topic, 1);
    }
    let grants: Vec<(i8, &str, i8)> = topics
        .iter()
        .flat_map(|t| {
            [
                (RESOURCE_TOPIC, *t, OPERATION_WRITE),
                (RESOURCE_TOPIC, *t, OPERATION_READ),
            ]
        })
        .chain([(RESOURCE_GROUP, "*", OPERATION_READ)])
        .collect();
    allow(&b, "User:alice", &grants);
    for ((protocol, port), topic) in [("SASL_PLAINTEXT", ports[0]), ("SASL_SSL", ports[1])]
        .into_iter()
        .zip(topics)
    {
        let token = |principal: &str| {
            let mut config = tls_config(&certs, port, protocol);
            if protocol == "SASL_PLAINTEXT" {
                config.remove("ssl.ca.location");
            }
            config
                .set("sasl.mechanism", "OAUTHBEARER")
                .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
                .set("sasl.oauthbearer.config", format!("principal={principal}"));
            config
        };
        let alice = token("alice");
        // The ACLs reach every shard once the metadata log is applied there.
        let probe: BaseConsumer = alice.create().unwrap();
        wait_until("alice's ACLs to apply", || {
            probe
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .is_ok_and(|md| md.topics().iter().all(|t| t.error().is_none()))
        });
        drop(probe);
        round_trip(&alice, topic, &format!("oauth-{protocol}"));

        let mut mallory = token("mallory");
        mallory
            .set("message.timeout.ms", "10000")
            .set("retries", "0");
        let (deliveries, errors) = produce(&mallory, topic, &records("mallory")[..1]);
        assert_eq!(
            deliveries,
            vec![Err(Some(RDKafkaErrorCode::TopicAuthorizationFailed))],
            "{protocol}; client errors: {errors:?}"
        );
        assert_eq!(log_end_offset(&b, topic), RECORDS as i64, "{protocol}");
    }
}
