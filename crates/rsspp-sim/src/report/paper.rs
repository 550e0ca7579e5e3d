//! The papers' figures from their experiments' runs (`rsspp figures`):
//! each an SVG (the report's charts, standalone; several panels stacked
//! where the paper's figure has several), the CSV of the numbers it draws,
//! and a caption naming the paper's figure, the paper's numbers, this
//! run's numbers and the commands that reproduce them; and an index of
//! them all. Every number written comes from the runs: the paper's are
//! quoted from its text.

use std::fmt::Write;

use super::charts::{self, Axis, AxisScale, Series};
use super::figures::{field, percent, stacked, standalone, value, Figure};
use super::svg::{int, num, pct};
use crate::paper::{Experiment, FigureId, Run, Scale};
use crate::result::{PolicyResult, SweepPoint};

/// One figure of `rsspp figures`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaperFigure {
    /// Which.
    pub id: FigureId,
    /// Its files (the stem is the figure's name).
    pub figure: Figure,
    /// The paper and figure it reproduces, short (`RSS++ Fig. 10`).
    pub title: String,
    /// The paper's result, one line.
    pub paper: String,
    /// This run's result, one line.
    pub this_run: String,
}

const RSSPP: &str = "RSS++ (Barbette et al., \"RSS++: load and state-aware receive side \
                     scaling\", CoNEXT 2019)";
const REFRAMER: &str = "Reframer (Ghasemirahni et al., \"Packet Order Matters! Improving \
                        Application Performance by Deliberately Delaying Packets\", NSDI 2022)";
const AFFINITY: &str = "Affinity-Accept (Pesterev et al., \"Improving Network Connection \
                        Locality on Multicore Systems\", EuroSys 2012)";
const ORSS: &str = "oRSS (Delzotti, \"SmartNIC-Based Scheduling. oRSS: an offloaded packet \
                    scheduler\", master's thesis, UCLouvain 2023)";

/// The policy named `name` in `run` (the experiments name what they ran).
fn policy<'a>(run: &'a Run, name: &str) -> &'a PolicyResult {
    run.comparison
        .policies
        .iter()
        .find(|p| p.name == name || p.name.strip_suffix("+reframer") == Some(name))
        .unwrap_or_else(|| panic!("{name} ran in {}", run.spec.command()))
}

/// Packets dropped as a share of those offered.
fn drop_share(p: &PolicyResult) -> f64 {
    if p.summary.packets == 0 {
        0.0
    } else {
        p.summary.drops as f64 / p.summary.packets as f64
    }
}

/// `a / b` as "N×" (or "n/a").
fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{}x", num(a / b))
    } else {
        "n/a".into()
    }
}

/// The caption: the paper's figure, its numbers, what this run is, what is
/// drawn, this run's numbers, the commands.
fn caption(
    what: &str,
    paper: &str,
    chart: &str,
    this_run: &str,
    experiment: &Experiment,
) -> String {
    let mut c = format!("{what}\nThe paper: {paper}\nThe chart: {chart}\nThis run:\n{this_run}");
    if !c.ends_with('\n') {
        c.push('\n');
    }
    let _ = writeln!(
        c,
        "Reproduce it ({} run{}, {} s of host time here; each prints its table):",
        experiment.runs.len(),
        if experiment.runs.len() == 1 { "" } else { "s" },
        num(experiment.wall_s)
    );
    for r in &experiment.runs {
        let _ = writeln!(c, "  {}", r.spec.command());
    }
    c
}

fn high_load(e: &Experiment) -> PaperFigure {
    let mut csv = String::from(
        "policy,load,measured_load,packets,drops,latency_p50_us,latency_p95_us,latency_p99_us,\
         imbalance_pct\n",
    );
    let mut sweep = Vec::new();
    let mut cdfs = Vec::new();
    let mut lines = String::new();
    let mut best = (0.0f64, 0.0f64);
    for r in &e.runs {
        let load = r.comparison.target_load;
        for p in &r.comparison.policies {
            let s = &p.summary;
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{}",
                field(&p.name),
                value(load),
                value(s.avg_load),
                s.packets,
                s.drops,
                value(s.latency_p50_us),
                value(s.latency_p95_us),
                value(s.latency_p99_us),
                value(s.imbalance_median)
            );
            sweep.push(SweepPoint {
                policy: p.name.clone(),
                offered_load: load,
                avg_load: s.avg_load,
                packets: s.packets,
                drops: s.drops,
                latency_p95_us: s.latency_p95_us,
            });
            let mut named = p.clone();
            named.name = format!("{} at load {}", p.name, pct(load));
            cdfs.push(named);
        }
        let (rss, pp) = (&policy(r, "rss").summary, &policy(r, "rsspp").summary);
        let gain = rss.latency_p95_us / pp.latency_p95_us;
        if gain.is_finite() && gain > best.1 {
            best = (load, gain);
        }
        let _ = writeln!(
            lines,
            "  load {}: RSS drops {}, p95 {} us, p99 {} us, imbalance {}; RSS++ drops {}, p95 {} \
             us, p99 {} us, imbalance {}; p95 RSS / RSS++ = {}",
            pct(load),
            int(rss.drops),
            num(rss.latency_p95_us),
            num(rss.latency_p99_us),
            percent(rss.imbalance_median / 100.0),
            int(pp.drops),
            num(pp.latency_p95_us),
            num(pp.latency_p99_us),
            percent(pp.imbalance_median / 100.0),
            ratio(rss.latency_p95_us, pp.latency_p95_us)
        );
    }
    let base = &e.runs[0].comparison.policies;
    let top = e.runs.last().map(|r| {
        (
            r.comparison.target_load,
            policy(r, "rss").summary.drops,
            policy(r, "rsspp").summary.drops,
        )
    });
    let paper = "RSS++ has up to 14x lower 95th-percentile latency than RSS and drops orders of \
                 magnitude fewer packets at 81%, 90% and 94% average CPU load (Campus #4 on 4 \
                 cores, Figure 10a-c)."
        .to_string();
    let this_run = match top {
        Some((load, rss_drops, pp_drops)) => format!(
            "p95 up to {} lower with RSS++ (at load {}); at load {} RSS drops {}, RSS++ {}",
            ratio(best.1, 1.0),
            pct(best.0),
            pct(load),
            int(rss_drops),
            int(pp_drops)
        ),
        None => "no run".into(),
    };
    let svg = stacked(&[
        charts::sweep_drops(base, &sweep),
        charts::sweep_latency(base, &sweep),
        charts::latency_cdf(&cdfs),
    ]);
    let text = caption(
        &format!("{RSSPP}, Figure 10: RSS against RSS++ under high load, Campus #4 on 4 cores."),
        &paper,
        "(a) packets dropped and (b) 95th-percentile latency against the requested load; (c) the \
         latency CDF of each policy at each load. CSV: one row per policy and load (requested and \
         measured load, packets, drops, p50/p95/p99 latency in microseconds, median imbalance in \
         percent).",
        &lines,
        e,
    );
    PaperFigure {
        id: FigureId::Rsspp10,
        figure: Figure {
            stem: FigureId::Rsspp10.name().into(),
            svg,
            csv,
            caption: text,
        },
        title: "RSS++ Fig. 10 (high load)".into(),
        paper,
        this_run,
    }
}

fn scaling(e: &Experiment) -> PaperFigure {
    let r = &e.runs[0];
    let c = &r.comparison;
    let mut csv = String::from("policy,time_s,active_cores\n");
    for p in &c.policies {
        let step_ms = u64::from(p.timeline.interval_ms.max(1));
        for (i, &n) in p.timeline.active_cores.iter().enumerate() {
            let t = ((i as u64 + 1) * step_ms) as f64 / 1000.0;
            if t > c.duration_s + 1e-9 {
                break;
            }
            let _ = writeln!(csv, "{},{},{}", field(&p.name), value(t), n);
        }
    }
    let mut lines = String::new();
    for p in &c.policies {
        let _ = writeln!(
            lines,
            "  {}: {} cores on average, {} drops, imbalance {}",
            p.name,
            num(p.summary.avg_cores),
            int(p.summary.drops),
            percent(p.summary.imbalance_median / 100.0)
        );
    }
    let pp = policy(r, "rsspp-autoscale").summary.avg_cores;
    let metron = policy(r, "metron-autoscale").summary.avg_cores;
    let rss = policy(r, "rss").summary.avg_cores;
    let paper = "auto-scaling RSS++ uses 50% fewer cores than Metron on average (2x fewer), with \
                 the same throughput; RSS keeps all its cores (Figure 11)."
        .to_string();
    let this_run = format!(
        "RSS {} cores, RSS++ {}, Metron {} (Metron / RSS++ = {})",
        num(rss),
        num(pp),
        num(metron),
        ratio(metron, pp)
    );
    let text = caption(
        &format!(
            "{RSSPP}, Figure 11: CPU scaling as Campus #4's replay rate rises, holds and falls."
        ),
        &paper,
        "cores in use over time per policy, over the offered rate (grey). CSV: each policy's \
         cores in use per 100 ms sample (policy, end of the sample in seconds, cores).",
        &lines,
        e,
    );
    PaperFigure {
        id: FigureId::Rsspp11,
        figure: Figure {
            stem: FigureId::Rsspp11.name().into(),
            svg: standalone(&charts::cores_over_time(&c.policies, c.duration_s)),
            csv,
            caption: text,
        },
        title: "RSS++ Fig. 11 (CPU scaling)".into(),
        paper,
        this_run,
    }
}

fn fairness(e: &Experiment) -> PaperFigure {
    let r = &e.runs[0];
    let c = &r.comparison;
    let mut csv = String::from("policy,sample,imbalance_pct\n");
    for p in &c.policies {
        for (i, &x) in p.imbalance_samples.iter().enumerate() {
            let _ = writeln!(csv, "{},{},{}", field(&p.name), i, value(x));
        }
    }
    let mut ranked: Vec<&PolicyResult> = c.policies.iter().collect();
    ranked.sort_by(|a, b| {
        a.summary
            .imbalance_median
            .total_cmp(&b.summary.imbalance_median)
    });
    let mut lines = String::new();
    for p in &ranked {
        let _ = writeln!(
            lines,
            "  {}: {}",
            p.name,
            percent(p.summary.imbalance_median / 100.0)
        );
    }
    let order: Vec<String> = ranked
        .iter()
        .map(|p| format!("{} {}", p.name, percent(p.summary.imbalance_median / 100.0)))
        .collect();
    let paper = "at W = 150 and about 50% load on 8 cores, software round-robin is fairest, \
                 Sprayer close to it, and RSS++ keeps a much better balance than any other \
                 flow-aware method (Figure 12a)."
        .to_string();
    let this_run = format!("median imbalance, fairest first: {}", order.join(", "));
    let text = caption(
        &format!(
            "{RSSPP}, Figure 12: load imbalance, (max - min) / min packets processed per core, \
             of every method on Campus #4, 8 cores, W = 150, no flow state, load 0.5."
        ),
        &paper,
        "per policy the median over 1-second samples (bar), each sample (dot) and their range. \
         CSV: every sample (policy, index, imbalance in percent).",
        &lines,
        e,
    );
    PaperFigure {
        id: FigureId::Rsspp12,
        figure: Figure {
            stem: FigureId::Rsspp12.name().into(),
            svg: standalone(&charts::imbalance(&c.policies)),
            csv,
            caption: text,
        },
        title: "RSS++ Fig. 12 (fairness)".into(),
        paper,
        this_run,
    }
}

/// The policies of the first run, in order (every run of an experiment
/// runs the same ones).
fn names(e: &Experiment) -> Vec<String> {
    e.runs
        .first()
        .map(|r| {
            r.comparison
                .policies
                .iter()
                .map(|p| p.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn flow_awareness(e: &Experiment) -> PaperFigure {
    let mut csv =
        String::from("policy,flows,packets,processed,reordered,reordered_pct,cycles_per_packet\n");
    let names = names(e);
    let mut reorder: Vec<Series> = names
        .iter()
        .map(|n| Series {
            name: n.clone(),
            points: Vec::new(),
        })
        .collect();
    let mut cycles = reorder.clone();
    let mut lines = String::new();
    for r in &e.runs {
        let flows = r.spec.flows.unwrap_or(0);
        let mut parts = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let s = &policy(r, n).summary;
            let share = if s.processed == 0 {
                f64::NAN
            } else {
                s.reordered as f64 / s.processed as f64
            };
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{}",
                field(n),
                flows,
                s.packets,
                s.processed,
                s.reordered,
                value(share * 100.0),
                value(s.cycles_per_packet)
            );
            reorder[i].points.push((flows as f64, share * 100.0));
            cycles[i].points.push((flows as f64, s.cycles_per_packet));
            parts.push(format!(
                "{} {} reordered, {} cycles/packet",
                n,
                pct(share),
                num(s.cycles_per_packet)
            ));
        }
        let _ = writeln!(lines, "  {flows} flows: {}", parts.join("; "));
    }
    let sprayer = |flows: usize| {
        e.runs
            .iter()
            .find(|r| r.spec.flows == Some(flows))
            .map(|r| {
                let s = &policy(r, "sprayer").summary;
                s.reordered as f64 / s.processed.max(1) as f64
            })
    };
    let few = e.runs.first().and_then(|r| r.spec.flows).unwrap_or(0);
    let many = e.runs.last().and_then(|r| r.spec.flows).unwrap_or(0);
    let paper =
        "flow-unaware spreading (Sprayer) reorders about 30% of packets with 4 flows, less \
                 as flows are added, and can double the CPU cycles per packet; RSS and RSS++ keep \
                 every flow in order (Figure 15)."
            .to_string();
    let this_run =
        format!(
        "Sprayer reorders {} of the packets with {few} flows and {} with {many}; RSS and RSS++ \
         reorder {} and {} packets in all runs",
        sprayer(few).map_or("n/a".into(), pct),
        sprayer(many).map_or("n/a".into(), pct),
        int(e.runs.iter().map(|r| policy(r, "rss").summary.reordered).sum()),
        int(e.runs.iter().map(|r| policy(r, "rsspp").summary.reordered).sum())
    );
    let svg = stacked(&[
        charts::lines(
            "packets reordered against the number of flows",
            Axis {
                title: "concurrent UDP flows",
                scale: AxisScale::Log,
            },
            Axis {
                title: "packets reordered (%)",
                scale: AxisScale::Linear,
            },
            &reorder,
        ),
        charts::lines(
            "cycles per packet against the number of flows",
            Axis {
                title: "concurrent UDP flows",
                scale: AxisScale::Log,
            },
            Axis {
                title: "cycles per packet",
                scale: AxisScale::Linear,
            },
            &cycles,
        ),
    ]);
    let text = caption(
        &format!(
            "{RSSPP}, Figure 15: flow-awareness, N equal UDP flows on 8 cores at load 0.8, RSS, \
             RSS++ and Sprayer."
        ),
        &paper,
        "(a) packets reordered (finished before an earlier packet of their flow, % of those \
         processed) and (b) cycles per packet against the number of flows. CSV: one row per \
         policy and number of flows.",
        &lines,
        e,
    );
    PaperFigure {
        id: FigureId::Rsspp15,
        figure: Figure {
            stem: FigureId::Rsspp15.name().into(),
            svg,
            csv,
            caption: text,
        },
        title: "RSS++ Fig. 15 (flow-awareness)".into(),
        paper,
        this_run,
    }
}

/// `per-bucket` or `shared`, as `--state-table` says.
fn table_name(shared: bool) -> &'static str {
    if shared {
        "shared"
    } else {
        "per-bucket"
    }
}

fn state(e: &Experiment) -> PaperFigure {
    let mut csv = String::from(
        "table,cores,packets,processed,drops,cycles_per_packet,measured_load,latency_p50_us\n",
    );
    let mut series: Vec<Series> = [false, true]
        .map(|shared| Series {
            name: format!("{} flow table", table_name(shared)),
            points: Vec::new(),
        })
        .to_vec();
    for r in &e.runs {
        let s = &policy(r, "rss").summary;
        let shared = r.spec.shared_table;
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{}",
            table_name(shared),
            r.spec.cores,
            s.packets,
            s.processed,
            s.drops,
            value(s.cycles_per_packet),
            value(s.avg_load),
            value(s.latency_p50_us)
        );
        series[usize::from(shared)]
            .points
            .push((r.spec.cores as f64, s.cycles_per_packet));
    }
    let mut lines = String::new();
    for (bucket, shared) in series[0].points.iter().zip(&series[1].points) {
        let _ = writeln!(
            lines,
            "  {} cores: per-bucket {} cycles/packet, shared {} ({} packets per cycle with \
             per-bucket tables)",
            bucket.0,
            num(bucket.1),
            num(shared.1),
            more(shared.1, bucket.1)
        );
    }
    let at8 = series[0]
        .points
        .iter()
        .zip(&series[1].points)
        .find(|(b, _)| b.0 == 8.0)
        .map(|(b, s)| (b.1, s.1));
    let paper = "the per-bucket tables are 20% more efficient than one shared (cuckoo) table as \
                 cores are added (1024 UDP flows, W = 100, Figure 16)."
        .to_string();
    let this_run = match at8 {
        Some((b, s)) => format!(
            "at 8 cores per-bucket {} cycles/packet, shared {}: {} packets per cycle",
            num(b),
            num(s),
            more(s, b)
        ),
        None => "no 8-core run".into(),
    };
    let svg = standalone(&charts::lines(
        "cycles per packet against cores, per-bucket and shared flow tables",
        Axis {
            title: "processing cores",
            scale: AxisScale::Linear,
        },
        Axis {
            title: "cycles per packet",
            scale: AxisScale::Linear,
        },
        &series,
    ));
    let text = caption(
        &format!(
            "{RSSPP}, Figure 16: per-bucket flow tables against one shared table, 1024 UDP flows, \
             W = 100, RSS on 1 to 16 cores at speed 0.6 per core."
        ),
        &paper,
        "cycles per packet against the number of cores, one line per table. CSV: one row per \
         table and core count (packets, processed, drops, cycles per packet, measured load, p50 \
         latency in microseconds).",
        &lines,
        e,
    );
    PaperFigure {
        id: FigureId::Rsspp16,
        figure: Figure {
            stem: FigureId::Rsspp16.name().into(),
            svg,
            csv,
            caption: text,
        },
        title: "RSS++ Fig. 16 (flow state)".into(),
        paper,
        this_run,
    }
}

/// How many more packets per cycle `fast` cycles a packet gives than
/// `slow`: "18% more" (or "n% fewer").
fn more(slow: f64, fast: f64) -> String {
    if !(slow.is_finite() && fast.is_finite() && fast > 0.0) {
        return "n/a".into();
    }
    let gain = slow / fast - 1.0;
    if gain >= 0.0 {
        format!("{} more", pct(gain))
    } else {
        format!("{} fewer", pct(-gain))
    }
}

/// The buffering time of a Reframer run, µs (0: none).
fn buffer_us(r: &Run) -> f64 {
    r.spec.reframer_us.map_or(0.0, |us| us as f64)
}

/// "none" or "64 us".
fn buffer_label(r: &Run) -> String {
    r.spec
        .reframer_us
        .map_or("none".into(), |us| format!("{us} us"))
}

/// A ×1000 counter as a ratio.
fn x1000(v: Option<u64>) -> f64 {
    v.map_or(f64::NAN, |v| v as f64 / 1000.0)
}

fn reframer_locality(e: &Experiment) -> PaperFigure {
    let mut csv = String::from("buffer_us,slf_cores,slf_reframer_in,slf_reframer_out,mean_batch\n");
    let mut cores = Series {
        name: "at the cores".into(),
        points: Vec::new(),
    };
    let mut parts = Vec::new();
    for r in &e.runs {
        let m = &policy(r, "rss").summary.mechanisms;
        let slf = x1000(m.slf_x1000);
        let rf = m.reframer.as_ref();
        let _ = writeln!(
            csv,
            "{},{},{},{},{}",
            value(buffer_us(r)),
            value(slf),
            value(x1000(rf.map(|f| f.reframer_slf_in_x1000))),
            value(x1000(rf.map(|f| f.reframer_slf_out_x1000))),
            value(x1000(rf.map(|f| f.reframer_mean_batch_x1000)))
        );
        cores.points.push((buffer_us(r), slf));
        parts.push(format!("{} {}", buffer_label(r), num(slf)));
    }
    let paper = "the spatial locality factor rises from about 1.2 without Reframer to about 1.9, \
                 2.9 and 3.3 with 16, 64 and 128 us of buffering (Figure 12)."
        .to_string();
    let this_run = format!("SLF at the cores: {}", parts.join(", "));
    let svg = standalone(&charts::lines(
        "spatial locality factor against the buffering time",
        Axis {
            title: "Reframer's buffering time T_buff (us; 0: no Reframer)",
            scale: AxisScale::Linear,
        },
        Axis {
            title: "spatial locality factor",
            scale: AxisScale::Linear,
        },
        &[cores],
    ));
    let text = caption(
        &format!(
            "{REFRAMER}, Figure 12's locality: the spatial locality factor (SLF, the mean run of \
             back-to-back packets of one flow) at the cores, RSS on Campus #4 behind a Reframer."
        ),
        &paper,
        "the SLF at the cores against the buffering time (0: no Reframer). CSV: one row per \
         buffering time (SLF at the cores, of the Reframer's input and output, its mean batch).",
        &format!("  {}\n", this_run),
        e,
    );
    PaperFigure {
        id: FigureId::ReframerLocality,
        figure: Figure {
            stem: FigureId::ReframerLocality.name().into(),
            svg,
            csv,
            caption: text,
        },
        title: "Reframer Fig. 12 (locality)".into(),
        paper,
        this_run,
    }
}

fn reframer_throughput(e: &Experiment) -> PaperFigure {
    let mut csv = String::from(
        "buffer_us,cycles_per_packet,latency_p50_us,latency_p99_us,drops,measured_load\n",
    );
    let mut cycles = Series {
        name: "cycles per packet".into(),
        points: Vec::new(),
    };
    let mut p50 = Series {
        name: "p50 latency".into(),
        points: Vec::new(),
    };
    let mut p99 = Series {
        name: "p99 latency".into(),
        points: Vec::new(),
    };
    let mut lines = String::new();
    for r in &e.runs {
        let s = &policy(r, "rss").summary;
        let b = buffer_us(r);
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{}",
            value(b),
            value(s.cycles_per_packet),
            value(s.latency_p50_us),
            value(s.latency_p99_us),
            s.drops,
            value(s.avg_load)
        );
        cycles.points.push((b, s.cycles_per_packet));
        p50.points.push((b, s.latency_p50_us));
        p99.points.push((b, s.latency_p99_us));
        let _ = writeln!(
            lines,
            "  {}: {} cycles/packet, p50 / p99 {} / {} us",
            buffer_label(r),
            num(s.cycles_per_packet),
            num(s.latency_p50_us),
            num(s.latency_p99_us)
        );
    }
    let first = cycles.points.first().map_or(f64::NAN, |p| p.1);
    let last = cycles.points.last().map_or(f64::NAN, |p| p.1);
    let (last_run, first_run) = (e.runs.last(), e.runs.first());
    let median = |r: Option<&Run>| r.map_or(f64::NAN, |r| policy(r, "rss").summary.latency_p50_us);
    let paper = "with Reframer the cycles per packet fall substantially at every load, \
                 throughput scales up to about 64 Gbps (84-100% more) with 64 and 128 us, and at \
                 low load the latency is the baseline's plus about T_buff (Figure 12a-c)."
        .to_string();
    let this_run = format!(
        "cycles per packet {} without Reframer, {} with {} ({} fewer); p50 latency {} us \
         without, {} us with it",
        num(first),
        num(last),
        last_run.map_or("n/a".into(), buffer_label),
        if first.is_finite() && last.is_finite() && first > 0.0 {
            pct(1.0 - last / first)
        } else {
            "n/a".into()
        },
        num(median(first_run)),
        num(median(last_run))
    );
    let x = Axis {
        title: "Reframer's buffering time T_buff (us; 0: no Reframer)",
        scale: AxisScale::Linear,
    };
    let svg = stacked(&[
        charts::lines(
            "cycles per packet against the buffering time",
            x,
            Axis {
                title: "cycles per packet",
                scale: AxisScale::Linear,
            },
            &[cycles],
        ),
        charts::lines(
            "latency against the buffering time",
            x,
            Axis {
                title: "latency (us)",
                scale: AxisScale::Log,
            },
            &[p50, p99],
        ),
    ]);
    let text = caption(
        &format!(
            "{REFRAMER}, Figure 12's cost and latency: RSS on Campus #4 behind a Reframer, a small \
             per-core cache (the gain is the reuse of back-to-back packets)."
        ),
        &paper,
        "(a) cycles per packet and (b) p50 and p99 latency (from arrival at the Reframer) against \
         the buffering time (0: no Reframer). CSV: one row per buffering time.",
        &lines,
        e,
    );
    PaperFigure {
        id: FigureId::ReframerThroughput,
        figure: Figure {
            stem: FigureId::ReframerThroughput.name().into(),
            svg,
            csv,
            caption: text,
        },
        title: "Reframer Fig. 12 (cost, latency)".into(),
        paper,
        this_run,
    }
}

/// The latency CDF points of `policies` as CSV.
fn cdf_csv(policies: &[PolicyResult]) -> String {
    let mut csv = String::from("policy,latency_us,fraction_at_or_below\n");
    for p in policies {
        for &(us, f) in &p.latency_cdf {
            let _ = writeln!(csv, "{},{},{}", field(&p.name), value(us), value(f));
        }
    }
    csv
}

/// One line per policy: drops and latency percentiles, and its mechanism.
fn summary_lines(policies: &[PolicyResult]) -> String {
    let mut lines = String::new();
    for p in policies {
        let s = &p.summary;
        let _ = writeln!(
            lines,
            "  {}: {} drops ({}), p50 / p95 / p99 {} / {} / {} us, {} migrations",
            p.name,
            int(s.drops),
            pct(drop_share(p)),
            num(s.latency_p50_us),
            num(s.latency_p95_us),
            num(s.latency_p99_us),
            int(s.migrations)
        );
    }
    lines
}

fn affinity_accept(e: &Experiment) -> PaperFigure {
    let r = &e.runs[0];
    let ps = &r.comparison.policies;
    let (rss, aa) = (
        &policy(r, "rss").summary,
        &policy(r, "affinity-accept").summary,
    );
    let paper = "with half the cores slowed by other work, connections time out without load \
                 balancing (median and 90th-percentile latency 10 s); Affinity-Accept's stealing \
                 and flow-group moves bring them to 230 ms and 480 ms (section 6.5)."
        .to_string();
    let this_run = format!(
        "p99 {} us against {} us for RSS ({} lower), p95 {} against {} us; drops {} against {}",
        num(aa.latency_p99_us),
        num(rss.latency_p99_us),
        ratio(rss.latency_p99_us, aa.latency_p99_us),
        num(aa.latency_p95_us),
        num(rss.latency_p95_us),
        int(aa.drops),
        int(rss.drops)
    );
    let text = caption(
        &format!(
            "{AFFINITY}: its headline comparison, connection latency with and without stealing, \
             on its workload: many short TCP connections (7 packets on average) with skewed \
             service times (log-normal, sigma 2), 8 cores at load 0.8. The paper slows cores with \
             a kernel build; here the skew comes from the connections."
        ),
        &paper,
        "(a) the latency CDF and (b) its tail (share of packets slower than x) of RSS and \
         Affinity-Accept. CSV: the CDF points (policy, latency in microseconds, fraction at or \
         below).",
        &summary_lines(ps),
        e,
    );
    PaperFigure {
        id: FigureId::AffinityAccept,
        figure: Figure {
            stem: FigureId::AffinityAccept.name().into(),
            svg: stacked(&[charts::latency_cdf(ps), charts::latency_tail(ps)]),
            csv: cdf_csv(ps),
            caption: text,
        },
        title: "Affinity-Accept (latency)".into(),
        paper,
        this_run,
    }
}

fn orss(e: &Experiment) -> PaperFigure {
    let r = &e.runs[0];
    let ps = &r.comparison.policies;
    let s = |n: &str| &policy(r, n).summary;
    let paper = "oRSS does not have to get lucky as RSS does with a few heavy flows: up to 60% \
                 more throughput and up to four times less per-core imbalance (chapter 5)."
        .to_string();
    let this_run = format!(
        "drops RSS {}, RSS++ {}, oRSS {}; p99 {} / {} / {} us",
        int(s("rss").drops),
        int(s("rsspp").drops),
        int(s("orss").drops),
        num(s("rss").latency_p99_us),
        num(s("rsspp").latency_p99_us),
        num(s("orss").latency_p99_us)
    );
    let text = caption(
        &format!(
            "{ORSS}: its headline comparison, a few elephant flows among mice on 4 cores, oRSS \
             against RSS and RSS++ (which can move buckets, not split one)."
        ),
        &paper,
        "(a) packets dropped per policy and (b) the latency tail (share of packets slower than \
         x). CSV: the latency CDF points (policy, latency in microseconds, fraction at or below); \
         the drops are in this caption.",
        &summary_lines(ps),
        e,
    );
    PaperFigure {
        id: FigureId::Orss,
        figure: Figure {
            stem: FigureId::Orss.name().into(),
            svg: stacked(&[charts::drops_bars(ps), charts::latency_tail(ps)]),
            csv: cdf_csv(ps),
            caption: text,
        },
        title: "oRSS (elephants)".into(),
        paper,
        this_run,
    }
}

/// The figure `id` from its experiment's runs.
///
/// # Panics
///
/// When `experiment` is not the one `id` is drawn from, or lacks a policy
/// the experiment runs.
pub fn paper_figure(id: FigureId, experiment: &Experiment) -> PaperFigure {
    assert_eq!(id.experiment(), experiment.id, "{id:?}");
    match id {
        FigureId::Rsspp10 => high_load(experiment),
        FigureId::Rsspp11 => scaling(experiment),
        FigureId::Rsspp12 => fairness(experiment),
        FigureId::Rsspp15 => flow_awareness(experiment),
        FigureId::Rsspp16 => state(experiment),
        FigureId::ReframerLocality => reframer_locality(experiment),
        FigureId::ReframerThroughput => reframer_throughput(experiment),
        FigureId::AffinityAccept => affinity_accept(experiment),
        FigureId::Orss => orss(experiment),
    }
}

/// A Markdown table cell: no line break, no bar.
fn cell(s: &str) -> String {
    s.replace('|', "/").replace('\n', " ")
}

/// The index of `figures` (Markdown): one row per figure with the paper's
/// result and this run's, then each figure with its caption.
pub fn index(figures: &[PaperFigure], experiments: &[Experiment], scale: Scale) -> String {
    let host_s: f64 = experiments.iter().map(|e| e.wall_s).sum();
    let runs: usize = experiments.iter().map(|e| e.runs.len()).sum();
    let mut md = format!(
        "# The papers' figures, reproduced\n\n\
         Written by `rsspp figures{}`: {} figure{} from {} simulation runs, {} s of host time. \
         Every number below comes from these runs; each caption names the commands that \
         reproduce its figure.\n\n\
         | figure | the paper | this run | files |\n| --- | --- | --- | --- |\n",
        match scale {
            Scale::Full => "",
            Scale::Quick => " --quick",
        },
        figures.len(),
        if figures.len() == 1 { "" } else { "s" },
        runs,
        num(host_s)
    );
    for f in figures {
        let stem = &f.figure.stem;
        let _ = writeln!(
            md,
            "| {} | {} | {} | [svg]({stem}.svg) · [csv]({stem}.csv) · [caption]({stem}.txt) |",
            cell(&f.title),
            cell(&f.paper),
            cell(&f.this_run)
        );
    }
    for f in figures {
        let stem = &f.figure.stem;
        let _ = write!(
            md,
            "\n## {}\n\n![{}]({stem}.svg)\n\n```text\n{}```\n",
            f.title,
            cell(&f.title),
            f.figure.caption
        );
    }
    md
}
