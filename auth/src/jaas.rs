//! Kafka's `sasl.jaas.config` value: one or more JAAS login module entries,
//! `<class> <flag> key="value" ... ;`, read as Kafka's `JaasConfig` reads them (a
//! `java.io.StreamTokenizer` with `//` and `/* */` comments, `"` or `'` quoted values with
//! backslash escapes, bare words for class names, flags, keys and values).
//!
//! A value must be a quoted string or a word that starts with a letter: a bare number
//! (`skew=1000`) has no text in Java's tokenizer and Kafka refuses it ("Value not specified for
//! key"), so this does too. Pure code over a string from the broker's configuration.

use std::collections::BTreeMap;

/// The control flag of a login module entry (`javax.security.auth.login`'s four).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlFlag {
    Required,
    Requisite,
    Sufficient,
    Optional,
}

/// One login module entry: `org.apache...ScramLoginModule required username="a";`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasEntry {
    pub login_module: String,
    pub flag: ControlFlag,
    /// The options; a key given twice keeps its last value (Kafka's `HashMap::put`).
    pub options: BTreeMap<String, String>,
}

/// Why a JAAS configuration was refused; the texts are Kafka's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JaasError {
    #[error("Login module not specified in JAAS config")]
    NoLoginModule,
    #[error("Login module control flag not specified in JAAS config")]
    NoControlFlag,
    #[error("Invalid login module control flag '{0}' in JAAS config")]
    InvalidControlFlag(String),
    #[error("Value not specified for key '{0}' in JAAS config")]
    NoValue(String),
    #[error("JAAS config entry not terminated by semi-colon")]
    NotTerminated,
    #[error("JAAS config: {0}")]
    Malformed(&'static str),
}

/// Parses a `sasl.jaas.config` value into its entries (at least one).
pub fn parse(text: &str) -> Result<Vec<JaasEntry>, JaasError> {
    let mut tokens = Tokenizer::new(text);
    let mut entries = Vec::new();
    loop {
        let login_module = match tokens.next()? {
            Token::Eof => break,
            Token::Word(w) | Token::Quoted(w) => w,
            Token::Number | Token::Char(_) => return Err(JaasError::NoLoginModule),
        };
        let flag = match tokens.next()? {
            Token::Eof => return Err(JaasError::NoControlFlag),
            Token::Word(w) | Token::Quoted(w) => control_flag(&w)?,
            Token::Number | Token::Char(_) => {
                return Err(JaasError::InvalidControlFlag(String::new()))
            }
        };
        let mut options = BTreeMap::new();
        loop {
            let key = match tokens.next()? {
                Token::Eof => return Err(JaasError::NotTerminated),
                Token::Char(';') => break,
                Token::Word(w) | Token::Quoted(w) => w,
                Token::Number | Token::Char(_) => return Err(JaasError::NoValue(String::new())),
            };
            if tokens.next()? != Token::Char('=') {
                return Err(JaasError::NoValue(key));
            }
            match tokens.next()? {
                Token::Word(v) | Token::Quoted(v) => {
                    options.insert(key, v);
                }
                _ => return Err(JaasError::NoValue(key)),
            }
        }
        entries.push(JaasEntry {
            login_module,
            flag,
            options,
        });
    }
    if entries.is_empty() {
        return Err(JaasError::NoLoginModule);
    }
    Ok(entries)
}

fn control_flag(word: &str) -> Result<ControlFlag, JaasError> {
    match word.to_ascii_uppercase().as_str() {
        "REQUIRED" => Ok(ControlFlag::Required),
        "REQUISITE" => Ok(ControlFlag::Requisite),
        "SUFFICIENT" => Ok(ControlFlag::Sufficient),
        "OPTIONAL" => Ok(ControlFlag::Optional),
        _ => Err(JaasError::InvalidControlFlag(word.to_string())),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Token {
    Eof,
    /// A bare word: a letter, `_` or `$` first, then those, digits, `.` and `-`.
    Word(String),
    /// A quoted string, escapes resolved.
    Quoted(String),
    /// A bare number, which has no text for Java's tokenizer.
    Number,
    Char(char),
}

/// The subset of `java.io.StreamTokenizer`, as Kafka configures it, that JAAS values use.
struct Tokenizer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

impl<'a> Tokenizer<'a> {
    fn new(text: &'a str) -> Self {
        Tokenizer {
            chars: text.chars().peekable(),
        }
    }

    fn next(&mut self) -> Result<Token, JaasError> {
        self.skip_blanks_and_comments()?;
        let Some(c) = self.chars.next() else {
            return Ok(Token::Eof);
        };
        if c == '"' || c == '\'' {
            return self.quoted(c).map(Token::Quoted);
        }
        let signed = c == '-'
            && self
                .chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.');
        if c.is_ascii_digit() || c == '.' || signed {
            while self
                .chars
                .next_if(|d| d.is_ascii_digit() || *d == '.')
                .is_some()
            {}
            return Ok(Token::Number);
        }
        if is_word_start(c) {
            let mut word = String::from(c);
            while let Some(d) = self.chars.next_if(|d| is_word_part(*d)) {
                word.push(d);
            }
            return Ok(Token::Word(word));
        }
        Ok(Token::Char(c))
    }

    fn skip_blanks_and_comments(&mut self) -> Result<(), JaasError> {
        loop {
            while self.chars.next_if(|c| (*c as u32) <= 0x20).is_some() {}
            if self.chars.peek() != Some(&'/') {
                return Ok(());
            }
            self.chars.next();
            if self.chars.next_if_eq(&'*').is_some() {
                let mut star = false;
                loop {
                    match self.chars.next() {
                        None => return Err(JaasError::Malformed("unterminated /* comment")),
                        Some('/') if star => break,
                        Some(c) => star = c == '*',
                    }
                }
            } else {
                // `//` and, Java's default comment character, a lone `/`: to the end of the line.
                while self.chars.next_if(|c| *c != '\n' && *c != '\r').is_some() {}
            }
        }
    }

    /// A quoted string up to its closing quote (or, as Java's tokenizer, the end of the line).
    fn quoted(&mut self, quote: char) -> Result<String, JaasError> {
        let mut out = String::new();
        loop {
            match self.chars.next() {
                None | Some('\n') | Some('\r') => return Ok(out),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => match self.chars.next() {
                    None => return Err(JaasError::Malformed("a quoted value ends with \\")),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('b') => out.push('\u{8}'),
                    Some('f') => out.push('\u{c}'),
                    Some('a') => out.push('\u{7}'),
                    Some('v') => out.push('\u{b}'),
                    Some(c) => out.push(c),
                },
                Some(c) => out.push(c),
            }
        }
    }
}

/// Java's word characters as Kafka sets them: letters, `_`, `$` (and `-`, but a `-` first is
/// a sign or a character of its own, as Java reads it).
fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || matches!(c, '_' | '$') || ('\u{a0}'..='\u{ff}').contains(&c)
}

fn is_word_part(c: char) -> bool {
    is_word_start(c) || c.is_ascii_digit() || matches!(c, '.' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kafka_login_module_lines() {
        let e = parse(
            "org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"alice\" password=\"a=b c;\" ;",
        )
        .unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].login_module,
            "org.apache.kafka.common.security.scram.ScramLoginModule"
        );
        assert_eq!(e[0].flag, ControlFlag::Required);
        assert_eq!(e[0].options["username"], "alice");
        assert_eq!(e[0].options["password"], "a=b c;");

        let e = parse(
            "/* unsecured */ org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
             REQUIRED // comment\n unsecuredValidatorRequiredScope='x y' debug=true \
             q=\"a\\\"b\\\\c\";\n b.B optional;",
        )
        .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].options["unsecuredValidatorRequiredScope"], "x y");
        assert_eq!(e[0].options["debug"], "true");
        assert_eq!(e[0].options["q"], "a\"b\\c");
        assert_eq!(e[1].login_module, "b.B");
        assert_eq!(e[1].flag, ControlFlag::Optional);
        assert!(e[1].options.is_empty());
    }

    #[test]
    fn refuses_what_kafka_refuses() {
        assert_eq!(parse(""), Err(JaasError::NoLoginModule));
        assert_eq!(parse("  // only a comment"), Err(JaasError::NoLoginModule));
        assert_eq!(parse("a.B"), Err(JaasError::NoControlFlag));
        assert_eq!(
            parse("a.B mandatory;"),
            Err(JaasError::InvalidControlFlag("mandatory".into()))
        );
        assert_eq!(parse("a.B required k=\"v\""), Err(JaasError::NotTerminated));
        assert_eq!(
            parse("a.B required skew=1000;"),
            Err(JaasError::NoValue("skew".into()))
        );
        assert_eq!(
            parse("a.B required k;"),
            Err(JaasError::NoValue("k".into()))
        );
        assert!(parse("a.B required /* open").is_err());
        assert!(parse("a.B required k=\"v\\").is_err());
    }
}
