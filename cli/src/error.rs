//! The CLI's one error type. Every failure a command can meet ends here and becomes a line on
//! stderr and an exit code: 2 for a command line that does not parse, 1 for everything else.

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is wrong; the text says how.
    #[error("{0}")]
    Usage(String),
    /// No TCP connection to a broker.
    #[error(
        "cannot connect to {addr}: {source} (is a broker listening there? see --bootstrap-server)"
    )]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    /// A connection failed midway (reset, timeout).
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    /// A broker answered with a Kafka error code.
    #[error("{context}: {}{}", error_name(*.code), .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kafka {
        context: String,
        code: i16,
        message: Option<String>,
    },
    /// A broker's answer could not be decoded or made no sense.
    #[error("{0}")]
    Protocol(String),
    /// A response body that does not decode at the version asked for.
    #[error("{0}")]
    Decode(String),
    /// The broker does not serve any version of an API that this client speaks.
    #[error("broker {addr} does not support {api} in a version keel speaks (broker: {broker}, keel: v{client_min}-v{client_max})")]
    Unsupported {
        addr: String,
        api: String,
        broker: String,
        client_min: i16,
        client_max: i16,
    },
    /// The command ran but its answer is a failure (a group that is not empty, an unhealthy
    /// cluster); the text says what.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    pub fn kafka(context: impl Into<String>, code: i16, message: Option<String>) -> CliError {
        CliError::Kafka {
            context: context.into(),
            code,
            message: message.filter(|m| !m.is_empty()),
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

/// Turns a non-zero error code into an error; 0 is Ok.
pub fn check(code: i16, context: impl FnOnce() -> String, message: Option<String>) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(CliError::kafka(context(), code, message))
    }
}

/// A Kafka error code by its Kafka name, e.g. 36 -> `TOPIC_ALREADY_EXISTS`.
pub fn error_name(code: i16) -> String {
    keel_vocab::ErrorCode::from_code(code).name()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names() {
        assert_eq!(error_name(36), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(68), "NON_EMPTY_GROUP");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(9999), "UNKNOWN_ERROR_CODE_9999");
    }

    #[test]
    fn kafka_error_text_names_the_code() {
        let e = CliError::kafka("create topic t", 36, Some("exists".into()));
        assert_eq!(
            e.to_string(),
            "create topic t: TOPIC_ALREADY_EXISTS (exists)"
        );
        assert_eq!(e.exit_code(), 1);
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
    }
}
