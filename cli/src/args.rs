//! Command-line parsing for the admin commands: flags with values (`--flag V` or
//! `--flag=V`), repeatable flags, switches, short aliases, and positionals. Each command
//! declares its flags; anything else is a usage error, never silently ignored.

use crate::error::{CliError, Result};

/// What a command accepts.
pub struct Spec<'a> {
    /// Flags that take a value (long names, with the leading `--`).
    pub values: &'a [&'a str],
    /// Flags that take none.
    pub switches: &'a [&'a str],
}

/// Flags every command accepts.
pub const COMMON_VALUES: &[&str] = &[
    "--bootstrap-server",
    "--request-timeout-ms",
    "--command-config",
    "--sasl-password-env",
];
pub const COMMON_SWITCHES: &[&str] = &["--json", "--help"];

/// Short aliases and Kafka-tool spellings, mapped to one long name.
fn canonical(flag: &str) -> &str {
    match flag {
        "-b" | "--bootstrap-servers" | "--broker-list" => "--bootstrap-server",
        "-t" => "--topic",
        "-p" => "--partition",
        "-g" => "--group",
        "-h" => "--help",
        "-c" => "--max-messages",
        "-f" => "--format",
        "-k" => "--key",
        "-H" => "--header",
        "--reassignment-json-file" => "--plan",
        other => other,
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub positionals: Vec<String>,
    /// (flag, value) in command-line order; switches have an empty value.
    flags: Vec<(String, String)>,
}

impl Parsed {
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|(f, _)| f == flag)
    }

    /// The last value given for `flag`.
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(f, _)| f == flag)
            .map(|(_, v)| v.as_str())
    }

    /// Every value given for a repeatable flag, in order.
    pub fn all(&self, flag: &str) -> Vec<&str> {
        self.flags
            .iter()
            .filter(|(f, _)| f == flag)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A value parsed as a number, with a usage error naming the flag.
    pub fn number<T: std::str::FromStr>(&self, flag: &str) -> Result<Option<T>> {
        self.get(flag)
            .map(|v| {
                v.parse()
                    .map_err(|_| CliError::Usage(format!("{flag} needs a number, got {v:?}")))
            })
            .transpose()
    }

    /// Exactly one name, given as the positional or with `flag`.
    pub fn one_name(&self, flag: &str, missing: &str) -> Result<String> {
        let mut names: Vec<&str> = self.positionals.iter().map(String::as_str).collect();
        names.extend(self.all(flag));
        match names.as_slice() {
            [one] => Ok(one.to_string()),
            _ => Err(CliError::Usage(missing.to_string())),
        }
    }

    pub fn bootstrap(&self) -> &str {
        self.get("--bootstrap-server").unwrap_or("127.0.0.1:9092")
    }

    pub fn json(&self) -> bool {
        self.has("--json")
    }
}

pub fn parse(args: &[String], spec: &Spec) -> Result<Parsed> {
    let mut out = Parsed::default();
    let mut iter = args.iter();
    let takes_value = |f: &str| spec.values.contains(&f) || COMMON_VALUES.contains(&f);
    let is_switch = |f: &str| spec.switches.contains(&f) || COMMON_SWITCHES.contains(&f);
    let mut only_positionals = false;
    while let Some(arg) = iter.next() {
        if only_positionals || !arg.starts_with('-') || arg == "-" || is_negative_number(arg) {
            out.positionals.push(arg.clone());
            continue;
        }
        if arg == "--" {
            only_positionals = true;
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let name = canonical(name);
        if takes_value(name) {
            let value = match inline {
                Some(v) => v,
                None => iter
                    .next()
                    .cloned()
                    .ok_or_else(|| CliError::Usage(format!("{name} needs a value")))?,
            };
            out.flags.push((name.to_string(), value));
        } else if is_switch(name) {
            if inline.is_some() {
                return Err(CliError::Usage(format!("{name} takes no value")));
            }
            out.flags.push((name.to_string(), String::new()));
        } else {
            return Err(CliError::Usage(format!("unknown option {arg:?}")));
        }
    }
    Ok(out)
}

fn is_negative_number(arg: &str) -> bool {
    arg.len() > 1 && arg[1..].bytes().all(|b| b.is_ascii_digit())
}

/// Splits `k=v` (a config or a header).
pub fn key_value(text: &str, flag: &str) -> Result<(String, String)> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| CliError::Usage(format!("{flag} needs KEY=VALUE, got {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    const SPEC: Spec = Spec {
        values: &["--partitions", "--config", "--topic", "--header"],
        switches: &["--from-beginning"],
    };

    #[test]
    fn values_switches_aliases_and_positionals() {
        let p = parse(
            &strings(&[
                "orders",
                "-b",
                "h:1",
                "--partitions=3",
                "--config",
                "a=1",
                "--config",
                "b=2",
                "--json",
                "--from-beginning",
                "-t",
                "x",
            ]),
            &SPEC,
        )
        .unwrap();
        assert_eq!(p.positionals, vec!["orders"]);
        assert_eq!(p.bootstrap(), "h:1");
        assert_eq!(p.number::<i32>("--partitions").unwrap(), Some(3));
        assert_eq!(p.all("--config"), vec!["a=1", "b=2"]);
        assert!(p.json());
        assert!(p.has("--from-beginning"));
        assert_eq!(p.get("--topic"), Some("x"));
        assert_eq!(p.get("--header"), None);
    }

    #[test]
    fn defaults_and_errors() {
        let p = parse(&[], &SPEC).unwrap();
        assert_eq!(p.bootstrap(), "127.0.0.1:9092");
        assert!(!p.json());
        let err = parse(&strings(&["--bogus"]), &SPEC).unwrap_err();
        assert_eq!(err.to_string(), "unknown option \"--bogus\"");
        assert_eq!(err.exit_code(), 2);
        let err = parse(&strings(&["--partitions"]), &SPEC).unwrap_err();
        assert_eq!(err.to_string(), "--partitions needs a value");
        let p = parse(&strings(&["--partitions", "x"]), &SPEC).unwrap();
        assert!(p.number::<i32>("--partitions").is_err());
        let err = parse(&strings(&["--json=1"]), &SPEC).unwrap_err();
        assert_eq!(err.to_string(), "--json takes no value");
    }

    #[test]
    fn negative_numbers_and_double_dash_are_positionals() {
        let p = parse(&strings(&["-5", "--", "--json"]), &SPEC).unwrap();
        assert_eq!(p.positionals, vec!["-5", "--json"]);
        assert!(!p.json());
    }

    #[test]
    fn key_values() {
        assert_eq!(
            key_value("retention.ms=1000", "--config").unwrap(),
            ("retention.ms".to_string(), "1000".to_string())
        );
        assert_eq!(
            key_value("h=a=b", "--header").unwrap(),
            ("h".to_string(), "a=b".to_string())
        );
        assert!(key_value("novalue", "--config").is_err());
        assert!(key_value("=v", "--config").is_err());
    }
}
