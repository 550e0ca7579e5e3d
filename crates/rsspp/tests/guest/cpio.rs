//! A "newc" cpio archive, the format the kernel unpacks as an initramfs.
//! Written here rather than with cpio(1) so that the archive can hold a
//! `/dev/console` node without the host creating one.

use std::collections::BTreeSet;

const FILE: u32 = 0o100_000;
const DIR: u32 = 0o040_000;
const SYMLINK: u32 = 0o120_000;
const CHAR_DEV: u32 = 0o020_000;

/// An archive being built; paths are absolute guest paths.
#[derive(Default)]
pub struct Cpio {
    out: Vec<u8>,
    inode: u32,
    dirs: BTreeSet<String>,
}

fn pad4(out: &mut Vec<u8>) {
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

impl Cpio {
    fn entry(&mut self, path: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = path.trim_start_matches('/');
        self.inode += 1;
        let nlink = if mode & DIR == DIR { 2 } else { 1 };
        let fields = [
            self.inode,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            data.len() as u32,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        pad4(&mut self.out);
        self.out.extend_from_slice(data);
        pad4(&mut self.out);
    }

    /// A directory and its parents (each once).
    pub fn dir(&mut self, path: &str) {
        let mut so_far = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            so_far.push('/');
            so_far.push_str(part);
            if self.dirs.insert(so_far.clone()) {
                let p = so_far.clone();
                self.entry(&p, DIR | 0o755, (0, 0), &[]);
            }
        }
    }

    fn parent(&mut self, path: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
    }

    /// A regular file with permission bits `perm`.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.parent(path);
        self.entry(path, FILE | perm, (0, 0), data);
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.parent(path);
        self.entry(path, SYMLINK | 0o777, (0, 0), target.as_bytes());
    }

    /// A character device node.
    pub fn char_dev(&mut self, path: &str, major: u32, minor: u32) {
        self.parent(path);
        self.entry(path, CHAR_DEV | 0o600, (major, minor), &[]);
    }

    /// The archive, with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}
