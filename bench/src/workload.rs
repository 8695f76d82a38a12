//! The workload: what to create, what to send, how fast, and for how long.
//!
//! Workloads are TOML files (see `bench/workloads/`), every field optional with the defaults
//! of [`Workload::default`]; unknown fields are rejected so a typo cannot silently run the
//! default. `--set key=value` overrides any field by the same name ([`Workload::set`]), and
//! [`Workload::validate`] checks the result once, before anything touches the broker, with
//! messages that name the field. Every count and duration is bounded.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context};
use serde::{Deserialize, Deserializer, Serialize};

use crate::keys::KeyDistribution;
use crate::payload::{PayloadSource, HEADER_LEN};
use crate::result::WorkloadSummary;

/// Compression codecs a producer can use.
pub const COMPRESSIONS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

const TOPICS_MAX: u32 = 10_000;
const PARTITIONS_PER_TOPIC_MAX: u32 = 100_000;
const CLIENTS_PER_TOPIC_MAX: u32 = 10_000;
const CONSUMER_GROUPS_MAX: u32 = 1_000;
const MESSAGE_SIZE_MAX: u32 = 100 << 20;
const KEY_COUNT_MAX: u32 = 100_000_000;
/// Zipf keeps an 8-byte CDF entry per key and producer.
const ZIPF_KEY_COUNT_MAX: u32 = 10_000_000;
const BATCH_SIZE_MAX: u32 = 64 << 20;
const LINGER_MS_MAX: u64 = 60_000;
const MAX_IN_FLIGHT_MAX: u32 = 1_000;
/// Records of one transaction.
const TRANSACTION_RECORDS_MAX: u64 = 100_000_000;
/// Kafka's limit on an idempotent producer's in-flight requests per connection.
const IDEMPOTENT_IN_FLIGHT_MAX: u32 = 5;
/// Kafka's limit on a topic name's length.
const TOPIC_NAME_LEN_MAX: usize = 249;
/// One week: long enough for any soak, short enough to catch a unit mistake.
const DURATION_S_MAX: f64 = 7.0 * 24.0 * 3600.0;

/// One benchmark workload. Field names are the TOML keys and the `--set` keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    /// Names the run and its topics.
    pub name: String,
    pub topics: u32,
    pub partitions_per_topic: u32,
    pub topic_prefix: String,
    /// Bytes per record value, the 24-byte payload header included.
    pub message_size: u32,
    /// Fraction (0..=1) of each body a compressor can remove.
    pub payload_compressibility: f64,
    /// Take bodies from this file instead of generating them.
    pub payload_file: Option<String>,
    /// none | round-robin | random | zipf | zipf:<exponent>
    pub key_distribution: String,
    pub key_count: u32,
    pub producers_per_topic: u32,
    pub consumers_per_topic: u32,
    pub consumer_groups: u32,
    /// Records per second over all producers; 0 = as fast as possible.
    pub producer_rate: u64,
    /// If > 0, first measure the maximum throughput briefly, then run at this fraction of it.
    pub rate_fraction_of_max: f64,
    /// -1 (all), 0 or 1; "all" is accepted.
    #[serde(deserialize_with = "deserialize_acks")]
    pub acks: i16,
    /// none | gzip | snappy | lz4 | zstd
    pub compression: String,
    pub batch_size: u32,
    pub linger_ms: u64,
    pub max_in_flight: u32,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// Each producer stops after sending this many records for the measured phase (warm-up
    /// records not counted); 0 = no limit.
    pub max_messages: u64,
    /// If > 0, produce this long with consumers paused, then start them and measure the drain
    /// while producing continues.
    pub backlog_s: f64,
    /// Topic configs passed to CreateTopics (e.g. retention.bytes).
    pub topic_configs: BTreeMap<String, String>,
    /// Replicas of each partition when the run creates its topics; -1 = the broker's
    /// `default.replication.factor`.
    pub replication_factor: i16,
    pub delete_topics_after: bool,
    /// Create the topics (deleting leftovers first). When false the topics must already
    /// exist with `partitions_per_topic` partitions, and are left in place.
    pub create_topics: bool,
    /// Seed of keys and payload bodies.
    pub seed: u64,
    /// Idempotent producers: each producer gets a producer id (InitProducerId) and stamps
    /// every batch with it and per-partition sequence numbers. Needs acks = all.
    pub idempotent: bool,
    /// If > 0, each producer writes transactions of this many records (implies idempotent):
    /// a transactional id per producer, AddPartitionsToTxn before a partition's first batch
    /// in a transaction, EndTxn(commit) after the last record. Records count as published,
    /// and their publish latency ends, when the commit is answered; consumers read
    /// committed.
    pub transaction_records: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            name: "custom".to_owned(),
            topics: 1,
            partitions_per_topic: 4,
            topic_prefix: "keel-bench".to_owned(),
            message_size: 1024,
            payload_compressibility: 0.5,
            payload_file: None,
            key_distribution: "none".to_owned(),
            key_count: 10_000,
            producers_per_topic: 1,
            consumers_per_topic: 1,
            consumer_groups: 1,
            producer_rate: 0,
            rate_fraction_of_max: 0.0,
            acks: -1,
            compression: "none".to_owned(),
            batch_size: 16_384,
            linger_ms: 1,
            max_in_flight: 5,
            warmup_s: 5.0,
            duration_s: 30.0,
            max_messages: 0,
            backlog_s: 0.0,
            topic_configs: BTreeMap::new(),
            replication_factor: -1,
            delete_topics_after: true,
            create_topics: true,
            seed: 1,
            idempotent: false,
            transaction_records: 0,
        }
    }
}

/// `acks` as written in TOML: an integer or a string ("all", "-1", "0", "1").
#[derive(Deserialize)]
#[serde(untagged)]
enum AcksRepr {
    Int(i64),
    Str(String),
}

fn deserialize_acks<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i16, D::Error> {
    use serde::de::Error;
    match AcksRepr::deserialize(deserializer)? {
        AcksRepr::Int(n) => {
            i16::try_from(n).map_err(|_| D::Error::custom(format!("acks {n} is out of range")))
        }
        AcksRepr::Str(s) => parse_acks(&s).map_err(D::Error::custom),
    }
}

/// "all" → -1; otherwise an integer.
pub fn parse_acks(value: &str) -> anyhow::Result<i16> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("all") {
        return Ok(-1);
    }
    value
        .parse()
        .map_err(|_| anyhow::anyhow!("acks {value:?}: expected all, -1, 0 or 1"))
}

impl Workload {
    /// Parses a workload from TOML; missing fields take their defaults.
    pub fn from_toml_str(text: &str) -> anyhow::Result<Self> {
        toml::from_str(text).context("parsing workload TOML")
    }

    /// Reads a workload file. A file without `name` is named after the file (its stem).
    pub fn from_file(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading workload {}", path.display()))?;
        let mut workload = Self::from_toml_str(&text)
            .with_context(|| format!("in workload {}", path.display()))?;
        let named = toml::from_str::<toml::Table>(&text).is_ok_and(|t| t.contains_key("name"));
        if !named {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                workload.name = stem.to_owned();
            }
        }
        Ok(workload)
    }

    /// Overrides one field from the command line (`--set key=value`). Keys are the TOML field
    /// names (`-` may stand for `_`); `topic_configs.<config>=<value>` sets one topic config,
    /// `topic_configs=a=1,b=2` replaces them all (empty clears). Does not validate: call
    /// [`Workload::validate`] after the last override.
    pub fn set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let value = value.trim();
        let key = key.trim();
        let config = ["topic_configs.", "topic-configs."]
            .iter()
            .find_map(|prefix| key.strip_prefix(prefix));
        if let Some(config) = config {
            // The config name is passed on as typed (Kafka's names are dotted).
            let config = config.trim();
            if config.is_empty() {
                bail!("--set topic_configs.<config>=<value>: empty config name");
            }
            self.topic_configs
                .insert(config.to_owned(), value.to_owned());
            return Ok(());
        }
        let key = key.replace('-', "_");
        match key.as_str() {
            "name" => self.name = value.to_owned(),
            "topics" => self.topics = parse_num(&key, value)?,
            "partitions_per_topic" | "partitions" => self.partitions_per_topic = parse_num(&key, value)?,
            "topic_prefix" => self.topic_prefix = value.to_owned(),
            "message_size" => self.message_size = parse_num(&key, value)?,
            "payload_compressibility" => self.payload_compressibility = parse_num(&key, value)?,
            "payload_file" => {
                self.payload_file = (!value.is_empty() && value != "none").then(|| value.to_owned());
            }
            "key_distribution" => self.key_distribution = value.to_owned(),
            "key_count" => self.key_count = parse_num(&key, value)?,
            "producers_per_topic" => self.producers_per_topic = parse_num(&key, value)?,
            "consumers_per_topic" => self.consumers_per_topic = parse_num(&key, value)?,
            "consumer_groups" => self.consumer_groups = parse_num(&key, value)?,
            "producer_rate" => self.producer_rate = parse_num(&key, value)?,
            "rate_fraction_of_max" => self.rate_fraction_of_max = parse_num(&key, value)?,
            "acks" => self.acks = parse_acks(value)?,
            "compression" => self.compression = value.to_ascii_lowercase(),
            "batch_size" => self.batch_size = parse_num(&key, value)?,
            "linger_ms" => self.linger_ms = parse_num(&key, value)?,
            "max_in_flight" => self.max_in_flight = parse_num(&key, value)?,
            "warmup_s" => self.warmup_s = parse_num(&key, value)?,
            "duration_s" => self.duration_s = parse_num(&key, value)?,
            "max_messages" => self.max_messages = parse_num(&key, value)?,
            "backlog_s" => self.backlog_s = parse_num(&key, value)?,
            "topic_configs" => self.topic_configs = parse_config_list(value)?,
            "delete_topics_after" => self.delete_topics_after = parse_bool(&key, value)?,
            "create_topics" => self.create_topics = parse_bool(&key, value)?,
            "seed" => self.seed = parse_num(&key, value)?,
            "idempotent" => self.idempotent = parse_bool(&key, value)?,
            "transaction_records" => self.transaction_records = parse_num(&key, value)?,
            "replication_factor" => self.replication_factor = parse_num(&key, value)?,
            _ => bail!("--set {key}: unknown workload field (see bench/workloads/*.toml for the field names)"),
        }
        Ok(())
    }

    /// Checks every field and their combinations; the error names the field and the bound.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_names()?;
        self.validate_shape()?;
        self.validate_payload()?;
        self.validate_producer()?;
        self.validate_timing()?;
        Ok(())
    }

    fn validate_names(&self) -> anyhow::Result<()> {
        check_topic_chars("name", &self.name)?;
        check_topic_chars("topic_prefix", &self.topic_prefix)?;
        let longest = format!(
            "{}-{}-{}",
            self.topic_prefix,
            self.name,
            self.topics.saturating_sub(1)
        );
        if longest.len() > TOPIC_NAME_LEN_MAX {
            bail!("topic name {longest:?} is longer than Kafka's {TOPIC_NAME_LEN_MAX} characters: shorten name or topic_prefix");
        }
        for (config, value) in &self.topic_configs {
            if config.trim().is_empty() {
                bail!("topic_configs: empty config name (value {value:?})");
            }
        }
        Ok(())
    }

    fn validate_shape(&self) -> anyhow::Result<()> {
        check_range("topics", self.topics, 1, TOPICS_MAX)?;
        check_range(
            "partitions_per_topic",
            self.partitions_per_topic,
            1,
            PARTITIONS_PER_TOPIC_MAX,
        )?;
        check_range(
            "producers_per_topic",
            self.producers_per_topic,
            1,
            CLIENTS_PER_TOPIC_MAX,
        )?;
        check_range(
            "consumers_per_topic",
            self.consumers_per_topic,
            0,
            CLIENTS_PER_TOPIC_MAX,
        )?;
        if self.consumers_per_topic > 0 {
            check_range(
                "consumer_groups",
                self.consumer_groups,
                1,
                CONSUMER_GROUPS_MAX,
            )?;
        }
        if self.backlog_s > 0.0 && self.consumers_per_topic == 0 {
            bail!(
                "backlog_s = {} needs consumers to drain the backlog: consumers_per_topic is 0",
                self.backlog_s
            );
        }
        Ok(())
    }

    fn validate_payload(&self) -> anyhow::Result<()> {
        if self.message_size < HEADER_LEN as u32 {
            bail!(
                "message_size = {} is below the {HEADER_LEN}-byte payload header (magic, producer id, sequence, send time)",
                self.message_size
            );
        }
        check_range(
            "message_size",
            self.message_size,
            HEADER_LEN as u32,
            MESSAGE_SIZE_MAX,
        )?;
        let c = self.payload_compressibility;
        if !(0.0..=1.0).contains(&c) {
            bail!("payload_compressibility = {c} must be between 0 and 1");
        }
        if let Some(file) = &self.payload_file {
            if file.trim().is_empty() {
                bail!("payload_file is empty: remove it to generate bodies");
            }
        }
        let distribution = self.key_distribution()?;
        if distribution != KeyDistribution::None {
            let max = if matches!(distribution, KeyDistribution::Zipf { .. }) {
                ZIPF_KEY_COUNT_MAX
            } else {
                KEY_COUNT_MAX
            };
            check_range("key_count", self.key_count, 1, max)?;
        }
        Ok(())
    }

    fn validate_producer(&self) -> anyhow::Result<()> {
        let f = self.rate_fraction_of_max;
        if !(0.0..=1.0).contains(&f) {
            bail!("rate_fraction_of_max = {f} must be between 0 (off) and 1");
        }
        if f > 0.0 && self.producer_rate > 0 {
            bail!(
                "producer_rate = {} and rate_fraction_of_max = {f} are both set: use one (producer_rate = 0 to run at a fraction of the measured maximum)",
                self.producer_rate
            );
        }
        if !matches!(self.acks, -1..=1) {
            bail!("acks = {} must be all (-1), 0 or 1", self.acks);
        }
        if !COMPRESSIONS.contains(&self.compression.as_str()) {
            bail!(
                "compression = {:?} is not one of {}",
                self.compression,
                COMPRESSIONS.join(", ")
            );
        }
        check_range("batch_size", self.batch_size, 1, BATCH_SIZE_MAX)?;
        check_range("linger_ms", self.linger_ms, 0, LINGER_MS_MAX)?;
        check_range("max_in_flight", self.max_in_flight, 1, MAX_IN_FLIGHT_MAX)?;
        check_range(
            "transaction_records",
            self.transaction_records,
            0,
            TRANSACTION_RECORDS_MAX,
        )?;
        if self.is_idempotent() {
            let what = if self.is_transactional() {
                "transaction_records"
            } else {
                "idempotent"
            };
            if self.acks != -1 {
                bail!(
                    "{what} needs acks = all (Kafka's idempotent producer); acks is {}",
                    self.acks
                );
            }
            if self.max_in_flight > IDEMPOTENT_IN_FLIGHT_MAX {
                bail!(
                    "{what} allows at most {IDEMPOTENT_IN_FLIGHT_MAX} requests in flight per connection (the broker deduplicates the last five batches); max_in_flight is {}",
                    self.max_in_flight
                );
            }
        }
        Ok(())
    }

    fn validate_timing(&self) -> anyhow::Result<()> {
        check_seconds("warmup_s", self.warmup_s, false)?;
        check_seconds("duration_s", self.duration_s, true)?;
        check_seconds("backlog_s", self.backlog_s, false)?;
        Ok(())
    }

    /// Whether producers use producer ids and sequence numbers (idempotent or transactional).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent || self.is_transactional()
    }

    /// Whether producers write transactions (and consumers read committed).
    pub fn is_transactional(&self) -> bool {
        self.transaction_records > 0
    }

    /// The parsed key distribution.
    pub fn key_distribution(&self) -> anyhow::Result<KeyDistribution> {
        KeyDistribution::from_str(&self.key_distribution).context("key_distribution")
    }

    /// Where bodies come from: the file if one is given, else generated bytes.
    pub fn payload_source(&self) -> PayloadSource {
        match &self.payload_file {
            Some(file) => PayloadSource::File(PathBuf::from(file)),
            None => PayloadSource::Random {
                compressibility: self.payload_compressibility,
            },
        }
    }

    /// `{topic_prefix}-{name}-{i}` for each topic.
    pub fn topic_names(&self) -> Vec<String> {
        (0..self.topics)
            .map(|i| format!("{}-{}-{i}", self.topic_prefix, self.name))
            .collect()
    }

    pub fn total_partitions(&self) -> u64 {
        u64::from(self.topics) * u64::from(self.partitions_per_topic)
    }

    pub fn total_producers(&self) -> u64 {
        u64::from(self.topics) * u64::from(self.producers_per_topic)
    }

    /// Consumers over all topics and groups.
    pub fn total_consumers(&self) -> u64 {
        u64::from(self.topics)
            * u64::from(self.consumers_per_topic)
            * u64::from(self.consumer_groups)
    }

    /// The header of a report.
    pub fn summary(&self) -> WorkloadSummary {
        WorkloadSummary {
            name: self.name.clone(),
            topics: self.topics,
            partitions_per_topic: self.partitions_per_topic,
            message_size: self.message_size,
            producers_per_topic: self.producers_per_topic,
            consumers_per_topic: self.consumers_per_topic,
            acks: self.acks,
            compression: self.compression.clone(),
            batch_size: self.batch_size,
            linger_ms: self.linger_ms,
            target_rate: self.producer_rate,
            warmup_s: self.warmup_s,
            duration_s: self.duration_s,
            idempotent: self.is_idempotent(),
            transaction_records: self.transaction_records,
        }
    }
}

fn parse_num<T: FromStr>(key: &str, value: &str) -> anyhow::Result<T>
where
    T::Err: Display,
{
    let cleaned = value.replace('_', "");
    cleaned
        .parse::<T>()
        .map_err(|e| anyhow::anyhow!("--set {key}={value}: {e}"))
}

fn parse_bool(key: &str, value: &str) -> anyhow::Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => bail!("--set {key}={value}: expected true or false"),
    }
}

/// `a=1,b=2` → {a: 1, b: 2}; empty → {}.
fn parse_config_list(value: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut configs = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((config, v)) = pair.split_once('=') else {
            bail!(
                "--set topic_configs={value}: expected config=value[,config=value..], got {pair:?}"
            );
        };
        if config.trim().is_empty() {
            bail!("--set topic_configs={value}: empty config name");
        }
        configs.insert(config.trim().to_owned(), v.trim().to_owned());
    }
    Ok(configs)
}

fn check_topic_chars(field: &str, value: &str) -> anyhow::Result<()> {
    if value.is_empty() {
        bail!("{field} is empty");
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        bail!("{field} = {value:?}: {bad:?} is not allowed in a topic name (letters, digits, '.', '_', '-')");
    }
    Ok(())
}

fn check_range<T: PartialOrd + Display + Copy>(
    field: &str,
    value: T,
    min: T,
    max: T,
) -> anyhow::Result<()> {
    if !(min..=max).contains(&value) {
        bail!("{field} = {value} is outside {min}..={max}");
    }
    Ok(())
}

fn check_seconds(field: &str, value: f64, positive: bool) -> anyhow::Result<()> {
    let ok = value.is_finite()
        && value <= DURATION_S_MAX
        && if positive { value > 0.0 } else { value >= 0.0 };
    if !ok {
        let lower = if positive { "> 0" } else { ">= 0" };
        bail!("{field} = {value} must be {lower} and at most {DURATION_S_MAX} seconds");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workloads_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads")
    }

    #[test]
    fn empty_toml_is_the_default_and_valid() {
        let w = Workload::from_toml_str("").unwrap();
        assert_eq!(w, Workload::default());
        w.validate().unwrap();
        assert_eq!(w.topic_names(), ["keel-bench-custom-0"]);
    }

    #[test]
    fn parses_fields_and_acks_all() {
        let w = Workload::from_toml_str(
            r#"
            name = "t"
            topics = 3
            acks = "all"
            compression = "lz4"
            key_distribution = "zipf:1.1"
            [topic_configs]
            "retention.bytes" = "1048576"
            "#,
        )
        .unwrap();
        w.validate().unwrap();
        assert_eq!(w.acks, -1);
        assert_eq!(
            w.topic_names(),
            ["keel-bench-t-0", "keel-bench-t-1", "keel-bench-t-2"]
        );
        assert_eq!(w.topic_configs["retention.bytes"], "1048576");
        assert_eq!(
            w.key_distribution().unwrap(),
            KeyDistribution::Zipf { exponent: 1.1 }
        );
        assert_eq!(Workload::from_toml_str("acks = 1").unwrap().acks, 1);
        assert_eq!(Workload::from_toml_str("acks = \"0\"").unwrap().acks, 0);
        assert!(Workload::from_toml_str("acks = \"some\"").is_err());
        assert!(Workload::from_toml_str("acks = 70000").is_err());
    }

    #[test]
    fn rejects_unknown_fields() {
        let err = Workload::from_toml_str("mesage_size = 10").unwrap_err();
        assert!(format!("{err:#}").contains("mesage_size"), "{err:#}");
    }

    #[test]
    fn round_trips_through_toml() {
        let mut w = Workload::default();
        w.topic_configs
            .insert("retention.bytes".into(), "100".into());
        w.payload_file = Some("/tmp/x".into());
        let text = toml::to_string(&w).unwrap();
        assert_eq!(Workload::from_toml_str(&text).unwrap(), w);
    }

    #[test]
    fn set_overrides_every_field() {
        let mut w = Workload::default();
        let table = toml::Table::try_from(&w).unwrap();
        // Every serialized scalar field can be set from its own text.
        for (key, value) in &table {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Table(_) => continue,
                other => other.to_string(),
            };
            w.set(key, &text).unwrap_or_else(|e| panic!("{key}: {e:#}"));
        }
        assert_eq!(w, Workload::default());

        w.set("message-size", "100").unwrap();
        w.set("acks", "all").unwrap();
        w.set("producer_rate", "100_000").unwrap();
        w.set("payload_compressibility", "0.9").unwrap();
        w.set("delete_topics_after", "false").unwrap();
        w.set("payload_file", "/tmp/body").unwrap();
        w.set("topic_configs.retention.bytes", "1000").unwrap();
        w.set("topic_configs.segment.bytes", "500").unwrap();
        w.set("partitions", "12").unwrap();
        assert_eq!(w.message_size, 100);
        assert_eq!(w.acks, -1);
        assert_eq!(w.producer_rate, 100_000);
        assert_eq!(w.payload_compressibility, 0.9);
        assert!(!w.delete_topics_after);
        assert_eq!(w.payload_file.as_deref(), Some("/tmp/body"));
        assert_eq!(w.topic_configs.len(), 2);
        assert_eq!(w.partitions_per_topic, 12);
        w.set("payload_file", "none").unwrap();
        assert_eq!(w.payload_file, None);
        w.set("topic_configs", "a=1, b = 2").unwrap();
        assert_eq!(w.topic_configs.len(), 2);
        assert_eq!(w.topic_configs["b"], "2");
        w.set("topic_configs", "").unwrap();
        assert!(w.topic_configs.is_empty());

        assert!(w.set("no_such_field", "1").is_err());
        assert!(w.set("topics", "-1").is_err());
        assert!(w.set("topics", "many").is_err());
        assert!(w.set("delete_topics_after", "maybe").is_err());
        assert!(w.set("topic_configs", "novalue").is_err());
    }

    fn invalid(key: &str, value: &str) -> String {
        let mut w = Workload::default();
        w.set(key, value).unwrap();
        let err = w
            .validate()
            .expect_err(&format!("{key}={value} should be invalid"));
        format!("{err:#}")
    }

    #[test]
    fn validate_names_the_problem() {
        assert!(invalid("message_size", "23").contains("message_size"));
        assert!(invalid("partitions_per_topic", "0").contains("partitions_per_topic"));
        assert!(invalid("producers_per_topic", "0").contains("producers_per_topic"));
        assert!(invalid("topics", "0").contains("topics"));
        assert!(invalid("compression", "brotli").contains("compression"));
        assert!(invalid("key_distribution", "hash").contains("key_distribution"));
        assert!(invalid("duration_s", "0").contains("duration_s"));
        assert!(invalid("duration_s", "NaN").contains("duration_s"));
        assert!(invalid("warmup_s", "-1").contains("warmup_s"));
        assert!(invalid("acks", "2").contains("acks"));
        assert!(invalid("payload_compressibility", "1.5").contains("payload_compressibility"));
        assert!(invalid("rate_fraction_of_max", "2").contains("rate_fraction_of_max"));
        assert!(invalid("name", "a b").contains("name"));
        assert!(invalid("max_in_flight", "0").contains("max_in_flight"));
        assert!(invalid("batch_size", "0").contains("batch_size"));

        let mut w = Workload::default();
        w.set("key_distribution", "random").unwrap();
        w.set("key_count", "0").unwrap();
        assert!(format!("{:#}", w.validate().unwrap_err()).contains("key_count"));

        let mut w = Workload::default();
        w.set("producer_rate", "1000").unwrap();
        w.set("rate_fraction_of_max", "0.5").unwrap();
        assert!(w.validate().is_err());

        let mut w = Workload::default();
        w.set("consumers_per_topic", "0").unwrap();
        w.validate().unwrap();
        w.set("backlog_s", "10").unwrap();
        assert!(format!("{:#}", w.validate().unwrap_err()).contains("backlog_s"));

        let mut w = Workload::default();
        w.set("name", &"x".repeat(300)).unwrap();
        assert!(w.validate().is_err());
    }

    #[test]
    fn summary_copies_the_header_fields() {
        let mut w = Workload::default();
        w.set("producer_rate", "5000").unwrap();
        w.set("compression", "zstd").unwrap();
        let s = w.summary();
        assert_eq!(s.name, "custom");
        assert_eq!(s.target_rate, 5000);
        assert_eq!(s.compression, "zstd");
        assert_eq!(s.acks, -1);
        assert_eq!(s.partitions_per_topic, 4);
        assert_eq!(s.duration_s, 30.0);
    }

    #[test]
    fn from_file_names_unnamed_workloads_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("my-test.toml");
        std::fs::write(&path, "topics = 2\n").unwrap();
        let w = Workload::from_file(&path).unwrap();
        assert_eq!(w.name, "my-test");
        assert_eq!(w.topics, 2);
        std::fs::write(&path, "name = \"given\"\n").unwrap();
        assert_eq!(Workload::from_file(&path).unwrap().name, "given");
        assert!(Workload::from_file(dir.path().join("missing.toml")).is_err());
    }

    #[test]
    fn idempotent_and_transactional_options() {
        let mut w = Workload::default();
        assert!(!w.is_idempotent() && !w.is_transactional());
        w.set("idempotent", "true").unwrap();
        assert!(w.is_idempotent() && !w.is_transactional());
        w.validate().unwrap();
        w.set("acks", "1").unwrap();
        let e = w.validate().unwrap_err().to_string();
        assert!(e.contains("idempotent") && e.contains("acks"), "{e}");

        let mut w = Workload::default();
        w.set("transaction-records", "100").unwrap();
        assert!(w.is_idempotent() && w.is_transactional());
        w.validate().unwrap();
        let s = w.summary();
        assert!(s.idempotent);
        assert_eq!(s.transaction_records, 100);
        w.set("max_in_flight", "6").unwrap();
        let e = w.validate().unwrap_err().to_string();
        assert!(
            e.contains("transaction_records") && e.contains("max_in_flight"),
            "{e}"
        );

        // The shipped variants differ from max-throughput only in the producer option.
        let dir = workloads_dir();
        let base = Workload::from_file(dir.join("max-throughput.toml")).unwrap();
        for (file, idempotent, records) in [
            ("idempotent.toml", true, 0),
            ("transactions-100.toml", false, 100),
        ] {
            let mut v = Workload::from_file(dir.join(file)).unwrap();
            assert_eq!((v.idempotent, v.transaction_records), (idempotent, records));
            v.name = base.name.clone();
            v.idempotent = false;
            v.transaction_records = 0;
            assert_eq!(
                v, base,
                "{file} is max-throughput.toml plus its producer option"
            );
        }
    }

    #[test]
    fn shipped_workloads_parse_and_validate() {
        let expected = [
            "max-throughput",
            "fixed-rate-latency",
            "many-partitions",
            "small-messages",
            "telemetry",
            "fifty-producers",
            "keyed",
            "retention-at-limit",
            "backlog-drain",
            "idempotent",
            "transactions-100",
        ];
        let mut found = Vec::new();
        for entry in std::fs::read_dir(workloads_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let w =
                Workload::from_file(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            w.validate()
                .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            assert_eq!(
                w.name,
                stem,
                "{}: name should match the file",
                path.display()
            );
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.starts_with('#'),
                "{}: starts with a comment header",
                path.display()
            );
            found.push(stem);
        }
        for name in expected {
            assert!(
                found.iter().any(|f| f == name),
                "missing workloads/{name}.toml"
            );
        }
    }
}
