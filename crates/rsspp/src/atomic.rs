//! Writing an output file all at once: readers of the path see the old file
//! or the whole new one, never half of it, and a failed write leaves
//! nothing behind.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::CliError;

fn io_error(path: &Path, source: io::Error) -> CliError {
    CliError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The directory `path` will be written in (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Fails early, before any long work, when `path` obviously cannot be
/// written: a directory, in a directory that does not exist, or in one
/// that takes no new file (no permission, a read-only file system): a
/// file is created there under a temporary name and removed.
pub fn check_destination(path: &Path) -> Result<(), CliError> {
    if path.as_os_str().is_empty() {
        return Err(CliError::Invalid("the output file name is empty".into()));
    }
    if path.is_dir() {
        return Err(io_error(
            path,
            io::Error::new(io::ErrorKind::IsADirectory, "is a directory"),
        ));
    }
    let dir = parent_dir(path);
    if !dir.is_dir() {
        return Err(io_error(
            path,
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("directory {} does not exist", dir.display()),
            ),
        ));
    }
    probe_directory(path)
}

/// Creates and removes a file next to where `path`'s data will go (its
/// link's target for a symbolic link), as [`AtomicFile`] will. A
/// destination that exists and is not a regular file (a device, a FIFO) is
/// written in place, not next to: it is left alone (opening a FIFO would
/// wait for a reader).
fn probe_directory(path: &Path) -> Result<(), CliError> {
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Ok(meta) = fs::metadata(&target) {
        if !meta.is_file() {
            return Ok(());
        }
    }
    let dir = parent_dir(&target);
    let probe = dir.join(format!(".rsspp-probe.{}.tmp", std::process::id()));
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(io_error(
            path,
            io::Error::new(
                e.kind(),
                format!("cannot create a file in {}: {e}", dir.display()),
            ),
        )),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory
/// (so the final rename stays on one file system and is atomic).
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    check_destination(path)?;
    replace(path, bytes)
}

/// The write itself, once the destination looks right (it can still fail:
/// a full disk, a directory made meanwhile).
fn replace(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let mut file = AtomicFile::create_unchecked(path)?;
    file.write_all(bytes).map_err(|e| io_error(path, e))?;
    file.commit()
}

/// An output file written in pieces that appears all at once: the data goes
/// to a temporary file next to `path`, renamed over it by
/// [`commit`](Self::commit). Dropped without a commit (an error half-way),
/// it removes the temporary file and leaves `path` as it was.
///
/// A destination that exists and is not a regular file (`/dev/null`, a
/// FIFO) is written directly: renaming over it would replace the device.
/// A symbolic link is followed: the file it names is replaced.
pub struct AtomicFile {
    /// Where the data ends up.
    path: PathBuf,
    /// The temporary file, `None` when writing directly.
    tmp: Option<PathBuf>,
    file: fs::File,
}

impl AtomicFile {
    /// Opens the temporary file (after [`check_destination`]).
    pub fn create(path: &Path) -> Result<Self, CliError> {
        check_destination(path)?;
        Self::create_unchecked(path)
    }

    fn create_unchecked(path: &Path) -> Result<Self, CliError> {
        let mut target = path.to_path_buf();
        if let Ok(meta) = fs::symlink_metadata(path) {
            if meta.file_type().is_symlink() {
                // The link's target, when it exists; a dangling link is
                // replaced itself.
                if let Ok(real) = fs::canonicalize(path) {
                    target = real;
                }
            }
        }
        if let Ok(meta) = fs::metadata(&target) {
            if !meta.is_file() && !meta.is_dir() {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&target)
                    .map_err(|e| io_error(path, e))?;
                return Ok(Self {
                    path: target,
                    tmp: None,
                    file,
                });
            }
        }
        let name = target
            .file_name()
            .ok_or_else(|| CliError::Invalid(format!("{} is not a file name", path.display())))?;
        let tmp = parent_dir(&target).join(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        // create_new: never write through a link or a file someone else
        // left under the temporary name.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io_error(path, e))?;
        Ok(Self {
            path: target,
            tmp: Some(tmp),
            file,
        })
    }

    /// Flushes the data to disk and renames the temporary file over the
    /// destination.
    pub fn commit(mut self) -> Result<(), CliError> {
        let Some(tmp) = self.tmp.take() else {
            return self.file.flush().map_err(|e| io_error(&self.path, e));
        };
        let result = self
            .file
            .sync_all()
            .and_then(|()| fs::rename(&tmp, &self.path));
        result.map_err(|e| {
            // Best effort: the temporary file may not even exist.
            let _ = fs::remove_file(&tmp);
            io_error(&self.path, e)
        })
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(tmp) = &self.tmp {
            let _ = fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rsspp-atomic-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = scratch("replace");
        let path = dir.join("out.html");
        fs::write(&path, "old").unwrap();
        write(&path, b"new").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["out.html"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_nothing() {
        let dir = scratch("fail");
        // The rename fails: the destination is a non-empty directory.
        let path = dir.join("taken");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("x"), "x").unwrap();
        let err = replace(&path, b"data").unwrap_err().to_string();
        assert!(err.contains("taken"), "{err}");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["taken"]);
        // Caught before writing anything.
        let err = write(&path, b"data").unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
        let err = write(&dir.join("missing/out.html"), b"data")
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_that_takes_no_file_is_found_before_writing() {
        // sysfs takes no new file, even from root.
        let err = check_destination(Path::new("/sys/rsspp-report.html"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/sys/rsspp-report.html: cannot create a file in /sys: "),
            "{err}"
        );
        // A writable directory is left as it was.
        let dir = scratch("probe");
        check_destination(&dir.join("out.html")).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dropped_file_leaves_the_old_one_and_no_temporary() {
        let dir = scratch("dropped");
        let path = dir.join("keep.pcap");
        fs::write(&path, "old").unwrap();
        {
            let mut f = AtomicFile::create(&path).unwrap();
            f.write_all(b"half of the new").unwrap();
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["keep.pcap"]);
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_device_is_written_not_replaced_and_a_link_is_followed() {
        let mut f = AtomicFile::create(Path::new("/dev/null")).unwrap();
        f.write_all(b"nothing").unwrap();
        f.commit().unwrap();
        assert!(!fs::metadata("/dev/null").unwrap().is_file());
        let dir = scratch("link");
        let real = dir.join("real.pcap");
        fs::write(&real, "old").unwrap();
        let link = dir.join("link.pcap");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
        fs::remove_dir_all(&dir).unwrap();
    }
}
