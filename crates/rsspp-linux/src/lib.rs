//! RSS++ on Linux: the XDP programs that count packets per RSS bucket and
//! steer them to CPUs, the NIC's indirection table through ethtool, CPU
//! loads, the balancing daemon and its metrics, and [`service`], the
//! daemon ready to run from any front end (`rsspp run` is one).
//!
//! Every kernel call goes through this crate; the daemon's policy is the
//! core crate's [`rsspp_core::ControlLoop`], the same code the simulator
//! runs.

#![warn(missing_docs)]

pub mod bench_daemon;
pub mod cpu;
pub mod daemon;
pub mod datapath;
pub mod ethtool;
pub mod genl;
pub mod lifecycle;
pub mod metrics;
pub mod queues;
pub mod replay;
pub mod service;
pub mod xdp;

#[allow(clippy::all, unused_imports, missing_docs, dead_code)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/rsspp.skel.rs"));
}
