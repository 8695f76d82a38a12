//! The seam between checks and the machine: every file a check reads goes through a [`Host`]
//! rooted at a directory, and resource limits and the CPUs the broker may run on come from the
//! live process or from injected values. Tests root a `Host` at a fixture tree of `/proc` and
//! `/sys` content.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A resource limit value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Finite(u64),
    Unlimited,
}

impl Limit {
    /// True when the limit allows at least `n`.
    pub fn allows(self, n: u64) -> bool {
        match self {
            Limit::Unlimited => true,
            Limit::Finite(v) => v >= n,
        }
    }

    // rlim_t is u32 on some 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    fn from_raw(raw: libc::rlim_t) -> Limit {
        if raw == libc::RLIM_INFINITY {
            Limit::Unlimited
        } else {
            Limit::Finite(raw as u64)
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Unlimited => f.write_str("unlimited"),
            Limit::Finite(v) => write!(f, "{v}"),
        }
    }
}

/// Soft and hard limits of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub soft: Limit,
    pub hard: Limit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memlock,
    Nofile,
}

/// Where resource limits come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rlimits {
    /// getrlimit(2) of this process.
    Live,
    /// Injected; `None` means "could not be read".
    Fixed {
        memlock: Option<Rlimit>,
        nofile: Option<Rlimit>,
    },
}

/// Where the CPUs the broker may run on come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cpus {
    /// The affinity mask of this process (sched_getaffinity(2), as the broker reads its own).
    Live,
    /// Injected (`--cpus`), ascending; `None`: not known (a fixture root without `--cpus`).
    Fixed(Option<Vec<u64>>),
}

/// The machine as the checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    root: PathBuf,
    rlimits: Rlimits,
    cpus: Cpus,
}

impl Host {
    /// The live machine: files under `/`, limits of this process.
    pub fn live() -> Host {
        Host::at("/")
    }

    /// Files under `root`; limits still from this process until [`Host::with_rlimits`]. The
    /// allowed CPUs are this process's when `root` is `/`, and unknown under any other root
    /// (a fixture's answer must not depend on the machine running it) until [`Host::with_cpus`].
    pub fn at(root: impl Into<PathBuf>) -> Host {
        let root = root.into();
        let cpus = if root == Path::new("/") {
            Cpus::Live
        } else {
            Cpus::Fixed(None)
        };
        Host {
            root,
            rlimits: Rlimits::Live,
            cpus,
        }
    }

    /// Replaces the allowed CPUs with `cpus` (`--cpus`: a broker started under `taskset`, or a
    /// fixture's).
    pub fn with_cpus(mut self, cpus: impl IntoIterator<Item = u64>) -> Host {
        let mut cpus: Vec<u64> = cpus.into_iter().collect();
        cpus.sort_unstable();
        cpus.dedup();
        self.cpus = Cpus::Fixed(Some(cpus).filter(|c| !c.is_empty()));
        self
    }

    /// The CPUs the broker may run on, ascending, as it numbers them when it pins shard `i` to
    /// the `i`-th; `None` when not known.
    pub fn allowed_cpus(&self) -> Option<Vec<u64>> {
        match &self.cpus {
            Cpus::Fixed(cpus) => cpus.clone(),
            Cpus::Live => live_allowed_cpus(),
        }
    }

    /// Replaces the live limits with fixed ones (`None`: unreadable).
    pub fn with_rlimits(mut self, memlock: Option<Rlimit>, nofile: Option<Rlimit>) -> Host {
        self.rlimits = Rlimits::Fixed { memlock, nofile };
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `abs` (an absolute path on the host, e.g. `/proc/mounts`) under the root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    /// The trimmed content of a file, or why it could not be read (a short, printable reason).
    pub fn read(&self, abs: impl AsRef<Path>) -> Result<String, String> {
        let abs = abs.as_ref();
        match fs::read(self.path(abs)) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).trim().to_string()),
            Err(e) => Err(format!(
                "unreadable: {} ({})",
                abs.display(),
                short_io_error(&e)
            )),
        }
    }

    /// The names in a directory, sorted; empty when it cannot be listed.
    pub fn list(&self, abs: impl AsRef<Path>) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.path(abs)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    /// The final name of `abs` after following symlinks inside the root (e.g. `/dev/mapper/x`
    /// → `dm-0`); the plain file name when it cannot be resolved.
    pub fn resolved_name(&self, abs: impl AsRef<Path>) -> Option<String> {
        let abs = abs.as_ref();
        let resolved = fs::canonicalize(self.path(abs))
            .ok()
            .filter(|p| p.starts_with(&self.root));
        let target = resolved.as_deref().unwrap_or(abs);
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// Replaces the content of an existing file with `value` and a newline, as `echo value >
    /// file` does; never creates a file. The error is a short, printable reason (read-only
    /// filesystem, permission denied, missing, or what the kernel refused).
    pub fn write(&self, abs: impl AsRef<Path>, value: &str) -> Result<(), String> {
        let abs = abs.as_ref();
        let written = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path(abs))
            .and_then(|mut f| f.write_all(format!("{value}\n").as_bytes()));
        written.map_err(|e| format!("{}: {}", short_io_error(&e), abs.display()))
    }

    /// What a file occupies on disk: (bytes allocated, bytes long). A sparse file is long but
    /// holds few blocks. `Ok(None)` when it does not exist; `Err` when it cannot be looked at
    /// or is not a regular file.
    pub fn file_size(&self, abs: impl AsRef<Path>) -> Result<Option<(u64, u64)>, String> {
        let abs = abs.as_ref();
        match fs::metadata(self.path(abs)) {
            Ok(m) if m.is_file() => Ok(Some((m.blocks().saturating_mul(512), m.len()))),
            Ok(_) => Err(format!("not a regular file: {}", abs.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {}", short_io_error(&e), abs.display())),
        }
    }

    /// Soft and hard limit of `resource`, or `None` when it cannot be read.
    pub fn rlimit(&self, resource: Resource) -> Option<Rlimit> {
        match &self.rlimits {
            Rlimits::Fixed { memlock, nofile } => match resource {
                Resource::Memlock => *memlock,
                Resource::Nofile => *nofile,
            },
            Rlimits::Live => live_rlimit(resource),
        }
    }
}

/// This process's affinity mask through the crate the broker pins its shards with, so both
/// number the cores the same way.
fn live_allowed_cpus() -> Option<Vec<u64>> {
    let mut cpus: Vec<u64> = core_affinity::get_core_ids()?
        .into_iter()
        .map(|c| c.id as u64)
        .collect();
    cpus.sort_unstable();
    (!cpus.is_empty()).then_some(cpus)
}

fn live_rlimit(resource: Resource) -> Option<Rlimit> {
    let which = match resource {
        Resource::Memlock => libc::RLIMIT_MEMLOCK,
        Resource::Nofile => libc::RLIMIT_NOFILE,
    };
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into `lim`, a valid, exclusively borrowed rlimit.
    if unsafe { libc::getrlimit(which, &mut lim) } != 0 {
        return None;
    }
    Some(Rlimit {
        soft: Limit::from_raw(lim.rlim_cur),
        hard: Limit::from_raw(lim.rlim_max),
    })
}

fn short_io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "missing".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::ReadOnlyFilesystem => "read-only filesystem".to_string(),
        _ if e.raw_os_error() == Some(libc::EPERM) => "operation not permitted".to_string(),
        _ => e.to_string(),
    }
}
