//! The comparison as one self-contained HTML page: inline CSS and inline
//! SVG charts, no script, font or file fetched from anywhere, so it can be
//! mailed, archived and opened offline. Tooltips are SVG `<title>`s.

mod charts;
mod figures;
mod paper;
mod svg;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::result::{Comparison, PolicyResult};
pub use figures::{figures, Figure};
pub use paper::{index, paper_figure, PaperFigure};
use svg::{esc, int, num, pct};

/// The report of `comparison` as a complete HTML document.
pub fn html(comparison: &Comparison) -> String {
    let c = comparison;
    let mut page = String::with_capacity(256 * 1024);
    let title = format!(
        "rsspp compare: {} policies on {}",
        c.policies.len(),
        c.workload
    );
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        esc(&title)
    );
    header(&mut page, c);
    settings(&mut page, c);
    summary(&mut page, c);
    load_section(&mut page, c);
    imbalance_section(&mut page, c);
    latency_section(&mut page, c);
    drops_section(&mut page, c);
    cores_section(&mut page, c);
    glossary(&mut page);
    let _ = write!(
        page,
        "<footer>Written by rsspp {} (<code>rsspp compare</code>). The page is self-contained: \
         no script, font or image is loaded from anywhere. Hover over a chart element for \
         its numbers.</footer>\n</main>\n</body>\n</html>\n",
        esc(env!("CARGO_PKG_VERSION"))
    );
    page
}

fn header(page: &mut String, c: &Comparison) {
    let _ = write!(
        page,
        "<header>\n<h1>Load-balancing comparison</h1>\n<p class=\"sub\">{} on {} processing \
         cores · {} s simulated · requested average load {}</p>\n<nav>",
        esc(&c.workload),
        c.cores,
        num(c.duration_s),
        pct(c.target_load)
    );
    for (id, name) in [
        ("settings", "Settings"),
        ("summary", "Summary"),
        ("load", "Per-core load"),
        ("imbalance", "Imbalance"),
        ("latency", "Latency"),
        ("drops", "Drops"),
        ("cores", "Cores in use"),
        ("metrics", "Metrics explained"),
    ] {
        let _ = write!(page, "<a href=\"#{id}\">{name}</a>");
    }
    page.push_str("</nav>\n</header>\n");
}

fn settings(page: &mut String, c: &Comparison) {
    let first = c.policies.first();
    let interval = first.map_or(0, |p| p.timeline.interval_ms);
    let packets = first.map_or(0, |p| p.summary.packets);
    let mut loads: Vec<f64> = c.sweep.iter().map(|s| s.offered_load).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    let sweep = if loads.is_empty() {
        "not run (add <code>--sweep</code>)".to_string()
    } else {
        format!(
            "{} loads per policy: {}",
            loads.len(),
            loads.iter().map(|l| pct(*l)).collect::<Vec<_>>().join(", ")
        )
    };
    let names: Vec<String> = c.policies.iter().map(|p| esc(&p.name)).collect();
    let rows = [
        ("Workload", esc(&c.workload)),
        ("Processing cores", c.cores.to_string()),
        ("Simulated time", format!("{} s", num(c.duration_s))),
        ("Requested average load", pct(c.target_load)),
        ("Packets offered", int(packets)),
        ("Core clock", format!("{} GHz", num(c.clock_ghz))),
        ("Sample interval", format!("{interval} ms")),
        ("Seed", c.seed.to_string()),
    ];
    page.push_str("<section id=\"settings\">\n<h2>Workload and settings</h2>\n<dl class=\"kv\">");
    for (k, v) in rows {
        let _ = write!(page, "<div><dt>{k}</dt><dd>{v}</dd></div>");
    }
    // Lists that may be long get a whole line.
    for (k, v) in [("Policies", names.join(", ")), ("Load sweep", sweep)] {
        let _ = write!(page, "<div class=\"wide\"><dt>{k}</dt><dd>{v}</dd></div>");
    }
    for caveat in &c.caveats {
        let _ = write!(
            page,
            "<div class=\"wide\"><dt>Note</dt><dd>{}</dd></div>",
            esc(&caveat.to_string())
        );
    }
    page.push_str("</dl>\n</section>\n");
}

/// Indices of the smallest finite value (every one of them, when several
/// tie), or none when the values are all equal.
fn best(values: &[f64]) -> Vec<usize> {
    let finite = || values.iter().copied().filter(|v| v.is_finite());
    let Some(lo) = finite().reduce(f64::min) else {
        return Vec::new();
    };
    let hi = finite().fold(lo, f64::max);
    if hi == lo {
        return Vec::new();
    }
    (0..values.len()).filter(|&i| values[i] == lo).collect()
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn summary(page: &mut String, c: &Comparison) {
    page.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n");
    if c.policies.is_empty() {
        page.push_str("<p class=\"note\">No policy was run.</p>\n</section>\n");
        return;
    }
    let ps = &c.policies;
    let column = |f: &dyn Fn(&PolicyResult) -> f64| -> Vec<usize> {
        if ps.len() > 1 {
            best(&ps.iter().map(f).collect::<Vec<_>>())
        } else {
            Vec::new()
        }
    };
    let best_cols = [
        column(&|p| p.summary.imbalance_median),
        column(&|p| p.summary.latency_p50_us),
        column(&|p| p.summary.latency_p95_us),
        column(&|p| p.summary.latency_p99_us),
        column(&|p| p.summary.drops as f64),
        column(&|p| p.summary.reordered as f64),
    ];
    page.push_str(
        "<div class=\"scroll\"><table class=\"data\">\n<thead><tr><th class=\"l\">policy</th>\
         <th>imbalance<br><small>median, %</small></th><th>p50<br><small>µs</small></th>\
         <th>p95<br><small>µs</small></th><th>p99<br><small>µs</small></th>\
         <th>drops<br><small>packets (share)</small></th>\
         <th>reordered<br><small>packets (share)</small></th><th>migrations</th>\
         <th>cores<br><small>average</small></th><th>load<br><small>of cores in use</small></th>\
         <th>cycles<br><small>per packet</small></th></tr></thead>\n<tbody>\n",
    );
    for (i, p) in ps.iter().enumerate() {
        let s = &p.summary;
        let cell = |col: usize, text: String| {
            if best_cols[col].contains(&i) {
                format!("<td class=\"best\">{text}</td>")
            } else {
                format!("<td>{text}</td>")
            }
        };
        let _ = writeln!(
            page,
            "<tr><td class=\"l\">{}{}</td>{}{}{}{}{}{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            charts::swatch(i),
            esc(&p.name),
            cell(0, num(s.imbalance_median)),
            cell(1, num(s.latency_p50_us)),
            cell(2, num(s.latency_p95_us)),
            cell(3, num(s.latency_p99_us)),
            cell(
                4,
                format!(
                    "{} <small>({})</small>",
                    int(s.drops),
                    pct(share(s.drops, s.packets))
                )
            ),
            cell(
                5,
                format!(
                    "{} <small>({})</small>",
                    int(s.reordered),
                    pct(share(s.reordered, s.processed))
                )
            ),
            int(s.migrations),
            num(s.avg_cores),
            pct(s.avg_load),
            num(s.cycles_per_packet),
        );
    }
    page.push_str(
        "</tbody></table></div>\n<p class=\"note\">Highlighted: the lowest value of a column, \
         in every row that has it (when the policies differ). Drops are a share of the packets offered, reordered \
         packets a share of those processed.</p>\n",
    );
    mechanisms(page, ps);
    page.push_str("</section>\n");
}

/// The policies' own counters (steals, buffered packets, cache hits…):
/// one row per policy listing the counters it reported, rather than a
/// wide table of mostly empty columns.
fn mechanisms(page: &mut String, ps: &[PolicyResult]) {
    let counters: Vec<BTreeMap<&str, u64>> = ps
        .iter()
        .map(|p| p.summary.mechanisms.entries().into_iter().collect())
        .collect();
    if counters.iter().all(BTreeMap::is_empty) {
        return;
    }
    page.push_str(
        "<h3>Mechanism counters</h3>\n<table class=\"data mech\">\n\
         <thead><tr><th class=\"l\">policy</th><th class=\"l\">its counters</th></tr></thead>\n<tbody>\n",
    );
    for (i, (p, counters)) in ps.iter().zip(&counters).enumerate() {
        let list = if counters.is_empty() {
            "<span class=\"na\">none</span>".to_string()
        } else {
            counters
                .iter()
                .map(|(k, v)| {
                    let label = match k.strip_suffix("_us") {
                        Some(stem) => format!("{} (µs)", stem.replace('_', " ")),
                        None => k.replace('_', " "),
                    };
                    format!("{} <b>{}</b>", esc(&label), int(*v))
                })
                .collect::<Vec<_>>()
                .join(" · ")
        };
        let _ = writeln!(
            page,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{list}</td></tr>",
            charts::swatch(i),
            esc(&p.name)
        );
    }
    page.push_str(
        "</tbody></table>\n<p class=\"note\">State hits and misses: accesses to per-flow \
         state found in or missing from the core's cache model; remote: state last touched by \
         another core; lock wait: time spent waiting for a shared table's lock stripes.</p>\n",
    );
}

/// A chart in a `<figure>` with its caption.
fn figure(page: &mut String, svg: &str, caption: &str) {
    let _ = writeln!(
        page,
        "<figure>{svg}<figcaption>{caption}</figcaption></figure>"
    );
}

fn load_section(page: &mut String, c: &Comparison) {
    page.push_str(
        "<section id=\"load\">\n<h2>Per-core load over time</h2>\n<p>Each row is a core, each \
         column a sample of the timeline; the colour is the share of the sample the core spent \
         processing packets (busy / (busy + idle polling), as RSS++ measures it). Dispatching \
         cores of software-dispatch policies are the last rows. Uneven colours down a column \
         are imbalance: the RSS++ paper's Figure 1 shows static RSS leaving some cores \
         saturated while others idle.</p>\n<div class=\"legend\">",
    );
    page.push_str(&charts::heat_legend());
    page.push_str("</div>\n");
    if c.policies.is_empty() {
        page.push_str("<p class=\"note\">No policy was run.</p>\n");
    }
    for (i, p) in c.policies.iter().enumerate() {
        let _ = writeln!(
            page,
            "<figure class=\"heat\">{}</figure>",
            charts::heatmap(p, i, c.cores, c.duration_s)
        );
    }
    page.push_str("</section>\n");
}

fn imbalance_section(page: &mut String, c: &Comparison) {
    page.push_str("<section id=\"imbalance\">\n<h2>Imbalance</h2>\n");
    figure(
        page,
        &charts::imbalance(&c.policies),
        "Bars: median over 1-second samples of (max − min) / min packets processed per core, \
         in percent (the RSS++ paper's Figure 12 metric); only cores in use for the whole second \
         count. Dots: the individual seconds; whisker: their range. Lower is fairer (0 % is a \
         perfect spread); the axis turns logarithmic when policies differ by orders of \
         magnitude.",
    );
    page.push_str("</section>\n");
}

fn latency_section(page: &mut String, c: &Comparison) {
    page.push_str("<section id=\"latency\">\n<h2>Latency</h2>\n");
    figure(
        page,
        &charts::latency_cdf(&c.policies),
        "Cumulative distribution of per-packet latency, from arrival at the NIC to the end of \
         processing (queueing + service). A curve further left is faster; dashed lines mark the \
         95th and 99th percentiles.",
    );
    figure(
        page,
        &charts::latency_tail(&c.policies),
        "The same distributions as the share of packets slower than a given latency, both axes \
         logarithmic: the tail (p99, p99.9) that the CDF compresses into its top edge.",
    );
    page.push_str("</section>\n");
}

fn drops_section(page: &mut String, c: &Comparison) {
    if c.sweep.is_empty() {
        page.push_str("<section id=\"drops\">\n<h2>Drops</h2>\n");
        figure(
            page,
            &charts::drops_bars(&c.policies),
            "Packets dropped because a receive or software queue was full (or a migration \
             buffer overflowed), as a share of the packets offered. Run with \
             <code>--sweep</code> to see drops and latency against offered load.",
        );
    } else {
        page.push_str("<section id=\"drops\">\n<h2>Drops and latency against offered load</h2>\n");
        figure(
            page,
            &charts::sweep_drops(&c.policies, &c.sweep),
            "Each policy replayed at a series of rates, each chosen so that static RSS would \
             keep the cores at the requested average load (a shorter run per point). Share of \
             packets dropped, log scale; points on the “none” line dropped nothing (the RSS++ \
             paper's Figure 10).",
        );
        figure(
            page,
            &charts::sweep_latency(&c.policies, &c.sweep),
            "95th-percentile latency at each requested load, log scale.",
        );
    }
    page.push_str("</section>\n");
}

fn cores_section(page: &mut String, c: &Comparison) {
    page.push_str("<section id=\"cores\">\n<h2>Cores in use over time</h2>\n");
    if !c.policies.iter().any(charts::cores_change) {
        // Flat lines only: a sentence says it better than a tangle of them.
        let list = c
            .policies
            .iter()
            .map(|p| format!("{} {}", esc(&p.name), num(p.summary.avg_cores)))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            page,
            "<p>No policy changed its number of cores during the run (cores in use: {list}). \
             Policies that scale (RSS++ with <code>--autoscale</code>, Metron) follow the \
             offered rate: run with <code>--autoscale</code> to see them do it.</p>\n</section>"
        );
        return;
    }
    figure(
        page,
        &charts::cores_over_time(&c.policies, c.duration_s),
        "Cores in use in each sample (a dispatching core counts); the legend gives each \
         policy's average; the grey area is the offered packet rate. Policies that scale (RSS++ with \
         <code>--autoscale</code>, Metron) follow the rate; static ones keep every core. Lines \
         that coincide are drawn as nested bands.",
    );
    page.push_str("</section>\n");
}

fn glossary(page: &mut String) {
    page.push_str(
        "<section id=\"metrics\">\n<h2>What the metrics mean</h2>\n<dl class=\"glossary\">\n\
         <dt>Imbalance</dt><dd>For each second, (max − min) / min of the packets each core in \
         use processed, in percent; the table shows the median over the seconds. It measures \
         how evenly the work was spread, whatever the total.</dd>\n\
         <dt>Latency p50 / p95 / p99</dt><dd>Percentiles of the time from a packet's arrival at \
         the NIC to the end of its processing: time waiting in a queue plus service time.</dd>\n\
         <dt>Drops</dt><dd>Packets lost because the queue they were steered to was full (NIC \
         receive queues, software queues) or a migration buffer overflowed.</dd>\n\
         <dt>Reordered</dt><dd>Packets that finished before an earlier packet of the same flow: \
         what spreading one flow over several cores costs TCP.</dd>\n\
         <dt>Migrations</dt><dd>Moves of per-flow state between cores: buckets (RSS++), flows \
         (oRSS), flow groups and stolen connections (Affinity-Accept), class splits (Metron).</dd>\n\
         <dt>Cores</dt><dd>The average number of cores in use, a dispatching core included; \
         lower at equal throughput frees cores for other work.</dd>\n\
         <dt>Load</dt><dd>Busy time / (busy + idle polling time) of the cores in use, averaged \
         over samples.</dd>\n\
         <dt>Cycles per packet</dt><dd>Processing cycles per packet, including the cost of \
         state access (cache misses, remote state, lock contention) and of dispatching.</dd>\n\
         </dl>\n</section>\n",
    );
}

/// The page's style sheet: system fonts only, print friendly.
const CSS: &str = r#"
:root{--fg:#1d2330;--muted:#5b6475;--line:#e3e6eb;--bg:#f5f6f8;--card:#fff;--accent:#2f5d8a}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1160px;margin:0 auto;padding:24px 20px 40px}
header h1{margin:0 0 4px;font-size:26px;font-weight:650;letter-spacing:-.01em}
.sub{margin:0 0 12px;color:var(--muted);font-size:15px}
nav{display:flex;flex-wrap:wrap;gap:6px 18px;padding:8px 0 4px;border-bottom:1px solid var(--line)}
nav a{color:var(--accent);text-decoration:none;font-size:13px}
nav a:hover{text-decoration:underline}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px 10px;margin:18px 0}
h2{margin:0 0 10px;font-size:18px;font-weight:620}
h3{margin:18px 0 8px;font-size:15px;font-weight:600}
p{margin:6px 0 10px;max-width:80ch}
.note{color:var(--muted);font-size:12.5px}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f0f2f5;padding:1px 4px;border-radius:3px}
.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:4px 24px;margin:0}
.kv div{display:grid;grid-template-columns:175px 1fr;gap:10px;border-bottom:1px dotted var(--line);padding:3px 0}
.kv dt{color:var(--muted)}
.kv dd{margin:0;font-weight:520}
.kv .wide{grid-column:1/-1}
.scroll{overflow-x:auto}
table.data{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums;font-size:13px}
table.data th{font-weight:600;text-align:right;vertical-align:bottom;padding:6px 8px;border-bottom:2px solid #c9ced6;white-space:nowrap}
table.data th small{font-weight:400;color:var(--muted)}
table.data td{text-align:right;padding:5px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
table.data td small{color:var(--muted)}
table.data .l{text-align:left}
table.data tbody tr:hover{background:#f7f9fc}
td.best{font-weight:700;background:#eaf5ec}
td.na{color:#aaa}
table.mech{font-size:12px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:7px;vertical-align:baseline}
figure{margin:8px 0 16px}
figure.heat{margin:4px 0 8px}
figcaption{color:var(--muted);font-size:12.5px;max-width:95ch;margin-top:2px}
.legend{margin:6px 0 2px}
svg{display:block;max-width:100%;height:auto;font-family:inherit}
svg .tl{font-size:11px;fill:#4a5160}
svg .tls{font-size:10px;fill:#6b7280}
svg .at{font-size:12px;fill:#2b3140}
svg .ct{font-size:13px;font-weight:600;fill:#1d2330}
svg .ll{font-size:12px;fill:#1d2330}
svg .vl{font-size:11px;fill:#2b3140}
svg .nodata{font-size:14px;fill:#9aa1ad;font-style:italic}
svg .grid{stroke:#e9ecf0;stroke-width:1}
svg .grid.minor{stroke:#f4f5f7}
svg .axis,svg .tick{stroke:#8a919e;stroke-width:1}
svg .whisker{stroke:#2b3140;stroke-width:1.2}
svg .guide{stroke:#9aa1ad;stroke-width:1;stroke-dasharray:2 3}
svg .ref{stroke:#9aa1ad;stroke-width:1;stroke-dasharray:4 3}
svg .series:hover polyline{stroke-width:4}
.glossary dt{font-weight:600;margin-top:8px}
.glossary dd{margin:2px 0 6px 0;color:#343b49;max-width:90ch}
footer{color:var(--muted);font-size:12px;margin-top:24px;text-align:center}
@media print{body{background:#fff}section{border:none;padding:0;break-inside:avoid}}
"#;
