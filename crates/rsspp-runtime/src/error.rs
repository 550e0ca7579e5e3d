//! The runtime's errors.

/// A system call that failed, and what it was for.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Os {
    /// What the call was for.
    pub what: &'static str,
    /// The kernel's answer.
    #[source]
    pub source: std::io::Error,
}

/// Why the runtime could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No interface of that name.
    #[error("no network interface named {0:?}")]
    NoInterface(String),
    /// Raw sockets and BPF need CAP_NET_RAW and CAP_BPF (root).
    #[error("AF_PACKET and AF_XDP sockets and BPF programs need root (CAP_NET_RAW, CAP_BPF)")]
    NoPrivileges,
    /// A chain element nobody knows.
    #[error("unknown network function {name:?} (known: {known})")]
    UnknownNf {
        /// The name given.
        name: String,
        /// The names known.
        known: String,
    },
    /// A malformed firewall rule.
    #[error(transparent)]
    Rules(#[from] crate::nf::firewall::RuleError),
    /// A patterns file DPI cannot use.
    #[error(transparent)]
    Patterns(#[from] crate::nf::dpi::PatternError),
    /// A configuration value out of range.
    #[error("{0}")]
    Config(String),
    /// A system call failed.
    #[error(transparent)]
    Os(#[from] Os),
    /// A worker could not be pinned.
    #[error("pinning a worker to CPU {cpu}: {source}")]
    Pin {
        /// The CPU.
        cpu: u32,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// Loading the fanout program failed.
    #[error("{what}: {source}")]
    Bpf {
        /// The step.
        what: &'static str,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// A worker thread is gone (its channel closed).
    #[error("worker {0} is gone")]
    WorkerGone(usize),
    /// A worker did not answer a move for `ANSWER_TIMEOUT` (hung).
    #[error("worker {0} stopped answering (no answer to a move in 30 s)")]
    WorkerHung(usize),
    /// A worker thread panicked.
    #[error("worker {0} panicked")]
    WorkerPanicked(usize),
    /// The protocol refused a step (a bug).
    #[error(transparent)]
    Move(#[from] rsspp_core::state::marks::MarkError),
    /// The indirection table refused a plan (a bug).
    #[error(transparent)]
    Reta(#[from] rsspp_core::reta::RetaError),
    /// The control loop refused a round.
    #[error(transparent)]
    Control(#[from] rsspp_core::control::ControlError),
    /// The metrics server could not start.
    #[error(transparent)]
    Metrics(#[from] rsspp_linux::metrics::MetricsError),
    /// Writing the flows file.
    #[error("writing {path}: {source}")]
    Output {
        /// The file.
        path: String,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}
