//! CPU lists in the kernel's format (`0-3,8,10-11`), as in
//! `/sys/devices/system/cpu/online` and `--cpus` arguments.

use std::fmt::Write as _;
use std::fs;
use std::io;

/// Where the kernel lists the CPUs that are online now.
pub const ONLINE_PATH: &str = "/sys/devices/system/cpu/online";

/// Largest CPU number accepted: far above any machine's, low enough that a
/// typo like `0-4000000000` is refused instead of allocating a huge list.
pub const MAX_CPU: u32 = 65_535;

/// Why a CPU list was refused.
#[derive(Debug, thiserror::Error)]
pub enum CpuListError {
    /// Not a list of numbers and ranges.
    #[error("CPU list {list:?}: {part:?} is not a CPU number or a range like 0-3")]
    Syntax {
        /// The whole list.
        list: String,
        /// The part that does not parse.
        part: String,
    },
    /// A range whose end is below its start.
    #[error("CPU list {list:?}: range {part:?} ends before it starts")]
    Reversed {
        /// The whole list.
        list: String,
        /// The range.
        part: String,
    },
    /// A CPU number above [`MAX_CPU`].
    #[error("CPU list {list:?}: CPU {cpu} is above the largest supported CPU number {MAX_CPU}")]
    TooLarge {
        /// The whole list.
        list: String,
        /// The number.
        cpu: u64,
    },
    /// The list names no CPU.
    #[error("CPU list {0:?} is empty")]
    Empty(String),
    /// The kernel's list cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// Parses a CPU list: comma-separated numbers and inclusive ranges
/// (`0-3,8`). The result is sorted and without duplicates.
pub fn parse(list: &str) -> Result<Vec<u32>, CpuListError> {
    let number = |part: &str, s: &str| -> Result<u32, CpuListError> {
        let n: u64 = s.trim().parse().map_err(|_| CpuListError::Syntax {
            list: list.to_string(),
            part: part.to_string(),
        })?;
        u32::try_from(n)
            .ok()
            .filter(|&c| c <= MAX_CPU)
            .ok_or(CpuListError::TooLarge {
                list: list.to_string(),
                cpu: n,
            })
    };
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(part, a)?, number(part, b)?);
                if b < a {
                    return Err(CpuListError::Reversed {
                        list: list.to_string(),
                        part: part.to_string(),
                    });
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(number(part, part)?),
        }
    }
    if cpus.is_empty() {
        return Err(CpuListError::Empty(list.to_string()));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPUs online now.
pub fn online() -> Result<Vec<u32>, CpuListError> {
    let text = fs::read_to_string(ONLINE_PATH).map_err(|source| CpuListError::Read {
        path: ONLINE_PATH,
        source,
    })?;
    parse(&text)
}

/// Formats CPUs in the kernel's list format, ranges collapsed (`0-3,8`).
pub fn format(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if sorted[i] == start {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{}", sorted[i]);
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers_and_ranges() {
        assert_eq!(parse("0-3,8,10-11\n").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse("5").unwrap(), [5]);
        assert_eq!(parse("3,1,1-2").unwrap(), [1, 2, 3]);
        assert_eq!(parse(" 0 - 1 ").unwrap(), [0, 1]);
    }

    #[test]
    fn refuses_bad_lists() {
        assert!(matches!(parse(""), Err(CpuListError::Empty(_))));
        assert!(matches!(parse("a"), Err(CpuListError::Syntax { .. })));
        assert!(matches!(parse("1-"), Err(CpuListError::Syntax { .. })));
        assert!(matches!(parse("-1"), Err(CpuListError::Syntax { .. })));
        assert!(matches!(parse("3-1"), Err(CpuListError::Reversed { .. })));
        assert!(matches!(
            parse("0-4000000000"),
            Err(CpuListError::TooLarge { .. })
        ));
        let e = parse("0,x").unwrap_err().to_string();
        assert!(e.contains("\"x\""), "{e}");
    }

    #[test]
    fn formats_ranges() {
        assert_eq!(format(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format(&[4]), "4");
        assert_eq!(format(&[2, 1, 2]), "1-2");
        assert_eq!(format(&[]), "");
        for list in ["0-3,8,10-11", "7", "0,2,4"] {
            assert_eq!(format(&parse(list).unwrap()), list);
        }
    }

    #[test]
    fn the_cpu_running_this_test_is_online() {
        let cpus = online().unwrap();
        // SAFETY: sched_getcpu has no preconditions.
        let me = unsafe { libc::sched_getcpu() };
        assert!(me >= 0);
        assert!(cpus.contains(&(me as u32)), "{me} not in {cpus:?}");
    }
}
