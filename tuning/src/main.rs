//! `keel-tune`: checks the host against what Keel wants and prints what to change.
//! Read-only: it never changes the host. Exits 0 whatever it finds (unless `--strict` and a
//! check fails), 2 on bad arguments.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use keel_tuning::{report, run_all, Host, Needs, Status};

const USAGE: &str = "\
keel-tune: check the host for Keel

usage:
  keel-tune [--data-dir DIR] [--shards N] [--partitions N] [--io-memory-bytes N] [--json] [--strict] [--root DIR]

  --data-dir DIR          the broker's data dir (default ./keel-data); picks the disk and filesystem checked
  --shards N              shards the broker will run (default: CPUs available)
  --partitions N          partitions the broker will hold (default 1000)
  --io-memory-bytes N     io.memory.bytes per shard (default 4194304)
  --json                  print JSON instead of a table
  --strict                exit 1 when a check fails
  --root DIR              read /proc and /sys under DIR instead of / (fixtures; limits stay this process's)
";

struct Args {
    root: PathBuf,
    needs: Needs,
    json: bool,
    strict: bool,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let shards_default = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let mut args = Args {
        root: PathBuf::from("/"),
        needs: Needs {
            data_dir: PathBuf::from("keel-data"),
            shards: shards_default,
            partitions: Needs::PARTITIONS_DEFAULT,
            io_memory_bytes: Needs::IO_MEMORY_BYTES_DEFAULT,
        },
        json: false,
        strict: false,
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--json" => args.json = true,
            "--strict" => args.strict = true,
            "--root" => args.root = PathBuf::from(value()?),
            "--data-dir" => args.needs.data_dir = PathBuf::from(value()?),
            "--shards" => args.needs.shards = number(value()?)?.max(1),
            "--partitions" => args.needs.partitions = number(value()?)?,
            "--io-memory-bytes" => args.needs.io_memory_bytes = number(value()?)?,
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(args)
}

/// The data dir as an absolute path on the host; on the live host, symlinks resolved as far as
/// the path exists.
fn absolute_data_dir(root: &Path, dir: &Path) -> PathBuf {
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(dir)
    };
    if root != Path::new("/") {
        return abs;
    }
    abs.ancestors()
        .find_map(|a| {
            let real = std::fs::canonicalize(a).ok()?;
            let rest = abs.strip_prefix(a).ok()?;
            Some(if rest.as_os_str().is_empty() {
                real
            } else {
                real.join(rest)
            })
        })
        .unwrap_or(abs)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let mut args = match parse_args(&argv) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("keel-tune: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    args.needs.data_dir = absolute_data_dir(&args.root, &args.needs.data_dir);
    let host = Host::at(&args.root);
    let findings = run_all(&host, &args.needs);
    if args.json {
        println!("{}", report::json(host.root(), &args.needs, &findings));
    } else {
        println!(
            "data dir {} · {} shards · {} partitions",
            args.needs.data_dir.display(),
            args.needs.shards,
            args.needs.partitions
        );
        print!("{}", report::table(&findings));
    }
    if args.strict && findings.iter().any(|f| f.status == Status::Fail) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
