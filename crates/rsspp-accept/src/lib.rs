//! Affinity-Accept (Pesterev et al., EuroSys 2012) on stock Linux, as a
//! library a Rust server can use, and the HTTP/1.1 server behind
//! `rsspp serve`.
//!
//! - One listener per worker core in a `SO_REUSEPORT` group; a
//!   `BPF_PROG_TYPE_SK_REUSEPORT` program ([`program`]) picks, for each new
//!   connection, the listener of the CPU its bucket maps to:
//!   `bucket = Toeplitz(4-tuple) & (size - 1)`, the table either the
//!   library's own or the `rsspp run` daemon's ([`TableSource`]).
//! - One pinned worker thread per core ([`server`]): epoll, accept, serve;
//!   busy status from the kernel's accept queues, stealing and flow-group
//!   migration by `rsspp_core::affinity_accept` and `rsspp_core::ControlLoop`.
//! - [`http`]: the request handler of `rsspp serve`; [`stats`]: what the
//!   run measured.

pub mod error;
pub mod http;
pub mod program;
pub mod server;
pub mod stats;
mod sys;

pub use error::AcceptError;
pub use http::Http;
pub use program::{SelectCounts, Selector, TableSource};
pub use server::{Config, Server};
pub use stats::{Histogram, LatencySummary, Summary, WorkerSummary};
