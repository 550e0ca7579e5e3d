//! The library's errors: each says what was being done and why it failed.

use std::io;

/// An error of the accept library.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// A setting out of range or inconsistent; the message names it.
    #[error("{0}")]
    Config(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The BPF program or one of its maps.
    #[error("{what}: {source}")]
    Bpf {
        /// What was being done.
        what: &'static str,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// Loading the program needs privileges.
    #[error("loading the sk_reuseport program needs root (CAP_BPF and CAP_NET_ADMIN); run with --affinity off for plain SO_REUSEPORT")]
    NoPrivileges,
    /// The daemon's table was asked for but is not there.
    #[error("no rsspp steering program on {iface}: start `rsspp run --iface {iface} --mode software` first ({detail})")]
    NoDaemon {
        /// The interface.
        iface: String,
        /// What was missing.
        detail: String,
    },
}

impl AcceptError {
    /// A failed system call; the error is the thread's last OS error.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        Self::Os {
            what: what.into(),
            source: io::Error::last_os_error(),
        }
    }
}
