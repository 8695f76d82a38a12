//! `keel user create|delete|list`: SCRAM users through AlterUserScramCredentials and
//! DescribeUserScramCredentials (Kafka's `kafka-configs.sh --entity-type users`). The password
//! is read from a file or an environment variable, never from the command line, and salted
//! here: only the salt and the salted password (PBKDF2, keel-auth) travel to the broker.

use std::io::Write;

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::*;
use keel_auth::scram::{salted_password, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use serde_json::json;

use crate::args::{self, Parsed, Spec};
use crate::client::str_bytes;
use crate::error::{CliError, Result};
use crate::table::Table;
use crate::{connect, emit, emit_json, subcommand, COMMON_OPTIONS};

const USAGE: &str = "\
usage:
  keel user create NAME (--password-file FILE | --password-env VAR)
                   [--mechanism SCRAM-SHA-256|SCRAM-SHA-512]... [--iterations N]
  keel user delete NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512]...
  keel user list [NAME...]
create sets (or replaces) the user's credential for each mechanism (default both), with N
iterations (default 4096; 4096 to 16384). The password is the file's first line, or the
variable's value. delete removes the named mechanisms (default every one the user has).
";

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let usage = format!("{USAGE}{COMMON_OPTIONS}");
    let Some((sub, rest)) = subcommand(args, &usage, out)? else {
        return Ok(0);
    };
    let spec = match sub {
        "create" => Spec {
            values: &[
                "--password-file",
                "--password-env",
                "--mechanism",
                "--iterations",
            ],
            switches: &[],
        },
        "delete" => Spec {
            values: &["--mechanism"],
            switches: &[],
        },
        "list" => Spec {
            values: &[],
            switches: &[],
        },
        other => return Err(CliError::Usage(format!("unknown subcommand {other:?}"))),
    };
    let p = args::parse(rest, &spec)?;
    if p.has("--help") {
        emit(out, &usage)?;
        return Ok(0);
    }
    match sub {
        "create" => create(&p, out),
        "delete" => delete(&p, out),
        _ => list(&p, out),
    }
}

fn mechanisms(p: &Parsed) -> Result<Vec<Mechanism>> {
    let named = p.all("--mechanism");
    if named.is_empty() {
        return Ok(Mechanism::ALL.to_vec());
    }
    named
        .into_iter()
        .map(|m| {
            Mechanism::from_name(&m.to_ascii_uppercase()).ok_or_else(|| {
                CliError::Usage(format!("--mechanism {m:?}: SCRAM-SHA-256 or SCRAM-SHA-512"))
            })
        })
        .collect()
}

fn one_user(p: &Parsed) -> Result<String> {
    match p.positionals.as_slice() {
        [name] if !name.is_empty() => Ok(name.clone()),
        _ => Err(CliError::Usage("name exactly one user".into())),
    }
}

/// The password, from `--password-file` (its first line) or `--password-env`.
fn password(p: &Parsed) -> Result<String> {
    let pw = match (p.get("--password-file"), p.get("--password-env")) {
        (Some(file), None) => {
            let text = std::fs::read_to_string(file).map_err(|source| CliError::Io {
                addr: file.to_string(),
                source,
            })?;
            text.lines().next().unwrap_or_default().to_string()
        }
        (None, Some(var)) => std::env::var(var)
            .map_err(|_| CliError::Usage(format!("--password-env: {var} is not set")))?,
        _ => {
            return Err(CliError::Usage(
                "give the password with --password-file FILE or --password-env VAR".into(),
            ))
        }
    };
    if pw.is_empty() {
        return Err(CliError::Usage("the password is empty".into()));
    }
    Ok(pw)
}

fn create(p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let user = one_user(p)?;
    let mechanisms = mechanisms(p)?;
    let iterations = p.number::<u32>("--iterations")?.unwrap_or(MIN_ITERATIONS);
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(CliError::Usage(format!(
            "--iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
        )));
    }
    let pw = password(p)?;
    let upsertions: Vec<ScramCredentialUpsertion> = mechanisms
        .iter()
        .map(|m| {
            let salt = keel_auth::scram::random_nonce(32).into_bytes();
            let salted = salted_password(*m, pw.as_bytes(), &salt, iterations);
            ScramCredentialUpsertion::default()
                .with_name(str_bytes(&user))
                .with_mechanism(m.kafka_type())
                .with_iterations(iterations as i32)
                .with_salt(salt.into())
                .with_salted_password(salted.into())
        })
        .collect();
    alter(p, &user, Vec::new(), upsertions)?;
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    if p.json() {
        emit_json(
            out,
            &json!({ "user": user, "mechanisms": names, "iterations": iterations }),
        )?;
    } else {
        emit(
            out,
            &format!(
                "user {user}: {} set ({iterations} iterations)\n",
                names.join(", ")
            ),
        )?;
    }
    Ok(0)
}

fn delete(p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let user = one_user(p)?;
    let mechanisms = if p.all("--mechanism").is_empty() {
        let had = described(p, Some(std::slice::from_ref(&user)))?;
        let mut found: Vec<Mechanism> = had
            .into_iter()
            .flat_map(|(_, creds)| creds)
            .filter_map(|(t, _)| Mechanism::from_kafka_type(t))
            .collect();
        found.dedup();
        found
    } else {
        mechanisms(p)?
    };
    let deletions = mechanisms
        .iter()
        .map(|m| {
            ScramCredentialDeletion::default()
                .with_name(str_bytes(&user))
                .with_mechanism(m.kafka_type())
        })
        .collect();
    alter(p, &user, deletions, Vec::new())?;
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    if p.json() {
        emit_json(out, &json!({ "user": user, "deleted": names }))?;
    } else {
        emit(out, &format!("user {user}: {} deleted\n", names.join(", ")))?;
    }
    Ok(0)
}

fn alter(
    p: &Parsed,
    user: &str,
    deletions: Vec<ScramCredentialDeletion>,
    upsertions: Vec<ScramCredentialUpsertion>,
) -> Result<()> {
    let mut client = connect(p)?;
    let (_, resp): (i16, AlterUserScramCredentialsResponse) =
        client
            .any()
            .call(ApiKey::AlterUserScramCredentials, (0, 0), |_| {
                AlterUserScramCredentialsRequest::default()
                    .with_deletions(deletions.clone())
                    .with_upsertions(upsertions.clone())
            })?;
    for r in resp.results {
        if r.error_code != 0 {
            return Err(CliError::Kafka {
                context: format!("user {user}"),
                code: r.error_code,
                message: r.error_message.map(|m| m.to_string()),
            });
        }
    }
    Ok(())
}

/// Each user's (mechanism type, iterations), sorted by user.
type Described = Vec<(String, Vec<(i8, i32)>)>;

fn described(p: &Parsed, users: Option<&[String]>) -> Result<Described> {
    let mut client = connect(p)?;
    let (_, resp): (i16, DescribeUserScramCredentialsResponse) =
        client
            .any()
            .call(ApiKey::DescribeUserScramCredentials, (0, 0), |_| {
                DescribeUserScramCredentialsRequest::default().with_users(users.map(|u| {
                    u.iter()
                        .map(|n| UserName::default().with_name(str_bytes(n)))
                        .collect()
                }))
            })?;
    if resp.error_code != 0 {
        return Err(CliError::Kafka {
            context: "users".into(),
            code: resp.error_code,
            message: resp.error_message.map(|m| m.to_string()),
        });
    }
    let mut out = Vec::new();
    for r in resp.results {
        if r.error_code != 0 {
            return Err(CliError::Kafka {
                context: format!("user {}", r.user.as_str()),
                code: r.error_code,
                message: r.error_message.map(|m| m.to_string()),
            });
        }
        let mut creds: Vec<(i8, i32)> = r
            .credential_infos
            .iter()
            .map(|c| (c.mechanism, c.iterations))
            .collect();
        creds.sort();
        out.push((r.user.to_string(), creds));
    }
    out.sort();
    Ok(out)
}

fn list(p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let users = (!p.positionals.is_empty()).then_some(p.positionals.as_slice());
    let all = described(p, users)?;
    let name = |t: i8| Mechanism::from_kafka_type(t).map_or("unknown", |m| m.name());
    if p.json() {
        let rows: Vec<_> = all
            .iter()
            .map(|(u, creds)| {
                json!({
                    "user": u,
                    "credentials": creds
                        .iter()
                        .map(|(t, i)| json!({ "mechanism": name(*t), "iterations": i }))
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        emit_json(out, &json!(rows))?;
        return Ok(0);
    }
    let mut table = Table::new(&["USER", "MECHANISM", "ITERATIONS"]);
    for (u, creds) in &all {
        for (t, i) in creds {
            table.row(vec![u.clone(), name(*t).to_string(), i.to_string()]);
        }
    }
    emit(out, &table.render())?;
    Ok(0)
}
