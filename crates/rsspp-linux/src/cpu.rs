//! CPUs: the lists the daemon balances over, which are online, and how busy
//! each one is.
//!
//! Two ways to measure a CPU's load, two [`BusyClock`]s:
//! - [`ProcStat`]: everything the CPU did (`/proc/stat`: user,
//!   system, interrupts, soft interrupts…, over the time elapsed). What
//!   RSS++ measures on a server whose cores only process packets, and the
//!   right signal when the packets' processing (an IDS, a proxy) runs on the
//!   CPU they are steered to.
//! - [`CpumapThreads`]: the time the kernel threads that process the
//!   packets steered to a CPU (CPUMAP's `cpumap/<cpu>/map:<id>` threads)
//!   spent running (`/proc/<pid>/schedstat`, nanoseconds). Unaffected by
//!   whatever else runs on the CPU.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Errors reading CPU information.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// A CPU list that does not parse.
    #[error("invalid CPU list {text:?}: {why}")]
    BadList {
        /// The text given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// A CPU that is not online.
    #[error("CPU {cpu} is not online (online CPUs: {online})")]
    Offline {
        /// The CPU asked for.
        cpu: u32,
        /// The online list, as the kernel writes it.
        online: String,
    },
    /// A kernel file that cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A kernel file whose content is not what was expected.
    #[error("unexpected content in {}: {why}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
    /// A kernel file holding a CPU list that does not parse.
    #[error("unexpected content in {}: {source}", .path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Why its list was refused.
        source: Box<CpuError>,
    },
}

/// A set of CPUs, written the kernel's way: `0-3,6,8-9`. Kept sorted and
/// without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList(Vec<u32>);

/// Highest CPU number accepted in a list (the kernel's NR_CPUS is at most
/// 8192).
const MAX_CPU: u32 = 8191;

impl CpuList {
    /// A list of `cpus` (sorted, duplicates dropped).
    pub fn from_cpus(mut cpus: Vec<u32>) -> Self {
        cpus.sort_unstable();
        cpus.dedup();
        CpuList(cpus)
    }

    /// The CPUs, ascending.
    pub fn cpus(&self) -> &[u32] {
        &self.0
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs online now (`/sys/devices/system/cpu/online`).
    pub fn online() -> Result<Self, CpuError> {
        let path = Path::new("/sys/devices/system/cpu/online");
        let text = read(path)?;
        text.trim()
            .parse()
            .map_err(|e: CpuError| CpuError::BadFile {
                path: path.to_path_buf(),
                source: Box::new(e),
            })
    }

    /// Checks that every CPU of the list is in `online`.
    pub fn check_online(&self, online: &CpuList) -> Result<(), CpuError> {
        match self.0.iter().find(|c| !online.0.contains(c)) {
            Some(&cpu) => Err(CpuError::Offline {
                cpu,
                online: online.to_string(),
            }),
            None => Ok(()),
        }
    }
}

impl FromStr for CpuList {
    type Err = CpuError;

    fn from_str(text: &str) -> Result<Self, CpuError> {
        let bad = |why: String| CpuError::BadList {
            text: text.to_string(),
            why,
        };
        let number = |s: &str| -> Result<u32, CpuError> {
            let n: u32 = s
                .trim()
                .parse()
                .map_err(|_| bad(format!("{s:?} is not a CPU number")))?;
            if n > MAX_CPU {
                return Err(bad(format!("CPU {n} is above {MAX_CPU}")));
            }
            Ok(n)
        };
        let mut cpus = Vec::new();
        for part in text.split(',') {
            if part.trim().is_empty() {
                return Err(bad("empty element".into()));
            }
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(bad(format!("range {a}-{b} goes backwards")));
                    }
                    cpus.extend(a..=b);
                }
                None => cpus.push(number(part)?),
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

fn read(path: &Path) -> Result<String, CpuError> {
    fs::read_to_string(path).map_err(|source| CpuError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Cumulative busy time per CPU, in nanoseconds: what the daemon turns into
/// loads by difference over an interval. A trait so that the daemon's tests
/// can drive it.
pub trait BusyClock {
    /// Busy nanoseconds of each of `cpus` since some fixed origin.
    fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError>;
}

impl<T: BusyClock + ?Sized> BusyClock for Box<T> {
    fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
        (**self).busy_ns(cpus, out)
    }
}

/// Busy time from `/proc/stat` (clock ticks converted to nanoseconds).
#[derive(Debug)]
pub struct ProcStat {
    path: PathBuf,
    ns_per_tick: u64,
}

impl ProcStat {
    /// Reads `/proc/stat`.
    pub fn new() -> Self {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let ticks = if ticks > 0 { ticks as u64 } else { 100 };
        Self {
            path: PathBuf::from("/proc/stat"),
            ns_per_tick: 1_000_000_000 / ticks,
        }
    }

    /// Reads `path` instead (tests).
    pub fn at(path: impl Into<PathBuf>, ticks_per_second: u64) -> Self {
        Self {
            path: path.into(),
            ns_per_tick: 1_000_000_000 / ticks_per_second.max(1),
        }
    }
}

impl Default for ProcStat {
    fn default() -> Self {
        Self::new()
    }
}

impl BusyClock for ProcStat {
    fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
        let text = read(&self.path)?;
        let format = |why: String| CpuError::Format {
            path: self.path.clone(),
            why,
        };
        let mut found = vec![false; cpus.len()];
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("cpu") else {
                continue;
            };
            let mut fields = rest.split_ascii_whitespace();
            let Some(Ok(cpu)) = fields.next().map(str::parse::<u32>) else {
                continue; // the "cpu " total line
            };
            // A CPU may be asked for more than once (in hardware mode, two
            // queues whose interrupts go to the same CPU).
            if !cpus.contains(&cpu) {
                continue;
            }
            // user nice system idle iowait irq softirq steal [guest guest_nice]
            let values: Vec<u64> = fields
                .take(8)
                .map(|v| v.parse().map_err(|_| format(format!("cpu{cpu}: {v:?}"))))
                .collect::<Result<_, _>>()?;
            if values.len() < 8 {
                return Err(format(format!("cpu{cpu} has {} fields", values.len())));
            }
            // Guest time is already counted in user and nice.
            let busy = values[0] + values[1] + values[2] + values[5] + values[6] + values[7];
            for (i, _) in cpus.iter().enumerate().filter(|&(_, &c)| c == cpu) {
                out[i] = busy * self.ns_per_tick;
                found[i] = true;
            }
        }
        match found.iter().position(|f| !f) {
            Some(i) => Err(format(format!("no line for cpu{}", cpus[i]))),
            None => Ok(()),
        }
    }
}

/// Busy time of the CPUMAP threads of one map (`cpumap/<cpu>/map:<id>`).
#[derive(Debug)]
pub struct CpumapThreads {
    map_id: u32,
    proc_root: PathBuf,
    /// `(cpu, pid)` of the threads found so far.
    threads: Vec<(u32, u32)>,
}

impl CpumapThreads {
    /// The threads of the CPUMAP with kernel map id `map_id`.
    pub fn new(map_id: u32) -> Self {
        Self::at("/proc", map_id)
    }

    /// Looks under `proc_root` instead of `/proc` (tests).
    pub fn at(proc_root: impl Into<PathBuf>, map_id: u32) -> Self {
        Self {
            map_id,
            proc_root: proc_root.into(),
            threads: Vec::new(),
        }
    }

    /// Finds the threads again (a CPU's entry was rewritten, or first use).
    fn scan(&mut self) -> Result<(), CpuError> {
        self.threads.clear();
        let entries = fs::read_dir(&self.proc_root).map_err(|source| CpuError::Read {
            path: self.proc_root.clone(),
            source,
        })?;
        let suffix = format!("/map:{}", self.map_id);
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(comm) = fs::read_to_string(entry.path().join("comm")) else {
                continue; // gone meanwhile
            };
            let comm = comm.trim_end();
            let cpu = comm
                .strip_prefix("cpumap/")
                .and_then(|r| r.strip_suffix(&suffix))
                .and_then(|c| c.parse::<u32>().ok());
            if let Some(cpu) = cpu {
                self.threads.push((cpu, pid));
            }
        }
        Ok(())
    }

    fn schedstat(&self, pid: u32) -> Option<u64> {
        let text =
            fs::read_to_string(self.proc_root.join(pid.to_string()).join("schedstat")).ok()?;
        text.split_ascii_whitespace().next()?.parse().ok()
    }
}

impl BusyClock for CpumapThreads {
    fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
        for attempt in 0..2 {
            if attempt == 1 || self.threads.is_empty() {
                self.scan()?;
            }
            let mut all = true;
            for (i, &cpu) in cpus.iter().enumerate() {
                let time = self
                    .threads
                    .iter()
                    .find(|(c, _)| *c == cpu)
                    .and_then(|&(_, pid)| self.schedstat(pid));
                match time {
                    Some(t) => out[i] = t,
                    None => all = false,
                }
            }
            if all {
                return Ok(());
            }
        }
        let missing: Vec<u32> = cpus
            .iter()
            .copied()
            .filter(|c| !self.threads.iter().any(|(t, _)| t == c))
            .collect();
        Err(CpuError::Format {
            path: self.proc_root.clone(),
            why: format!(
                "no cpumap/<cpu>/map:{} thread for CPU(s) {missing:?}",
                self.map_id
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_the_kernel_way() {
        let l: CpuList = "0-3,6,8-9".parse().unwrap();
        assert_eq!(l.cpus(), &[0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(l.to_string(), "0-3,6,8-9");
        let l: CpuList = "5,1,1,2".parse().unwrap();
        assert_eq!(l.cpus(), &[1, 2, 5]);
        assert_eq!(l.to_string(), "1-2,5");
        for bad in ["", "a", "1,,2", "3-1", "1-", "99999", "-1"] {
            let e = bad.parse::<CpuList>().unwrap_err();
            assert!(e.to_string().contains("invalid CPU list"), "{bad}: {e}");
        }
    }

    #[test]
    fn offline_cpus_are_named() {
        let online: CpuList = "0-1".parse().unwrap();
        let asked: CpuList = "1,3".parse().unwrap();
        let e = asked.check_online(&online).unwrap_err();
        assert_eq!(e.to_string(), "CPU 3 is not online (online CPUs: 0-1)");
        assert!("0"
            .parse::<CpuList>()
            .unwrap()
            .check_online(&online)
            .is_ok());
    }

    #[test]
    fn this_machine_has_online_cpus_and_busy_time() {
        let online = CpuList::online().unwrap();
        assert!(!online.is_empty());
        let mut out = vec![0; online.len()];
        ProcStat::new().busy_ns(online.cpus(), &mut out).unwrap();
        assert!(out.iter().all(|&b| b > 0), "{out:?}");
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rsspp-cpu-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn proc_stat_counts_busy_ticks() {
        let dir = scratch("stat");
        let path = dir.join("stat");
        fs::write(
            &path,
            "cpu  10 0 10 100 0 0 0 0 0 0\n\
             cpu0 1 2 3 1000 50 4 5 6 7 8\n\
             cpu1 10 0 0 0 0 0 0 0 0 0\n\
             intr 12345\n",
        )
        .unwrap();
        let mut out = [0u64; 2];
        ProcStat::at(&path, 100).busy_ns(&[1, 0], &mut out).unwrap();
        // cpu1: 10 ticks; cpu0: user+nice+system+irq+softirq+steal = 21.
        assert_eq!(out, [100_000_000, 210_000_000]);
        // The same CPU twice (two queues served by it): both filled.
        let mut out = [0u64; 3];
        ProcStat::at(&path, 100)
            .busy_ns(&[1, 0, 1], &mut out)
            .unwrap();
        assert_eq!(out, [100_000_000, 210_000_000, 100_000_000]);
        let e = ProcStat::at(&path, 100)
            .busy_ns(&[2], &mut [0])
            .unwrap_err();
        assert!(e.to_string().contains("no line for cpu2"), "{e}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cpumap_threads_are_found_by_name() {
        let dir = scratch("proc");
        let thread = |pid: u32, comm: &str, ns: u64| {
            let p = dir.join(pid.to_string());
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
            fs::write(p.join("schedstat"), format!("{ns} 0 3\n")).unwrap();
        };
        thread(10, "cpumap/0/map:7", 5_000);
        thread(11, "cpumap/1/map:7", 9_000);
        thread(12, "cpumap/1/map:8", 1);
        thread(13, "bash", 1);
        let mut t = CpumapThreads::at(&dir, 7);
        let mut out = [0u64; 2];
        t.busy_ns(&[1, 0], &mut out).unwrap();
        assert_eq!(out, [9_000, 5_000]);
        let e = t.busy_ns(&[2], &mut [0]).unwrap_err();
        assert!(e.to_string().contains("map:7 thread for CPU(s) [2]"), "{e}");
        fs::remove_dir_all(dir).unwrap();
    }
}
