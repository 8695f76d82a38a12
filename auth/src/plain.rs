//! PLAIN (RFC 4616): one client message, `[authzid] NUL authcid NUL passwd`.

/// What a PLAIN client sent.
#[derive(Debug, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    /// The identity to act as; empty when not given. Kafka accepts it only equal to `user`.
    pub authzid: &'a str,
    pub user: &'a str,
    pub password: &'a [u8],
}

/// Why a PLAIN message was refused (before any credential is looked at).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlainError {
    #[error("invalid PLAIN message: {0}")]
    Malformed(&'static str),
    #[error("authorization id differs from the user name")]
    AuthzidMismatch,
}

/// The longest PLAIN message accepted (each field at most 255 bytes in RFC 4616, plus the two
/// separators).
pub const MAX_MESSAGE: usize = 3 * 255 + 2;

/// Parses a PLAIN message: exactly two NUL separators, a non-empty UTF-8 user, a non-empty
/// password, and an authzid that is empty or the user itself (as Kafka's PlainSaslServer).
pub fn parse(msg: &[u8]) -> Result<PlainMessage<'_>, PlainError> {
    if msg.len() > MAX_MESSAGE {
        return Err(PlainError::Malformed("message too long"));
    }
    let mut parts = msg.splitn(3, |&b| b == 0);
    let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(PlainError::Malformed(
            "expected authzid NUL user NUL password",
        ));
    };
    if password.contains(&0) {
        return Err(PlainError::Malformed("more than two separators"));
    }
    let authzid =
        std::str::from_utf8(authzid).map_err(|_| PlainError::Malformed("authzid is not UTF-8"))?;
    let user = std::str::from_utf8(user).map_err(|_| PlainError::Malformed("user is not UTF-8"))?;
    if user.is_empty() {
        return Err(PlainError::Malformed("empty user name"));
    }
    if password.is_empty() {
        return Err(PlainError::Malformed("empty password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(PlainError::AuthzidMismatch);
    }
    Ok(PlainMessage {
        authzid,
        user,
        password,
    })
}

/// A client's PLAIN message for `user` and `password`, without an authzid.
pub fn client_message(user: &str, password: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(user.len() + password.len() + 2);
    out.push(0);
    out.extend_from_slice(user.as_bytes());
    out.push(0);
    out.extend_from_slice(password);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_clients_send_and_refuses_the_rest() {
        let m = client_message("alice", b"s3cret");
        assert_eq!(
            parse(&m),
            Ok(PlainMessage {
                authzid: "",
                user: "alice",
                password: b"s3cret"
            })
        );
        assert_eq!(parse(b"alice\0alice\0pw").unwrap().authzid, "alice");
        assert_eq!(parse(b"bob\0alice\0pw"), Err(PlainError::AuthzidMismatch));
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0\0pw",
            b"\0alice\0",
            b"\0alice\0pw\0x",
            b"\0\xff\0pw",
        ] {
            assert!(
                matches!(parse(bad), Err(PlainError::Malformed(_))),
                "{bad:?}"
            );
        }
        let long = client_message("u", &vec![b'p'; MAX_MESSAGE]);
        assert!(matches!(parse(&long), Err(PlainError::Malformed(_))));
    }
}
