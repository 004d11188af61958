//! One run per case directory at a time: `CASE/.fvpoisson.lock`.
//!
//! Two runs of one case would write the same result files (each file stays
//! whole, see [`super::write_atomic`], but the series and time directories
//! would mix both runs' steps), so `fvpoisson run` takes this lock first and
//! a second run is refused while the first lives. The file holds the
//! holder's process id and host name. A lock whose process no longer exists
//! on this host (a killed run) is stale and taken over, so a kill never
//! leaves a case locked; one from another host cannot be checked and is
//! refused with the advice to delete it if that run is over. The lock is
//! removed when the run ends, successfully or not.
//!
//! Taking the lock is atomic: the lock file is made by hard-linking a
//! complete temporary file to the lock's name, which fails if it exists.
//! A stale lock is first renamed away (only one process can rename it),
//! then the link is tried again.

use super::OutputError;
use std::fs;
use std::path::{Path, PathBuf};

/// The lock file's name in the case directory.
pub const LOCK_FILE: &str = ".fvpoisson.lock";

/// A held lock of a case directory; dropping it removes the lock file.
#[derive(Debug)]
pub struct CaseLock {
    path: PathBuf,
    /// The lock file's content (ours), checked before removing it.
    content: String,
}

/// Who holds a lock, as its file says.
#[derive(Debug, PartialEq, Eq)]
struct Holder {
    pid: u32,
    host: String,
}

impl Holder {
    fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let pid = words.next()?.parse().ok()?;
        let host = words.next().unwrap_or("").to_string();
        Some(Self { pid, host })
    }

    /// Whether the holder still runs: `Some(false)` only when it surely does
    /// not (same host, no such process), `None` when that cannot be told.
    fn is_alive(&self) -> Option<bool> {
        if self.host != host_name() || !Path::new("/proc/self").exists() {
            return None;
        }
        Some(Path::new(&format!("/proc/{}", self.pid)).exists())
    }
}

fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

impl CaseLock {
    /// Takes the lock of `case_dir`, or says who holds it.
    pub fn acquire(case_dir: &Path) -> Result<Self, OutputError> {
        let path = case_dir.join(LOCK_FILE);
        let content = format!("{} {}\n", std::process::id(), host_name());
        // The complete content under a name of our own, then linked into place.
        let mine = super::temporary_path(&path)?;
        // A case that cannot take a new file (read-only, or gone) is named,
        // not the lock's temporary name.
        fs::write(&mine, &content).map_err(|e| {
            OutputError::invalid(format!(
                "{}: cannot write in the case directory to lock it for this run ({e}); a \
                 run writes its results there, so it must be writable",
                case_dir.display()
            ))
        })?;
        let result = Self::link(&mine, &path, &content);
        let _ = fs::remove_file(&mine);
        result
    }

    fn link(mine: &Path, path: &Path, content: &str) -> Result<Self, OutputError> {
        // A stale lock is renamed away once; a second try that finds a lock
        // again finds a live one (or a new stale one: refused, try again).
        for attempt in 0..2 {
            match fs::hard_link(mine, path) {
                Ok(()) => {
                    return Ok(Self {
                        path: path.to_path_buf(),
                        content: content.to_string(),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(OutputError::io(path, e)),
            }
            let text = match fs::read_to_string(path) {
                Ok(text) => text,
                // Removed in the meantime: try again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(OutputError::io(path, e)),
            };
            let holder = Holder::parse(&text);
            let alive = holder.as_ref().and_then(Holder::is_alive);
            match (&holder, alive) {
                (Some(h), Some(false)) if attempt == 0 => {
                    log::warn!(
                        "{}: taking over the lock of process {} that no longer runs",
                        path.display(),
                        h.pid
                    );
                    let stale = super::temporary_path(path)?;
                    if fs::rename(path, &stale).is_ok() {
                        // Renamed someone's fresh lock instead? Put it back.
                        if fs::read_to_string(&stale).ok().as_deref() != Some(text.as_str()) {
                            let _ = fs::hard_link(&stale, path);
                        }
                        let _ = fs::remove_file(&stale);
                    }
                }
                _ => {
                    let who = match &holder {
                        Some(h) if h.host.is_empty() || h.host == host_name() => {
                            format!("process {}", h.pid)
                        }
                        Some(h) => format!("process {} on host {}", h.pid, h.host),
                        None => "another run".to_string(),
                    };
                    return Err(OutputError::invalid(format!(
                        "{}: the case is in use by {who} (lock file {}); wait for that run to \
                         end, or delete the lock file if it is no longer running",
                        path.parent().unwrap_or(path).display(),
                        path.display()
                    )));
                }
            }
        }
        Err(OutputError::invalid(format!(
            "{}: could not take the lock; another run is starting on this case",
            path.display()
        )))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CaseLock {
    fn drop(&mut self) {
        // Only our own lock: a run that found ours stale (it cannot, while we
        // live) must not lose its lock to us.
        if fs::read_to_string(&self.path).ok().as_deref() == Some(self.content.as_str()) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = crate::test_support::unique_temp_dir(&format!("fvpoisson_lock_{name}"));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A second run is refused while the first holds the lock, and runs once
    /// it is released; the refusal names the holder's pid and the lock file.
    #[test]
    fn second_run_is_refused_until_the_first_ends() {
        let dir = scratch("held");
        let first = CaseLock::acquire(&dir).unwrap();
        assert!(first.path().is_file());
        let e = CaseLock::acquire(&dir).unwrap_err().to_string();
        assert!(
            e.contains(&format!("in use by process {}", std::process::id()))
                && e.contains(LOCK_FILE),
            "{e}"
        );
        drop(first);
        assert!(!dir.join(LOCK_FILE).exists(), "released on drop");
        let again = CaseLock::acquire(&dir).unwrap();
        drop(again);
        let leftovers: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A case directory the lock cannot be written in is named, with why,
    /// not the lock's temporary file.
    #[test]
    fn a_case_that_takes_no_file_is_named() {
        let parent = scratch("unwritable");
        let dir = parent.join("gone");
        let e = CaseLock::acquire(&dir).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "{}: cannot write in the case directory",
                dir.display()
            )),
            "{e}"
        );
        assert!(!e.contains(".tmp"), "{e}");
        fs::remove_dir_all(&parent).unwrap();
    }

    /// The lock of a process that no longer runs (a killed run) is taken
    /// over; one of a live process on another host, or one that cannot be
    /// read, is refused.
    #[test]
    fn stale_lock_is_taken_over_and_foreign_ones_are_refused() {
        let dir = scratch("stale");
        // A child that has exited: its pid names no process (pids are not
        // reused this soon).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        fs::write(dir.join(LOCK_FILE), format!("{dead} {}\n", host_name())).unwrap();
        let lock = CaseLock::acquire(&dir).unwrap();
        let text = fs::read_to_string(lock.path()).unwrap();
        assert!(
            text.starts_with(&format!("{} ", std::process::id())),
            "{text}"
        );
        drop(lock);

        fs::write(dir.join(LOCK_FILE), format!("{dead} some-other-host\n")).unwrap();
        let e = CaseLock::acquire(&dir).unwrap_err().to_string();
        assert!(e.contains("on host some-other-host"), "{e}");
        fs::write(dir.join(LOCK_FILE), "garbage").unwrap();
        let e = CaseLock::acquire(&dir).unwrap_err().to_string();
        assert!(e.contains("in use by another run"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
