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
/// written: a directory, or in a directory that does not exist.
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
    Ok(())
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
    let name = path
        .file_name()
        .ok_or_else(|| CliError::Invalid(format!("{} is not a file name", path.display())))?;
    let tmp = parent_dir(path).join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> io::Result<()> {
        // create_new: never write through a link or a file someone else
        // left under the temporary name.
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        // Best effort: the temporary file may not even exist.
        let _ = fs::remove_file(&tmp);
        io_error(path, e)
    })
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
}
