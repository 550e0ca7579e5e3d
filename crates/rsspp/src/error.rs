//! Errors the command-line tool reports: one line each, naming the problem.

use rsspp_core::balance::{BalanceError, Setting};
use rsspp_core::bench_state::BenchStateError;
use rsspp_core::reta::RetaError;
use rsspp_core::toeplitz::KeyError;

/// Everything a subcommand can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad RSS key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A bad indirection table.
    #[error(transparent)]
    Reta(#[from] RetaError),
    /// Measurements the rebalancer refused.
    #[error(transparent)]
    Balance(#[from] BalanceError),
    /// The control loop refused a round or a commit.
    #[error(transparent)]
    Control(#[from] rsspp_core::control::ControlError),
    /// An address that does not parse.
    #[error("{what} {value:?} is not an IPv4 or IPv6 address")]
    BadAddress {
        /// Which field.
        what: &'static str,
        /// What was given.
        value: String,
    },
    /// A port that does not parse.
    #[error("{what} {value:?} is not a port number (0-65535)")]
    BadPort {
        /// Which field.
        what: &'static str,
        /// What was given.
        value: String,
    },
    /// Source and destination of different families.
    #[error("source {src} and destination {dst} are not of the same IP family")]
    MixedFamilies {
        /// Source.
        src: String,
        /// Destination.
        dst: String,
    },
    /// A batch line with the wrong number of fields.
    #[error("line {line}: expected 'SRC DST SPORT DPORT' (or '- -' for no ports), got {text:?}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// An error on a numbered input line.
    #[error("line {line}: {source}")]
    AtLine {
        /// 1-based line number.
        line: usize,
        /// What went wrong there.
        source: Box<CliError>,
    },
    /// JSON that does not parse or does not have the expected shape.
    #[error("{origin}: invalid JSON input: {source}")]
    Json {
        /// File name or `stdin`.
        origin: String,
        /// The parser's message (with line and column).
        source: serde_json::Error,
    },
    /// A file that cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A cost-model file (`rsspp compare --cost-model`) that is refused.
    #[error("--cost-model {path}: {source}")]
    CostModel {
        /// The file.
        path: String,
        /// What is wrong with it.
        source: rsspp_sim::calibration::CalibrationError,
    },
    /// A capture that cannot be read or a trace that cannot be generated.
    #[error("{path}: {source}")]
    Trace {
        /// The file (`-` for standard input/output).
        path: String,
        /// What went wrong.
        source: rsspp_trace::TraceError,
    },
    /// A capture with a corrupt record before its end.
    #[error("{path}: {record} (--keep-partial keeps the packets before it)")]
    CorruptTrace {
        /// The file (`-` for standard input).
        path: String,
        /// Where and what.
        record: rsspp_trace::read::CorruptRecord,
    },
    /// A NIC's indirection table could not be read or written.
    #[error(transparent)]
    Nic(#[from] crate::cmd::nic::NicError),
    /// The NIC's RSS configuration could not be read or written.
    #[error(transparent)]
    Ethtool(#[from] rsspp_linux::ethtool::EthtoolError),
    /// A value out of its range.
    #[error("{0}")]
    Invalid(String),
    /// An option's value out of its range.
    #[error("{flag} must be {expected}, got {value}")]
    OutOfRange {
        /// The option, as typed (`--cores`).
        flag: &'static str,
        /// Its valid range, in words.
        expected: std::borrow::Cow<'static, str>,
        /// The value given.
        value: String,
    },
    /// The simulator refused the settings or could not run.
    #[error(transparent)]
    Sim(#[from] rsspp_sim::SimError),
    /// The daemon's settings do not fit together.
    #[error(transparent)]
    ServiceConfig(rsspp_linux::service::ConfigError),
    /// Loading, attaching or running the XDP programs failed.
    #[error(transparent)]
    Xdp(#[from] rsspp_linux::xdp::XdpError),
    /// `rsspp bench daemon` could not run.
    #[error(transparent)]
    BenchDaemon(#[from] rsspp_linux::bench_daemon::BenchDaemonError),
    /// The state benchmark failed.
    #[error(transparent)]
    BenchState(#[from] BenchStateError),
    /// `rsspp bench nf` could not run.
    #[error(transparent)]
    BenchNf(#[from] rsspp_runtime::bench::BenchNfError),
    /// `rsspp top` could not reach or read the daemon, or drive the terminal.
    #[error(transparent)]
    Top(#[from] crate::cmd::top::TopError),
    /// Standard output was closed by the reader (e.g. `| head`): stop quietly.
    #[error("broken pipe")]
    BrokenPipe,
    /// The daemon (`rsspp run`) could not start, run or stop cleanly.
    #[error(transparent)]
    Service(#[from] rsspp_linux::service::ServiceError),
    /// `rsspp status` or `rsspp detach` failed.
    #[error(transparent)]
    Lifecycle(#[from] rsspp_linux::lifecycle::LifecycleError),
    /// A CPU list that does not parse or names an offline CPU, or the
    /// online CPUs that cannot be read.
    #[error(transparent)]
    Cpu(#[from] rsspp_linux::cpu::CpuError),
    /// No interface of that name (`rsspp nf`'s runtime found none), said
    /// as every other command says it.
    #[error("{0}: no such interface in this network namespace")]
    NoInterface(String),
    /// `rsspp nf` could not start or run.
    #[error(transparent)]
    Runtime(rsspp_runtime::RuntimeError),
    /// `rsspp trace replay` could not send.
    #[error(transparent)]
    Replay(#[from] rsspp_linux::replay::ReplayError),
    /// `rsspp serve` could not start or run.
    #[error(transparent)]
    Accept(#[from] rsspp_accept::AcceptError),
}

impl From<rsspp_runtime::RuntimeError> for CliError {
    fn from(e: rsspp_runtime::RuntimeError) -> Self {
        match e {
            rsspp_runtime::RuntimeError::NoInterface(iface) => CliError::NoInterface(iface),
            e => CliError::Runtime(e),
        }
    }
}

impl CliError {
    /// A knob core refused ([`BalanceError::BadConfig`]), named by the
    /// option it came from: `option_of` gives the option and the value typed
    /// for a setting, or `None` for a knob the command does not expose.
    pub fn setting(
        e: BalanceError,
        option_of: impl Fn(Setting) -> Option<(&'static str, String)>,
    ) -> Self {
        match e {
            BalanceError::BadConfig { setting, expected } => match option_of(setting) {
                Some((flag, value)) => CliError::OutOfRange {
                    flag,
                    expected: expected.into(),
                    value,
                },
                None => CliError::Balance(BalanceError::BadConfig { setting, expected }),
            },
            other => CliError::Balance(other),
        }
    }

    /// Checks an option's indirection-table size against core's rule
    /// ([`rsspp_core::reta::SIZE_RULE`], the one statement of it): refused,
    /// the option is named.
    pub fn check_table_size(flag: &'static str, size: usize) -> Result<(), CliError> {
        rsspp_core::reta::check_size(size).map_err(|_| CliError::OutOfRange {
            flag,
            expected: rsspp_core::reta::SIZE_RULE.into(),
            value: size.to_string(),
        })
    }

    /// Wraps an output error, keeping a closed pipe apart.
    pub fn output(source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Io {
                path: "stdout".into(),
                source,
            }
        }
    }
}
