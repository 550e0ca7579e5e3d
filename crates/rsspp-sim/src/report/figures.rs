//! The figures of the papers a comparison reproduces, each as a standalone
//! SVG (the report's charts, with the report's style inside), the CSV of
//! the numbers it draws, and a caption naming the paper's figure and the
//! paper's numbers beside this run's (`rsspp compare --figures DIR`).
//!
//! What a run can produce depends on what it ran: every run gives the
//! latency (RSS++ Figure 10) and the imbalance (RSS++ Figure 12's measure);
//! a run in which a policy changed its cores in use (`--autoscale`,
//! `--ramp`) also gives the CPU scaling (RSS++ Figure 11).

use std::fmt::Write;

use super::charts;
use super::svg::num;
use crate::result::Comparison;

/// One reproduced figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    /// File stem: the files are `<stem>.svg`, `<stem>.csv` and
    /// `<stem>.txt` (the caption).
    pub stem: String,
    /// A complete SVG document.
    pub svg: String,
    /// The numbers it draws, with a header row.
    pub csv: String,
    /// What the figure is, the paper's figure and numbers, this run's.
    pub caption: String,
}

const PAPER: &str = "RSS++ (Barbette et al., \"RSS++: load and state-aware receive side \
                     scaling\", CoNEXT 2019)";

/// A chart of the report as a standalone SVG document: the report's style
/// goes inside it.
pub(super) fn standalone(chart: &str) -> String {
    let end = chart.find('>').map_or(0, |i| i + 1);
    let mut out = String::with_capacity(chart.len() + super::CSS.len() + 128);
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&chart[..end]);
    let _ = write!(
        out,
        "<style>{}</style><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>",
        super::CSS
    );
    out.push_str(&chart[end..]);
    out.push('\n');
    out
}

/// Charts stacked top to bottom as one standalone SVG document (a figure
/// with several panels): each chart's drawing moved down by the heights
/// of those above it.
pub(super) fn stacked(charts: &[String]) -> String {
    // The chart's opening tag, its drawing, and its height.
    let parts = |chart: &str| -> (String, f64) {
        let open = chart.find('>').map_or(0, |i| i + 1);
        let close = chart.rfind("</svg>").unwrap_or(chart.len()).max(open);
        let height = chart[..open]
            .split(" height=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|h| h.parse().ok())
            .unwrap_or(0.0);
        (chart[open..close].to_string(), height)
    };
    let total: f64 = charts.iter().map(|c| parts(c).1).sum();
    let mut outer = String::new();
    let _ = write!(
        outer,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {total}" width="{w}" height="{total}" role="img">"#,
        w = charts::WIDTH
    );
    let mut y = 0.0;
    for c in charts {
        let (drawing, height) = parts(c);
        let _ = write!(outer, "<g transform=\"translate(0 {y})\">{drawing}</g>");
        y += height;
    }
    outer.push_str("</svg>");
    standalone(&outer)
}

/// A CSV field: names are quoted when they hold a comma or a quote.
pub(super) fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A number for the CSV: empty when not finite (no sample).
pub(super) fn value(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        String::new()
    }
}

/// A percentage for a caption.
pub(super) fn percent(x: f64) -> String {
    if x == f64::INFINITY {
        "inf".into()
    } else if x.is_finite() {
        format!("{}%", num(100.0 * x))
    } else {
        "n/a".into()
    }
}

fn run_line(c: &Comparison) -> String {
    format!(
        "This run: {} on {} cores, {} s simulated, requested load {}, seed {}.",
        c.workload,
        c.cores,
        num(c.duration_s),
        percent(c.target_load),
        c.seed
    )
}

fn latency(c: &Comparison) -> Figure {
    let mut csv = String::from("policy,latency_us,fraction_at_or_below\n");
    for p in &c.policies {
        for &(us, f) in &p.latency_cdf {
            let _ = writeln!(csv, "{},{},{}", field(&p.name), value(us), value(f));
        }
    }
    let mut caption = format!(
        "{PAPER}, Figure 10: latency under high load, RSS against RSS++ on Campus #4.\n\
         The paper: RSS++'s 95th-percentile latency is up to 14x lower than RSS's, and RSS \
         drops packets where RSS++ does not.\n{}\n\
         The chart: each policy's latency CDF (queueing + service, log scale). CSV: the CDF \
         points (policy, latency in microseconds, fraction of packets at or below).\n\
         This run, per policy (p50 / p95 / p99 latency, drops):\n",
        run_line(c)
    );
    for p in &c.policies {
        let s = &p.summary;
        let _ = writeln!(
            caption,
            "  {}: {} / {} / {} us, {} drops",
            p.name,
            num(s.latency_p50_us),
            num(s.latency_p95_us),
            num(s.latency_p99_us),
            s.drops
        );
    }
    Figure {
        stem: "rsspp-fig10-latency".into(),
        svg: standalone(&charts::latency_cdf(&c.policies)),
        csv,
        caption,
    }
}

fn imbalance(c: &Comparison) -> Figure {
    let mut csv = String::from("policy,sample,imbalance_pct\n");
    for p in &c.policies {
        for (i, &x) in p.imbalance_samples.iter().enumerate() {
            let _ = writeln!(csv, "{},{},{}", field(&p.name), i, value(x));
        }
    }
    let mut caption = format!(
        "{PAPER}, Figure 12's measure: load imbalance, (max - min) / min packets processed \
         per core, over 1-second samples.\n\
         The paper's numbers on Campus #4 at 8 cores (as the project's issue 18 cites them): \
         RSS 51.2%, RSS++ 14.5% (the paper's Figure 12 ranks software round-robin and Sprayer \
         fairest, RSS++ the fairest flow-aware method).\n{}\n\
         The chart: per policy the median (bar), each 1-second sample (dot) and their range. \
         CSV: every sample (policy, index, imbalance in percent).\n\
         This run, median imbalance per policy:\n",
        run_line(c)
    );
    for p in &c.policies {
        let _ = writeln!(
            caption,
            "  {}: {}",
            p.name,
            percent(p.summary.imbalance_median / 100.0)
        );
    }
    Figure {
        stem: "rsspp-fig12-imbalance".into(),
        svg: standalone(&charts::imbalance(&c.policies)),
        csv,
        caption,
    }
}

fn scaling(c: &Comparison) -> Option<Figure> {
    if !c.policies.iter().any(charts::cores_change) {
        return None;
    }
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
    let mut caption = format!(
        "{PAPER}, Figure 11: CPU scaling, cores in use as the offered load rises and falls \
         (the paper's trace is Campus #4 replayed along a ramp).\n\
         The paper: auto-scaling RSS++ uses about half the cores Metron uses (2x fewer), with \
         a low imbalance throughout.\n{}\n\
         The chart: cores in use over time per policy, over the offered rate. CSV: each \
         policy's cores in use per sample (policy, end of the sample in seconds, cores).\n\
         This run, average cores in use per policy:\n",
        run_line(c)
    );
    for p in &c.policies {
        let _ = writeln!(caption, "  {}: {}", p.name, num(p.summary.avg_cores));
    }
    Some(Figure {
        stem: "rsspp-fig11-scaling".into(),
        svg: standalone(&charts::cores_over_time(&c.policies, c.duration_s)),
        csv,
        caption,
    })
}

/// The figures `comparison` reproduces, in the papers' order.
pub fn figures(comparison: &Comparison) -> Vec<Figure> {
    let mut out = vec![latency(comparison)];
    out.extend(scaling(comparison));
    out.push(imbalance(comparison));
    out
}
