//! The raft crate's one error enum. The broker maps `ApplyError` codes to Kafka answers.

/// Why bytes from the log, a snapshot or the network are not a valid record batch.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("metadata record batch does not verify: {0}")]
    Invalid(String),
    #[error("metadata record {index}: {what}")]
    Field { index: usize, what: String },
}

/// Errors of the metadata node.
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Corrupt(String),
    #[error("config: {0}")]
    Config(String),
    #[error("metadata node stopped")]
    Stopped,
}
