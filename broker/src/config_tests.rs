use super::*;

#[test]
fn precedence_env_file_flags() {
    let env = vec![
        ("KEEL_NUM_PARTITIONS".to_string(), "2".to_string()),
        ("KEEL_DATA_DIR".to_string(), "/env".to_string()),
        ("KEEL_SMP".to_string(), "3".to_string()),
        ("OTHER".to_string(), "x".to_string()),
    ];
    let map = SettingsBuilder::default()
        .env(env.into_iter())
        .toml_text("num.partitions = 5\n\"data.dir\" = \"/file\"\n")
        .unwrap()
        .set("data.dir", "/flag")
        .build();
    let cfg = BrokerConfig::from_settings(map).unwrap();
    assert_eq!(cfg.num_partitions, 5);
    assert_eq!(cfg.data_dir, PathBuf::from("/flag"));
    assert_eq!(cfg.smp, 3);
}

#[test]
fn configuration_reference_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let rendered = reference_markdown();
    if std::env::var("UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/configuration.md differs from the settings table in broker/src/config.rs; \
         run `UPDATE_DOCS=1 cargo test -p keel-broker configuration_reference`"
    );
}

#[test]
fn every_setting_has_the_environment_variable_the_reference_names() {
    for key in BROKER_KEYS {
        let vars = std::iter::once((env_var(key.name), "x".to_string()));
        let map = SettingsBuilder::default().env(vars).build();
        assert!(map.contains_key(key.name), "{}", key.name);
    }
}

#[test]
fn unknown_key_is_an_error() {
    let map = SettingsBuilder::default().set("num.partitons", "3").build();
    let err = BrokerConfig::from_settings(map).unwrap_err().to_string();
    assert!(err.contains("num.partitons"), "{err}");
}

#[test]
fn replica_selector_class_takes_kafkas_names_and_refuses_others() {
    let selector = |v: Option<&str>| {
        let mut b = SettingsBuilder::default();
        if let Some(v) = v {
            b = b.set("replica.selector.class", v);
        }
        BrokerConfig::from_settings(b.build()).map(|c| c.replica_selector)
    };
    assert_eq!(selector(None).unwrap(), ReplicaSelector::Leader);
    assert_eq!(
        selector(Some(
            "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        ))
        .unwrap(),
        ReplicaSelector::RackAware
    );
    assert_eq!(
        selector(Some("org.apache.kafka.common.replica.LeaderSelector")).unwrap(),
        ReplicaSelector::Leader
    );
    let err = selector(Some("com.example.MySelector"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("replica.selector.class") && err.contains("com.example.MySelector"),
        "{err}"
    );
}

#[test]
fn topic_overrides_inherit_broker_defaults() {
    let map = SettingsBuilder::default()
        .set("log.segment.bytes", "1048576")
        .build();
    let cfg = BrokerConfig::from_settings(map).unwrap();
    let mut overrides = BTreeMap::new();
    assert_eq!(cfg.log_config(&overrides).segment_bytes, 1_048_576);
    overrides.insert("segment.bytes".to_string(), "4096".to_string());
    assert_eq!(cfg.log_config(&overrides).segment_bytes, 4096);
    assert!(validate_topic_config("segment.bytes", "abc").is_err());
    assert!(validate_topic_config("no.such", "1").is_err());
    assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
}

#[test]
fn producer_id_expiration_is_a_broker_setting_for_every_topic() {
    let cfg = BrokerConfig::from_settings(BTreeMap::new()).unwrap();
    let mut overrides = BTreeMap::new();
    assert_eq!(
        cfg.log_config(&overrides).producer_id_expiration_ms,
        86_400_000
    );
    let map = SettingsBuilder::default()
        .set("producer.id.expiration.ms", "60000")
        .build();
    let cfg = BrokerConfig::from_settings(map).unwrap();
    overrides.insert("segment.bytes".to_string(), "4096".to_string());
    assert_eq!(cfg.log_config(&overrides).producer_id_expiration_ms, 60_000);
    assert!(validate_topic_config("producer.id.expiration.ms", "1").is_err());
    let map = SettingsBuilder::default()
        .set("producer.id.expiration.ms", "0")
        .build();
    assert!(BrokerConfig::from_settings(map).is_err());
}

fn with(pairs: &[(&str, &str)]) -> Result<BrokerConfig> {
    BrokerConfig::from_settings(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn listeners_default_to_listen_and_name_the_inter_broker_one() {
    let cfg = with(&[
        ("listen", "127.0.0.1:9300"),
        ("advertise", "kafka.example:9300"),
    ])
    .unwrap();
    assert_eq!(cfg.listeners.len(), 1);
    assert_eq!(cfg.listeners[0].name, "PLAINTEXT");
    assert_eq!(cfg.listen.to_string(), "127.0.0.1:9300");
    assert_eq!(
        (cfg.inter_broker_host.as_str(), cfg.inter_broker_port),
        ("kafka.example", 9300)
    );

    let cfg = with(&[
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:9400,REPLICATION://127.0.0.2:9401",
        ),
        ("advertised.listeners", "PLAINTEXT://clients.example:9400"),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
        ),
        ("inter.broker.listener.name", "replication"),
    ])
    .unwrap();
    assert_eq!(cfg.listen.to_string(), "127.0.0.1:9400");
    assert_eq!(
        (cfg.advertise_host.as_str(), cfg.advertise_port),
        ("clients.example", 9400)
    );
    assert_eq!(cfg.inter_broker_bind.to_string(), "127.0.0.2:9401");
    assert_eq!(
        (cfg.inter_broker_host.as_str(), cfg.inter_broker_port),
        ("127.0.0.2", 9401)
    );
}

#[test]
fn sasl_listeners_take_their_mechanisms_globally_or_per_listener() {
    let cfg = with(&[
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:9400,SASL_PLAINTEXT://127.0.0.1:9401,SCRAM://127.0.0.1:9402",
        ),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SCRAM:sasl_plaintext",
        ),
        ("sasl.enabled.mechanisms", "plain, SCRAM-SHA-256,PLAIN"),
        (
            "listener.name.scram.sasl.enabled.mechanisms",
            "SCRAM-SHA-512",
        ),
        ("connection.failed.authentication.delay.ms", "250"),
    ])
    .unwrap();
    let by_name = |n: &str| cfg.listeners.iter().find(|l| l.name == n).unwrap();
    assert_eq!(by_name("PLAINTEXT").protocol, SecurityProtocol::Plaintext);
    assert!(by_name("PLAINTEXT").sasl_mechanisms.is_empty());
    let sasl = by_name("SASL_PLAINTEXT");
    assert_eq!(sasl.protocol, SecurityProtocol::SaslPlaintext);
    assert_eq!(
        sasl.sasl_mechanisms,
        vec![
            SaslMechanism::Plain,
            SaslMechanism::Scram(keel_auth::scram::Mechanism::ScramSha256)
        ]
    );
    assert_eq!(
        by_name("SCRAM").sasl_mechanisms,
        vec![SaslMechanism::Scram(
            keel_auth::scram::Mechanism::ScramSha512
        )]
    );
    assert_eq!(cfg.connection_failed_authentication_delay_ms, 250);
    assert_eq!(cfg.sasl_server_max_receive_size, 524288);
    assert_eq!(cfg.sasl_server_authentication_timeout_ms, 10000);

    let err = |pairs: &[(&str, &str)]| with(pairs).unwrap_err().to_string();
    let sasl_only = [
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:9400,SASL_PLAINTEXT://127.0.0.1:9401",
        ),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        ),
    ];
    // Kafka's default mechanism, GSSAPI, is out of scope: a SASL listener must name others.
    assert!(err(&sasl_only).contains("GSSAPI"), "{}", err(&sasl_only));
    let with_extra = |extra: (&'static str, &'static str)| {
        let mut pairs = sasl_only.to_vec();
        pairs.push(extra);
        err(&pairs)
    };
    assert!(
        with_extra(("sasl.enabled.mechanisms", "SCRAM-SHA-1")).contains("unknown SASL mechanism")
    );
    assert!(with_extra(("sasl.enabled.mechanisms", " , ")).contains("is empty"));
    let with_plain = |extra: (&'static str, &'static str)| {
        let mut pairs = sasl_only.to_vec();
        pairs.push(("sasl.enabled.mechanisms", "PLAIN"));
        pairs.push(extra);
        err(&pairs)
    };
    assert!(
        with_plain(("listener.name.other.sasl.enabled.mechanisms", "PLAIN"))
            .contains("per-listener settings")
    );
    assert!(
        with_plain(("listener.name.sasl_plaintext.num.partitions", "3"))
            .contains("per-listener settings")
    );
    assert!(with_plain(("sasl.server.max.receive.size", "4")).contains("between 8"));
}

#[test]
fn a_sasl_inter_broker_listener_logs_in_with_its_jaas_config() {
    let base = [
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:9400,REPL://127.0.0.1:9401",
        ),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,REPL:SASL_PLAINTEXT",
        ),
        ("inter.broker.listener.name", "repl"),
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
    ];
    let config = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = base.to_vec();
        pairs.extend_from_slice(extra);
        with(&pairs)
    };
    let err = |extra: &[(&'static str, &'static str)]| config(extra).unwrap_err().to_string();
    let jaas = "listener.name.repl.scram-sha-512.sasl.jaas.config";
    let cfg = config(&[
        ("sasl.mechanism.inter.broker.protocol", "scram-sha-512"),
        (
            jaas,
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="s3cret";"#,
        ),
    ])
    .unwrap();
    let security = &cfg.inter_broker_security;
    assert_eq!(security.protocol_name(), "SASL_PLAINTEXT");
    let login = security.sasl.as_ref().unwrap();
    assert_eq!(
        (
            login.mechanism.as_str(),
            login.username.as_str(),
            login.password.as_str()
        ),
        ("SCRAM-SHA-512", "broker", "s3cret")
    );
    // The password never shows in the login's Debug form.
    assert!(!format!("{security:?}").contains("s3cret"));

    // PLAIN takes PlainLoginModule; its user_<name> entries are ignored (with a warning).
    let cfg = config(&[
        ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
        (
            "listener.name.repl.plain.sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p" user_b="p";"#,
        ),
    ])
    .unwrap();
    assert_eq!(
        cfg.inter_broker_security.sasl.unwrap().mechanism,
        "PLAIN".to_string()
    );

    // Kafka's default mechanism, GSSAPI, is refused; so is one the listener does not offer,
    // OAUTHBEARER, a missing or wrong JAAS entry.
    assert!(err(&[]).contains("GSSAPI"), "{}", err(&[]));
    let e = err(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")]);
    assert!(
        e.contains("must be one of the inter-broker listener REPL's"),
        "{e}"
    );
    let e = err(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512")]);
    assert!(
        e.contains(jaas) && e.contains("ScramLoginModule required"),
        "{e}"
    );
    let e = err(&[
        ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
        (
            jaas,
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p";"#,
        ),
    ]);
    assert!(
        e.contains("logs in with org.apache.kafka.common.security.scram.ScramLoginModule"),
        "{e}"
    );
    let e = err(&[
        ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
        (
            jaas,
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="b";"#,
        ),
    ]);
    assert!(e.contains("no password"), "{e}");
    let e = err(&[
        ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
        (jaas, "ScramLoginModule required username=\"b\""),
    ]);
    assert!(e.contains("semi-colon"), "{e}");

    // A PLAINTEXT inter-broker listener needs none of it.
    let cfg = with(&[]).unwrap();
    assert_eq!(cfg.inter_broker_security.protocol_name(), "PLAINTEXT");
}

#[test]
fn listener_mistakes_are_refused_with_their_reason() {
    let err = |pairs: &[(&str, &str)]| with(pairs).unwrap_err().to_string();
    assert!(err(&[
        ("listeners", "SSL://127.0.0.1:9093"),
        ("listener.security.protocol.map", "SSL:SSL")
    ])
    .contains("ssl.keystore.location is needed"));
    assert!(err(&[
        ("listeners", "SSL://127.0.0.1:9093"),
        ("listener.security.protocol.map", "SSL:SSL"),
        ("ssl.keystore.type", "JKS")
    ])
    .contains("Keel reads PEM"));
    assert!(err(&[
        ("listeners", "INTERNAL://127.0.0.1:9093"),
        ("inter.broker.listener.name", "INTERNAL")
    ])
    .contains("no security protocol"));
    assert!(err(&[
        ("listeners", "PLAINTEXT://127.0.0.1:9093"),
        ("inter.broker.listener.name", "OTHER")
    ])
    .contains("not in listeners"));
    assert!(err(&[(
        "listeners",
        "PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9094"
    )])
    .contains("named twice"));
    assert!(err(&[
        ("listeners", "PLAINTEXT://127.0.0.1:9093"),
        ("listen", "127.0.0.1:9092")
    ])
    .contains("not both"));
    assert!(err(&[("listeners", "127.0.0.1:9093")]).contains("NAME://HOST:PORT"));
    assert!(err(&[
        ("listeners", "PLAINTEXT://127.0.0.1:9093"),
        ("advertised.listeners", "OTHER://x:1"),
    ])
    .contains("not in listeners"));
}

#[test]
fn add_scram_takes_kafkas_form() {
    let u = parse_add_scram("SCRAM-SHA-256=[name=admin,password=s3cret]").unwrap();
    assert_eq!(
        (
            u.mechanism,
            u.name.as_str(),
            u.password.as_str(),
            u.iterations
        ),
        (
            keel_auth::scram::Mechanism::ScramSha256,
            "admin",
            "s3cret",
            4096
        )
    );
    let u =
        parse_add_scram("SCRAM-SHA-512=[name=\"bob\",password=\"pw\",iterations=8192]").unwrap();
    assert_eq!((u.name.as_str(), u.iterations), ("bob", 8192));
    // The password never shows in a debug print of the settings.
    assert!(!format!("{u:?}").contains("pw\""));
    for bad in [
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-256=name=a,password=b",
        "SCRAM-SHA-256=[name=a]",
        "SCRAM-SHA-256=[name=a,password=b,iterations=100]",
        "SCRAM-SHA-256=[name=a,password=b,salt=x]",
    ] {
        assert!(parse_add_scram(bad).is_err(), "{bad}");
    }
}
