//! Kafka's error codes.
//!
//! The one table of Kafka's codes, names and retriability is kafka-protocol's
//! [`ResponseError`], generated from Kafka's own list; [`ErrorCode`] is a code as Keel carries
//! it: typed, `NONE` included, and turned into the wire's `i16` only at the edge.

pub use kafka_protocol::ResponseError;

/// A Kafka error code; [`ErrorCode::NONE`] is success.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct ErrorCode(i16);

impl ErrorCode {
    pub const NONE: ErrorCode = ErrorCode(0);

    /// The code of one of Kafka's errors.
    pub const fn of(e: ResponseError) -> ErrorCode {
        ErrorCode(e.code())
    }

    /// A code read off the wire or a record, known to Keel or not.
    pub const fn from_code(code: i16) -> ErrorCode {
        ErrorCode(code)
    }

    /// The code as the wire carries it.
    pub const fn code(self) -> i16 {
        self.0
    }

    pub const fn is_none(self) -> bool {
        self.0 == 0
    }

    /// The error, `None` for [`ErrorCode::NONE`].
    pub const fn error(self) -> Option<ResponseError> {
        ResponseError::try_from_code(self.0)
    }

    /// Kafka's name for the code, as its `Errors` enum spells it (`NOT_COORDINATOR`);
    /// `UNKNOWN_ERROR_CODE_n` for a code not in the table.
    pub fn name(self) -> String {
        match self.error() {
            None => "NONE".to_string(),
            Some(ResponseError::Unknown(n)) => format!("UNKNOWN_ERROR_CODE_{n}"),
            Some(e) => upper_snake(&format!("{e:?}")),
        }
    }

    /// Whether a client may retry the request as it is (Kafka's `RetriableException`s).
    pub const fn is_retriable(self) -> bool {
        match self.error() {
            None => false,
            Some(e) => e.is_retriable(),
        }
    }
}

impl From<ResponseError> for ErrorCode {
    fn from(e: ResponseError) -> ErrorCode {
        ErrorCode::of(e)
    }
}

impl From<ErrorCode> for i16 {
    fn from(e: ErrorCode) -> i16 {
        e.code()
    }
}

impl std::fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// `NotCoordinator` → `NOT_COORDINATOR`.
fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_names_and_retriability_are_kafkas() {
        let c = ErrorCode::of(ResponseError::NotCoordinator);
        assert_eq!(c.code(), 16);
        assert_eq!(c.name(), "NOT_COORDINATOR");
        assert!(c.is_retriable());
        let c = ErrorCode::of(ResponseError::InvalidProducerEpoch);
        assert_eq!(
            (c.code(), c.name().as_str()),
            (47, "INVALID_PRODUCER_EPOCH")
        );
        assert!(!c.is_retriable());
        assert_eq!(ErrorCode::NONE.name(), "NONE");
        assert!(ErrorCode::NONE.is_none() && !ErrorCode::NONE.is_retriable());
        assert_eq!(ErrorCode::from_code(-1).name(), "UNKNOWN_SERVER_ERROR");
        assert_eq!(
            ErrorCode::from_code(30_000).name(),
            "UNKNOWN_ERROR_CODE_30000"
        );
        assert_eq!(
            format!("{:?}", ErrorCode::from_code(3)),
            "UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
        assert_eq!(i16::from(ErrorCode::of(ResponseError::UnknownMemberId)), 25);
    }
}

/// Why bytes are not a readable record batch (from the network or the disk).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    #[error("{0}")]
    Corrupt(String),
}
