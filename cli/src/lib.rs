//! `keel topic|produce|consume|group|cluster|user`: admin commands over the Kafka protocol that work
//! against any Kafka-compatible broker (Keel, Kafka, Redpanda, ...). A blocking client
//! (`client`) negotiates API versions with each broker and routes partition requests to
//! leaders and group requests to coordinators; each command prints an aligned table, or JSON
//! with `--json`. Runs on the caller's thread; nothing here touches a broker's internals.
//!
//! Exit codes: 0 success, 1 a failure (a Kafka error, which is printed by its Kafka name, an
//! unreachable broker, an unhealthy cluster), 2 a command line that does not parse.

mod args;
mod client;
mod cluster;
mod consume;
mod decommission;
mod error;
#[cfg(test)]
mod fake_broker;
mod group;
mod ops;
mod plan;
mod produce;
mod reassign;
mod records;
mod security;
mod table;
mod topic;
mod user;

use std::io::Write;
use std::time::Duration;

pub use error::{CliError, Result};

/// The first arguments of `keel` that run a command of this crate.
pub const COMMANDS: &[&str] = &["topic", "produce", "consume", "group", "cluster", "user"];

pub fn is_command(first_arg: &str) -> bool {
    COMMANDS.contains(&first_arg)
}

/// Lines for `keel --help`.
pub const HELP: &str = "\
admin commands (over the Kafka protocol, against any Kafka-compatible broker; each takes
-b/--bootstrap-server HOST:PORT (default 127.0.0.1:9092) and --json; see keel COMMAND --help):
  keel topic create|list|describe|alter-config|add-partitions|delete
  keel topic reassign generate|execute|verify|cancel   move partitions (Kafka's plan file)
  keel produce TOPIC        records from stdin (one per line) or --value
  keel consume TOPIC        records to stdout (--format, --json)
  keel group list|describe|lag|reset-offsets|delete
  keel cluster info|health|elect-leaders
  keel cluster decommission BROKER   move every replica off a broker
  keel user create|delete|list       SCRAM users (password from a file or a variable)
";

/// Runs `args` (starting with the command, e.g. `["topic", "list"]`); returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = dispatch(&args, &mut out);
    let _ = out.flush();
    match result {
        Ok(code) => code,
        // The reader went away (`| head`): nothing left to say to anyone.
        Err(CliError::Io { addr, source })
            if addr == "stdout" && source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            0
        }
        Err(e) => {
            let command = args.first().map(String::as_str).unwrap_or("");
            eprintln!("keel {command}: {e}");
            if matches!(e, CliError::Usage(_)) {
                eprintln!("see keel {command} --help");
            }
            e.exit_code()
        }
    }
}

fn dispatch(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let (command, rest) = args
        .split_first()
        .ok_or_else(|| CliError::Usage("no command".into()))?;
    match command.as_str() {
        "topic" => topic::run(rest, out),
        "produce" => produce::run(rest, out),
        "consume" => consume::run(rest, out),
        "group" => group::run(rest, out),
        "cluster" => cluster::run(rest, out),
        "user" => user::run(rest, out),
        other => Err(CliError::Usage(format!("unknown command {other:?}"))),
    }
}

/// Writes command output; a closed stdout (`| head`) ends the command quietly.
fn emit(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .map_err(|source| CliError::Io {
            addr: "stdout".into(),
            source,
        })
}

fn emit_json(out: &mut dyn Write, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("a Value always serializes");
    emit(out, &format!("{text}\n"))
}

/// Connects to the bootstrap broker named on the command line.
fn connect(p: &args::Parsed) -> Result<client::Client> {
    let timeout_ms = p.number::<u64>("--request-timeout-ms")?.unwrap_or(30_000);
    client::Client::connect(
        p.bootstrap(),
        Duration::from_millis(timeout_ms.max(1)),
        security::from_args(p)?,
    )
}

/// Subcommand and its arguments; `--help` or nothing prints `usage`.
fn subcommand<'a>(
    args: &'a [String],
    usage: &str,
    out: &mut dyn Write,
) -> Result<Option<(&'a str, &'a [String])>> {
    match args.split_first() {
        None => {
            emit(out, usage)?;
            Err(CliError::Usage("a subcommand is needed".into()))
        }
        Some((first, _)) if first == "--help" || first == "-h" || first == "help" => {
            emit(out, usage)?;
            Ok(None)
        }
        Some((first, rest)) => Ok(Some((first.as_str(), rest))),
    }
}

const COMMON_OPTIONS: &str = "\
common options:
  -b, --bootstrap-server HOST:PORT   a broker to start from (default 127.0.0.1:9092)
  --json                             JSON output for scripts instead of a table
  --request-timeout-ms MS            how long to wait for each answer (default 30000)
  --command-config FILE              Kafka client properties for TLS and SASL: security.protocol,
                                     sasl.mechanism, sasl.jaas.config (or sasl.username and
                                     sasl.password), ssl.truststore.location (PEM)
  --sasl-password-env VAR            the SASL password from this variable instead
";
