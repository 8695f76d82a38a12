//! `keel-bench`: run, compare, probe.

fn main() {
    eprintln!("keel-bench: not wired yet");
    std::process::exit(2);
}
