//! Errors of trace reading, writing and generation.

/// Everything the trace library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The input is empty.
    #[error("empty file: no pcap or pcapng header")]
    Empty,
    /// The input does not start with a pcap or pcapng magic number.
    #[error("not a pcap or pcapng file (unrecognised header)")]
    NotPcap,
    /// The file header itself is cut short.
    #[error("truncated file: the pcap/pcapng header is incomplete")]
    TruncatedHeader,
    /// The input could not be read.
    #[error("read error")]
    Read,
    /// A record that cannot be parsed.
    #[error("malformed capture at byte {offset}: {reason}")]
    Malformed {
        /// Byte offset of the record.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A record before the end of the capture that cannot be read (its
    /// length field is corrupt, or it does not parse): what follows it
    /// cannot be found.
    #[error("{0}")]
    Corrupt(crate::read::CorruptRecord),
    /// Writing failed.
    #[error("write error: {0}")]
    Write(#[from] std::io::Error),
    /// A generator option out of range.
    #[error("{0}")]
    InvalidOption(String),
}
