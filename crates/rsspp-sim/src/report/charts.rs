//! The report's charts, each an inline `<svg>` built from a comparison's
//! results. Every chart copes with missing, empty or non-finite data: it
//! then says "no data" instead of drawing nonsense.

use super::svg::{
    esc, heat_color, int, nice_max, nice_ticks, num, pct, pct_tick, policy_color, policy_dash,
    tick_label, Linear, Log10, Svg, INACTIVE,
};
use crate::result::{PolicyResult, SweepPoint, Timeline};

/// Width of every chart, pixels (the page is laid out for it).
pub const WIDTH: f64 = 1080.0;
/// Width of the legend column on the right of line charts.
const LEGEND_W: f64 = 200.0;
/// Longest policy name drawn in full (longer ones are cut, the tooltip has
/// them whole).
const NAME_CHARS: usize = 26;

/// `name` cut to `max` characters with an ellipsis.
fn short(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        name.to_string()
    } else {
        let mut s: String = name.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// Finite values only.
fn finite(values: impl IntoIterator<Item = f64>) -> impl Iterator<Item = f64> {
    values.into_iter().filter(|v| v.is_finite())
}

/// The plot area of a chart.
#[derive(Debug, Clone, Copy)]
struct Area {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

impl Area {
    fn width(&self) -> f64 {
        self.right - self.left
    }
    fn mid_x(&self) -> f64 {
        (self.left + self.right) / 2.0
    }
    fn mid_y(&self) -> f64 {
        (self.top + self.bottom) / 2.0
    }
}

/// Vertical grid lines, ticks and labels under `area`, and the axis title.
fn x_axis(svg: &mut Svg, area: Area, ticks: &[(f64, String, bool)], title: &str) {
    for (x, label, major) in ticks {
        if *major {
            svg.line(*x, area.top, *x, area.bottom, "grid");
            svg.line(*x, area.bottom, *x, area.bottom + 5.0, "tick");
            svg.text(*x, area.bottom + 18.0, "middle", "tl", label);
        } else {
            svg.line(*x, area.top, *x, area.bottom, "grid minor");
            svg.line(*x, area.bottom, *x, area.bottom + 3.0, "tick");
        }
    }
    svg.line(area.left, area.bottom, area.right, area.bottom, "axis");
    svg.text(area.mid_x(), area.bottom + 38.0, "middle", "at", title);
}

/// Horizontal grid lines, ticks and labels left of `area`, and the axis
/// title.
fn y_axis(svg: &mut Svg, area: Area, ticks: &[(f64, String, bool)], title: &str) {
    for (y, label, major) in ticks {
        if *major {
            svg.line(area.left, *y, area.right, *y, "grid");
            svg.line(area.left - 5.0, *y, area.left, *y, "tick");
            svg.text(area.left - 8.0, *y + 4.0, "end", "tl", label);
        } else {
            svg.line(area.left, *y, area.right, *y, "grid minor");
            svg.line(area.left - 3.0, *y, area.left, *y, "tick");
        }
    }
    svg.line(area.left, area.top, area.left, area.bottom, "axis");
    svg.vtext(area.left - 52.0, area.mid_y(), "at", title);
}

/// Ticks of a linear scale as `(pixel, label, major)`.
fn linear_ticks(
    scale: &Linear,
    values: &[f64],
    label: impl Fn(f64) -> String,
) -> Vec<(f64, String, bool)> {
    values
        .iter()
        .map(|&v| (scale.map(v), label(v), true))
        .collect()
}

/// Ticks of a log scale: labelled decades, unlabelled minors.
fn log_ticks(scale: &Log10, label: impl Fn(f64) -> String) -> Vec<(f64, String, bool)> {
    scale
        .ticks()
        .into_iter()
        .map(|(v, major)| {
            let text = if major { label(v) } else { String::new() };
            (scale.map(v), text, major)
        })
        .collect()
}

/// A legend column: one line swatch and name per entry.
fn legend(svg: &mut Svg, x: f64, y: f64, entries: &[(String, usize)]) {
    for (k, (label, i)) in entries.iter().enumerate() {
        let ly = y + k as f64 * 20.0;
        svg.open_group("class=\"leg\"");
        svg.title(label);
        let dash = policy_dash(*i);
        svg.polyline(
            &[(x, ly), (x + 24.0, ly)],
            policy_color(*i),
            3.0,
            if dash.is_empty() { "" } else { dash },
        );
        svg.text(x + 32.0, ly + 4.0, "start", "ll", &short(label, NAME_CHARS));
        svg.close_group();
    }
}

/// A "no data" note in the middle of `area`.
fn no_data(svg: &mut Svg, area: Area, what: &str) {
    svg.text(area.mid_x(), area.mid_y(), "middle", "nodata", what);
}

/// The samples of `t` inside the simulated `duration_s`: the engine adds
/// a last, partial sample while the cores drain their queues, whose load
/// (work over a full interval's length) would show as a misleading cold
/// column. All of them when the duration is unknown.
fn shown_samples(t: &Timeline, len: usize, duration_s: f64) -> usize {
    let interval_s = f64::from(t.interval_ms.max(1)) / 1000.0;
    if duration_s.is_finite() && duration_s > 0.0 {
        // The tolerance keeps 4.0 s / 0.1 s at 40 samples despite rounding.
        let within = (duration_s / interval_s - 1e-6).ceil().max(1.0) as usize;
        len.min(within)
    } else {
        len
    }
}

/// Label for a time axis tick, seconds.
fn seconds(v: f64) -> String {
    tick_label(v)
}

/// Per-core load over time for one policy: the RSS++ paper's Figure 1.
/// Rows are cores (processing cores first, then dispatching cores),
/// columns are samples (those within `duration_s`); a core not in use is
/// grey.
pub fn heatmap(p: &PolicyResult, index: usize, workers: usize, duration_s: f64) -> String {
    const ROW_H: f64 = 14.0;
    const GAP: f64 = 6.0;
    // Beyond one column per pixel nothing more can be seen: samples are
    // averaged into at most this many columns.
    const MAX_COLUMNS: usize = 900;
    let t = &p.timeline;
    let samples = shown_samples(t, t.load.len(), duration_s);
    let rows = t.load[..samples].iter().map(Vec::len).max().unwrap_or(0);
    let dispatch_rows = rows.saturating_sub(workers);
    let rows_h = rows as f64 * ROW_H + if dispatch_rows > 0 { GAP } else { 0.0 };
    let area = Area {
        left: 92.0,
        top: 30.0,
        right: WIDTH - 80.0,
        bottom: 30.0 + rows_h.max(ROW_H * 2.0),
    };
    let height = area.bottom + 46.0;
    let mut svg = Svg::new(
        WIDTH,
        height,
        &format!("per-core load over time, {}", p.name),
    );
    // Title: swatch, name, headline numbers.
    svg.rect(0.0, 6.0, 12.0, 12.0, policy_color(index), "", "");
    svg.text(
        18.0,
        16.0,
        "start",
        "ct",
        &format!(
            "{} — mean load {} · imbalance median {} · {} cores on average",
            short(&p.name, 40),
            pct(p.summary.avg_load),
            pct(p.summary.imbalance_median / 100.0),
            num(p.summary.avg_cores)
        ),
    );
    if samples == 0 || rows == 0 {
        no_data(&mut svg, area, "no samples");
        return svg.finish();
    }
    let interval_s = f64::from(t.interval_ms.max(1)) / 1000.0;
    let total_s = samples as f64 * interval_s;
    let bin = samples.div_ceil(MAX_COLUMNS).max(1);
    let columns = samples.div_ceil(bin);
    let col_w = area.width() / columns as f64;
    let x_of = |col: usize| area.left + col as f64 * col_w;
    let row_y = |r: usize| area.top + r as f64 * ROW_H + if r >= workers { GAP } else { 0.0 };
    let active = |s: usize, r: usize| -> bool {
        t.load[s].get(r).is_some()
            && t.active
                .get(s)
                .is_none_or(|a| a.get(r).copied().unwrap_or(true))
    };
    svg.open_group("shape-rendering=\"crispEdges\"");
    for r in 0..rows {
        let label = if r < workers {
            format!("core {r}")
        } else if dispatch_rows == 1 {
            "dispatch".to_string()
        } else {
            format!("dispatch {}", r - workers)
        };
        // One cell per column: the mean load of the samples it covers in
        // which the core was in use; `None` when it was in use in none.
        let cells: Vec<Option<f64>> = (0..columns)
            .map(|col| {
                let range = col * bin..((col + 1) * bin).min(samples);
                let (sum, n) = range
                    .filter(|&s| active(s, r))
                    .map(|s| f64::from(t.load[s][r]))
                    .filter(|v| v.is_finite())
                    .fold((0.0, 0usize), |(a, n), v| (a + v, n + 1));
                (n > 0).then(|| sum / n as f64)
            })
            .collect();
        // Neighbouring cells of the same colour (2 % steps) are drawn as one
        // rectangle: a 10-minute run stays a small file.
        let level = |c: Option<f64>| c.map(|v| (v.clamp(0.0, 1.0) * 50.0).round() as i32);
        let y = row_y(r);
        let mut start = 0;
        while start < columns {
            let lv = level(cells[start]);
            let mut end = start + 1;
            while end < columns && level(cells[end]) == lv {
                end += 1;
            }
            let from = (start * bin) as f64 * interval_s;
            let to = ((end * bin).min(samples)) as f64 * interval_s;
            let (fill, what) = match lv {
                Some(l) => {
                    let mean =
                        cells[start..end].iter().flatten().sum::<f64>() / (end - start) as f64;
                    (
                        heat_color(f64::from(l) / 50.0),
                        format!("load {}", pct(mean)),
                    )
                }
                None => (INACTIVE.to_string(), "not in use".to_string()),
            };
            // Each cell overlaps the next by half a pixel: rounding would
            // otherwise leave hairline seams between them.
            let overlap = if end < columns { 0.5 } else { 0.0 };
            svg.rect(
                x_of(start),
                y,
                x_of(end) - x_of(start) + overlap,
                ROW_H - 1.0,
                &fill,
                "",
                &format!(
                    "{} · {label}, {}–{} s: {what}",
                    p.name,
                    tick_label(from),
                    tick_label(to)
                ),
            );
            start = end;
        }
        svg.text(area.left - 8.0, y + ROW_H - 3.5, "end", "tl", &label);
        // The row's mean load over the samples the core was in use.
        let (sum, n) = (0..samples)
            .filter(|&s| active(s, r))
            .map(|s| f64::from(t.load[s][r]))
            .filter(|v| v.is_finite())
            .fold((0.0, 0usize), |(a, n), v| (a + v, n + 1));
        let mean = if n > 0 {
            pct(sum / n as f64)
        } else {
            "–".into()
        };
        svg.text(area.right + 8.0, y + ROW_H - 3.5, "start", "tl", &mean);
    }
    svg.close_group();
    svg.text(area.right + 8.0, area.top - 6.0, "start", "tls", "mean");
    let x = Linear::new(0.0, total_s, area.left, area.right);
    let ticks = linear_ticks(&x, &nice_ticks(0.0, total_s, 10), seconds);
    let bottom = area.top + rows_h;
    let axis_area = Area { bottom, ..area };
    for (px, label, _) in &ticks {
        svg.line(*px, bottom, *px, bottom + 5.0, "tick");
        svg.text(*px, bottom + 18.0, "middle", "tl", label);
    }
    svg.line(area.left, bottom, area.right, bottom, "axis");
    svg.text(axis_area.mid_x(), bottom + 36.0, "middle", "at", "time (s)");
    svg.finish()
}

/// The heatmaps' colour scale: 0–100 % load, and the grey of a core not in
/// use.
pub fn heat_legend() -> String {
    let mut svg = Svg::new(560.0, 46.0, "colour scale of the load heatmaps");
    let (x0, w, steps) = (70.0, 360.0, 50);
    svg.text(x0 - 8.0, 23.0, "end", "tl", "core load");
    svg.open_group("shape-rendering=\"crispEdges\"");
    for i in 0..steps {
        let v = i as f64 / (steps - 1) as f64;
        let x = x0 + w * i as f64 / steps as f64;
        svg.rect(x, 8.0, w / steps as f64 + 0.5, 20.0, &heat_color(v), "", "");
    }
    svg.close_group();
    for v in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let x = x0 + w * v;
        svg.line(x, 28.0, x, 32.0, "tick");
        svg.text(x, 44.0, "middle", "tl", &pct(v));
    }
    svg.rect(x0 + w + 30.0, 8.0, 20.0, 20.0, INACTIVE, "", "");
    svg.text(x0 + w + 56.0, 23.0, "start", "tl", "not in use");
    svg.finish()
}

/// A value axis starting at 0, or logarithmic when the positive values span
/// more than a factor of 20 (fair policies sit at 0.1 %, static RSS at
/// 50 %: on a linear axis the fair ones would all look alike).
enum ValueAxis {
    Lin(Linear),
    Log(Log10),
}

impl ValueAxis {
    fn new(values: impl IntoIterator<Item = f64>, r0: f64, r1: f64) -> Self {
        let (lo, hi) = finite(values)
            .filter(|v| *v > 0.0)
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        if lo.is_finite() && hi / lo > 20.0 {
            ValueAxis::Log(Log10::new(lo, hi, r0, r1))
        } else {
            ValueAxis::Lin(Linear::new(0.0, nice_max(hi), r0, r1))
        }
    }

    fn is_log(&self) -> bool {
        matches!(self, ValueAxis::Log(_))
    }

    fn map(&self, v: f64) -> f64 {
        match self {
            ValueAxis::Lin(s) => s.map(v),
            ValueAxis::Log(s) => s.map(v),
        }
    }

    fn ticks(&self, label: impl Fn(f64) -> String) -> Vec<(f64, String, bool)> {
        match self {
            ValueAxis::Lin(s) => {
                let (lo, hi) = s.domain();
                linear_ticks(s, &nice_ticks(lo, hi, 8), label)
            }
            ValueAxis::Log(s) => log_ticks(s, label),
        }
    }
}

/// Imbalance per policy: the median as a bar, every 1-second sample as a
/// dot, and their range as a whisker.
pub fn imbalance(policies: &[PolicyResult]) -> String {
    const ROW_H: f64 = 30.0;
    let area = Area {
        left: 200.0,
        top: 12.0,
        right: WIDTH - 110.0,
        bottom: 12.0 + ROW_H * policies.len().max(2) as f64,
    };
    let mut svg = Svg::new(WIDTH, area.bottom + 48.0, "imbalance per policy");
    let x = percent_axis(
        &mut svg,
        area,
        policies
            .iter()
            .flat_map(|p| p.imbalance_samples.iter().copied())
            .chain(policies.iter().map(|p| p.summary.imbalance_median)),
        (
            "imbalance: (max − min) / min packets per core, %",
            " — lower is fairer",
        ),
    );
    if policies.is_empty() {
        no_data(&mut svg, area, "no policy was run");
        return svg.finish();
    }
    for (i, p) in policies.iter().enumerate() {
        let cy = area.top + ROW_H * (i as f64 + 0.5);
        let median = p.summary.imbalance_median;
        svg.text(
            area.left - 10.0,
            cy + 4.0,
            "end",
            "ll",
            &short(&p.name, NAME_CHARS),
        );
        if median.is_infinite() {
            // Some core processed nothing while others worked, in most
            // seconds (fewer flows than cores): no bar can show it.
            svg.text(
                area.left + 8.0,
                cy + 4.0,
                "start",
                "vl",
                &format!(
                    "∞: a core processed nothing while others worked ({} s)",
                    p.imbalance_samples.len()
                ),
            );
            continue;
        }
        bar(
            &mut svg,
            &x,
            area,
            cy,
            median,
            i,
            &format!("{}: median imbalance {}", p.name, pct(median / 100.0)),
        );
        let samples: Vec<f64> = finite(p.imbalance_samples.iter().copied()).collect();
        if let (Some(lo), Some(hi)) = (
            samples.iter().copied().reduce(f64::min),
            samples.iter().copied().reduce(f64::max),
        ) {
            svg.line(x.map(lo), cy, x.map(hi), cy, "whisker");
            svg.line(x.map(lo), cy - 5.0, x.map(lo), cy + 5.0, "whisker");
            svg.line(x.map(hi), cy - 5.0, x.map(hi), cy + 5.0, "whisker");
        }
        for (k, v) in samples.iter().enumerate() {
            // Spread the dots vertically (golden-ratio sequence, the same on
            // every rendering) so that equal samples stay visible.
            let jitter = ((k as f64 * 0.618_034).fract() - 0.5) * 10.0;
            svg.circle(
                x.map(*v),
                cy + jitter,
                2.4,
                "#222",
                " fill-opacity=\"0.55\"",
                &format!("{}: second {}: {}", p.name, k + 1, pct(v / 100.0)),
            );
        }
        let end = samples.iter().copied().fold(median, f64::max).max(median);
        svg.text(
            x.map(end) + 8.0,
            cy + 4.0,
            "start",
            "vl",
            &format!("{} ({} s)", pct(median / 100.0), samples.len()),
        );
    }
    svg.finish()
}

/// The horizontal axis of a bar chart of percentages over `values`, titled
/// `before` + ", log scale" when the axis is logarithmic + `after`.
fn percent_axis(
    svg: &mut Svg,
    area: Area,
    values: impl Iterator<Item = f64>,
    (before, after): (&str, &str),
) -> ValueAxis {
    let x = ValueAxis::new(values, area.left, area.right);
    let log = if x.is_log() { ", log scale" } else { "" };
    x_axis(
        svg,
        area,
        &x.ticks(|v| format!("{}%", tick_label(v))),
        &format!("{before}{log}{after}"),
    );
    x
}

/// A policy's value on a bar chart's axis: a bar from the axis's origin on
/// a linear axis; on a log axis, where a bar's length would mean nothing
/// (there is no zero), a dot at the value.
fn bar(svg: &mut Svg, x: &ValueAxis, area: Area, cy: f64, value: f64, i: usize, title: &str) {
    match x {
        ValueAxis::Lin(_) => svg.rect(
            area.left,
            cy - 9.0,
            x.map(value) - area.left,
            18.0,
            policy_color(i),
            " fill-opacity=\"0.8\"",
            title,
        ),
        ValueAxis::Log(_) => {
            svg.line(area.left, cy, x.map(value), cy, "guide");
            svg.circle(x.map(value), cy, 7.0, policy_color(i), "", title);
        }
    }
}

/// Latency CDF per policy, log-scale microseconds.
pub fn latency_cdf(policies: &[PolicyResult]) -> String {
    let area = Area {
        left: 80.0,
        top: 14.0,
        right: WIDTH - LEGEND_W - 20.0,
        bottom: 330.0,
    };
    let mut svg = Svg::new(WIDTH, area.bottom + 50.0, "latency CDF per policy");
    let (lo, hi) = latency_range(policies);
    let x = Log10::new(lo, hi, area.left, area.right);
    let y = Linear::new(0.0, 1.0, area.bottom, area.top);
    x_axis(
        &mut svg,
        area,
        &log_ticks(&x, tick_label),
        "latency: queueing + service (µs, log scale)",
    );
    let yt = linear_ticks(&y, &[0.0, 0.25, 0.5, 0.75, 1.0], pct);
    y_axis(&mut svg, area, &yt, "packets at or below (%)");
    for (q, label) in [(0.95, "p95"), (0.99, "p99")] {
        let py = y.map(q);
        svg.line(area.left, py, area.right, py, "ref");
        // At the left the curves are still low: the label stays readable.
        svg.text(area.left + 6.0, py - 3.0, "start", "tls", label);
    }
    let mut entries = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let points: Vec<(f64, f64)> = p
            .latency_cdf
            .iter()
            .filter(|(us, f)| us.is_finite() && f.is_finite())
            .map(|&(us, f)| (x.map(us), y.map(f)))
            .collect();
        svg.open_group("class=\"series\"");
        svg.title(&format!(
            "{}: p50 {} µs, p95 {} µs, p99 {} µs",
            p.name,
            num(p.summary.latency_p50_us),
            num(p.summary.latency_p95_us),
            num(p.summary.latency_p99_us)
        ));
        svg.polyline(&points, policy_color(i), 2.2, policy_dash(i));
        svg.close_group();
        entries.push((p.name.clone(), i));
    }
    if policies.iter().all(|p| p.latency_cdf.is_empty()) {
        no_data(&mut svg, area, "no packet was processed");
    }
    legend(&mut svg, area.right + 24.0, area.top + 10.0, &entries);
    svg.finish()
}

/// The latency tail: the share of packets slower than x, log-log, where
/// p99 and p99.9 differences show.
pub fn latency_tail(policies: &[PolicyResult]) -> String {
    const FLOOR: f64 = 1e-5;
    let area = Area {
        left: 80.0,
        top: 14.0,
        right: WIDTH - LEGEND_W - 20.0,
        bottom: 300.0,
    };
    let mut svg = Svg::new(WIDTH, area.bottom + 50.0, "latency tail per policy");
    let (lo, hi) = latency_range(policies);
    let x = Log10::new(lo, hi, area.left, area.right);
    let y = Log10::new(FLOOR, 1.0, area.bottom, area.top);
    x_axis(
        &mut svg,
        area,
        &log_ticks(&x, tick_label),
        "latency (µs, log scale)",
    );
    y_axis(
        &mut svg,
        area,
        &log_ticks(&y, pct_tick),
        "packets slower (%, log scale)",
    );
    let mut entries = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let mut points = Vec::new();
        for &(us, f) in &p.latency_cdf {
            if !(us.is_finite() && f.is_finite()) {
                continue;
            }
            let above = 1.0 - f;
            // The line ends where it leaves the chart's floor.
            points.push((x.map(us), y.map(above.max(FLOOR))));
            if above < FLOOR {
                break;
            }
        }
        svg.open_group("class=\"series\"");
        svg.title(&format!(
            "{}: 1 % of packets slower than {} µs",
            p.name,
            num(p.summary.latency_p99_us)
        ));
        svg.polyline(&points, policy_color(i), 2.2, policy_dash(i));
        svg.close_group();
        entries.push((p.name.clone(), i));
    }
    if policies.iter().all(|p| p.latency_cdf.is_empty()) {
        no_data(&mut svg, area, "no packet was processed");
    }
    legend(&mut svg, area.right + 24.0, area.top + 10.0, &entries);
    svg.finish()
}

/// The smallest and largest latency of all CDFs, microseconds.
fn latency_range(policies: &[PolicyResult]) -> (f64, f64) {
    let all = || {
        finite(
            policies
                .iter()
                .flat_map(|p| p.latency_cdf.iter().map(|&(us, _)| us)),
        )
        .filter(|us| *us > 0.0)
    };
    let lo = all().fold(f64::INFINITY, f64::min);
    let hi = all().fold(0.0, f64::max);
    if lo.is_finite() && hi > 0.0 {
        (lo, hi)
    } else {
        (1.0, 1000.0)
    }
}

/// Drops per policy as bars (when no load sweep ran).
pub fn drops_bars(policies: &[PolicyResult]) -> String {
    const ROW_H: f64 = 30.0;
    let area = Area {
        left: 200.0,
        top: 12.0,
        right: WIDTH - 170.0,
        bottom: 12.0 + ROW_H * policies.len().max(2) as f64,
    };
    let mut svg = Svg::new(WIDTH, area.bottom + 48.0, "drops per policy");
    let share = |p: &PolicyResult| {
        if p.summary.packets == 0 {
            0.0
        } else {
            p.summary.drops as f64 / p.summary.packets as f64
        }
    };
    let x = percent_axis(
        &mut svg,
        area,
        policies.iter().map(|p| share(p) * 100.0),
        ("packets dropped (% of offered", ")"),
    );
    if policies.is_empty() {
        no_data(&mut svg, area, "no policy was run");
        return svg.finish();
    }
    for (i, p) in policies.iter().enumerate() {
        let cy = area.top + ROW_H * (i as f64 + 0.5);
        let s = share(p);
        svg.text(
            area.left - 10.0,
            cy + 4.0,
            "end",
            "ll",
            &short(&p.name, NAME_CHARS),
        );
        let label = format!("{} ({})", int(p.summary.drops), pct(s));
        bar(
            &mut svg,
            &x,
            area,
            cy,
            s * 100.0,
            i,
            &format!("{}: {label} dropped", p.name),
        );
        svg.text(x.map(s * 100.0) + 8.0, cy + 4.0, "start", "vl", &label);
    }
    svg.finish()
}

/// The sweep's points grouped by policy, in the order of `policies` (then
/// any other name), each sorted by offered load.
fn sweep_series<'a>(
    policies: &[PolicyResult],
    sweep: &'a [SweepPoint],
) -> Vec<(String, usize, Vec<&'a SweepPoint>)> {
    let mut names: Vec<String> = policies.iter().map(|p| p.name.clone()).collect();
    for s in sweep {
        if !names.contains(&s.policy) {
            names.push(s.policy.clone());
        }
    }
    names
        .into_iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let mut points: Vec<&SweepPoint> = sweep
                .iter()
                .filter(|s| s.policy == name && s.offered_load.is_finite())
                .collect();
            points.sort_by(|a, b| a.offered_load.total_cmp(&b.offered_load));
            (!points.is_empty()).then_some((name, i, points))
        })
        .collect()
}

/// The x scale of the sweep charts: requested load, percent.
fn sweep_x(sweep: &[SweepPoint], area: Area) -> (Linear, Vec<(f64, String, bool)>) {
    let loads = || finite(sweep.iter().map(|s| s.offered_load * 100.0));
    let lo = loads().fold(f64::INFINITY, f64::min);
    let hi = loads().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        let pad = (hi - lo) * 0.04;
        (lo - pad, hi + pad)
    } else if lo.is_finite() {
        (lo - 5.0, lo + 5.0)
    } else {
        (0.0, 100.0)
    };
    let x = Linear::new(lo, hi, area.left, area.right);
    let ticks = linear_ticks(&x, &nice_ticks(lo, hi, 8), |v| {
        format!("{}%", tick_label(v))
    });
    (x, ticks)
}

/// Drops against offered load, per policy (log scale; runs without drops
/// sit on a separate "none" line under the axis range).
pub fn sweep_drops(policies: &[PolicyResult], sweep: &[SweepPoint]) -> String {
    let area = Area {
        left: 80.0,
        top: 14.0,
        right: WIDTH - LEGEND_W - 20.0,
        bottom: 290.0,
    };
    let none_y = area.bottom + 24.0;
    let axis_area = Area {
        bottom: none_y + 12.0,
        ..area
    };
    let mut svg = Svg::new(WIDTH, axis_area.bottom + 50.0, "drops against offered load");
    let share = |s: &SweepPoint| {
        if s.packets == 0 {
            0.0
        } else {
            s.drops as f64 / s.packets as f64
        }
    };
    let min_share = finite(sweep.iter().map(share))
        .filter(|v| *v > 0.0)
        .fold(1.0, f64::min);
    let y = Log10::new(min_share.min(1e-4), 1.0, area.bottom, area.top);
    let (x, xt) = sweep_x(sweep, axis_area);
    x_axis(&mut svg, axis_area, &xt, "requested average core load (%)");
    let mut yt = log_ticks(&y, pct_tick);
    yt.push((none_y, "none".to_string(), false));
    y_axis(&mut svg, area, &yt, "packets dropped (%, log scale)");
    svg.line(area.left, none_y, area.right, none_y, "grid");
    svg.text(area.left - 8.0, none_y + 4.0, "end", "tl", "none");
    svg.line(area.left, area.bottom, area.left, axis_area.bottom, "axis");
    let series = sweep_series(policies, sweep);
    draw_sweep(&mut svg, &series, |s| {
        let v = share(s);
        let py = if v > 0.0 { y.map(v) } else { none_y };
        (x.map(s.offered_load * 100.0), py)
    });
    if series.is_empty() {
        no_data(&mut svg, area, "no sweep point");
    }
    let entries: Vec<(String, usize)> = series.iter().map(|(n, i, _)| (n.clone(), *i)).collect();
    legend(&mut svg, area.right + 24.0, area.top + 10.0, &entries);
    svg.finish()
}

/// 95th-percentile latency against offered load, per policy.
pub fn sweep_latency(policies: &[PolicyResult], sweep: &[SweepPoint]) -> String {
    let area = Area {
        left: 80.0,
        top: 14.0,
        right: WIDTH - LEGEND_W - 20.0,
        bottom: 300.0,
    };
    let mut svg = Svg::new(
        WIDTH,
        area.bottom + 50.0,
        "p95 latency against offered load",
    );
    let lat = || finite(sweep.iter().map(|s| s.latency_p95_us)).filter(|v| *v > 0.0);
    let lo = lat().fold(f64::INFINITY, f64::min);
    let hi = lat().fold(0.0, f64::max);
    let y = Log10::new(lo, hi, area.bottom, area.top);
    let (x, xt) = sweep_x(sweep, area);
    x_axis(&mut svg, area, &xt, "requested average core load (%)");
    y_axis(
        &mut svg,
        area,
        &log_ticks(&y, tick_label),
        "p95 latency (µs, log scale)",
    );
    let series = sweep_series(policies, sweep);
    draw_sweep(&mut svg, &series, |s| {
        (x.map(s.offered_load * 100.0), y.map(s.latency_p95_us))
    });
    if series.is_empty() {
        no_data(&mut svg, area, "no sweep point");
    }
    let entries: Vec<(String, usize)> = series.iter().map(|(n, i, _)| (n.clone(), *i)).collect();
    legend(&mut svg, area.right + 24.0, area.top + 10.0, &entries);
    svg.finish()
}

/// Lines with point markers (tooltips give the numbers) for each series.
fn draw_sweep(
    svg: &mut Svg,
    series: &[(String, usize, Vec<&SweepPoint>)],
    at: impl Fn(&SweepPoint) -> (f64, f64),
) {
    for (name, i, points) in series {
        let xy: Vec<(f64, f64)> = points.iter().map(|s| at(s)).collect();
        svg.polyline(&xy, policy_color(*i), 2.2, policy_dash(*i));
        for (s, (px, py)) in points.iter().zip(&xy) {
            svg.circle(
                *px,
                *py,
                3.6,
                policy_color(*i),
                " stroke=\"#fff\" stroke-width=\"1\"",
                &format!(
                    "{name} at {} requested load ({} measured): {} of {} packets dropped, p95 {} µs",
                    pct(s.offered_load),
                    pct(s.avg_load),
                    int(s.drops),
                    int(s.packets),
                    num(s.latency_p95_us)
                ),
            );
        }
    }
}

/// Whether a policy's number of cores in use changed during the run.
pub fn cores_change(p: &PolicyResult) -> bool {
    let cores = &p.timeline.active_cores;
    cores.windows(2).any(|w| w[0] != w[1])
}

/// Cores in use over time per policy (samples within `duration_s`), over
/// the offered packet rate.
pub fn cores_over_time(policies: &[PolicyResult], duration_s: f64) -> String {
    let area = Area {
        left: 80.0,
        top: 14.0,
        right: WIDTH - LEGEND_W - 70.0,
        bottom: 300.0,
    };
    let mut svg = Svg::new(WIDTH, area.bottom + 50.0, "cores in use over time");
    let shown = |t: &Timeline| shown_samples(t, t.active_cores.len(), duration_s);
    let span = |p: &PolicyResult| {
        shown(&p.timeline) as f64 * f64::from(p.timeline.interval_ms.max(1)) / 1000.0
    };
    let total_s = finite(policies.iter().map(span)).fold(0.0, f64::max);
    let max_cores = policies
        .iter()
        .flat_map(|p| {
            p.timeline.active_cores[..shown(&p.timeline)]
                .iter()
                .copied()
        })
        .max()
        .unwrap_or(0);
    let x = Linear::new(0.0, total_s, area.left, area.right);
    // One core of headroom keeps the top line off the frame.
    let y = Linear::new(
        0.0,
        nice_max(f64::from(max_cores) + 1.0),
        area.bottom,
        area.top,
    );
    let (_, ymax) = y.domain();
    // Whole cores only.
    let step = (ymax / 8.0).ceil().max(1.0);
    let yvals: Vec<f64> = (0..=(ymax / step) as usize)
        .map(|k| k as f64 * step)
        .collect();
    // The offered rate (the same for every policy) as a grey area on its own
    // axis, so a ramp's effect on scaling shows.
    if let Some(p) = policies.iter().find(|p| !p.timeline.offered_pps.is_empty()) {
        let t = &p.timeline;
        let iv = f64::from(t.interval_ms.max(1)) / 1000.0;
        let offered = &t.offered_pps[..shown_samples(t, t.offered_pps.len(), duration_s)];
        let peak = finite(offered.iter().copied()).fold(0.0, f64::max);
        // Headroom above the peak keeps the area under the cores' lines.
        let r = Linear::new(0.0, nice_max(peak * 1.3 / 1e6), area.bottom, area.top);
        let mut pts = vec![(x.map(0.0), area.bottom)];
        for (s, pps) in offered.iter().enumerate() {
            let py = r.map(if pps.is_finite() { pps / 1e6 } else { 0.0 });
            pts.push((x.map(s as f64 * iv), py));
            pts.push((x.map((s + 1) as f64 * iv), py));
        }
        pts.push((x.map(offered.len() as f64 * iv), area.bottom));
        svg.polygon(&pts, "#9a9a9a", 0.12);
        svg.polyline(&pts[1..pts.len() - 1], "#b5b9c0", 1.0, "");
        let (_, rmax) = r.domain();
        for v in nice_ticks(0.0, rmax, 5) {
            let py = r.map(v);
            svg.line(area.right, py, area.right + 5.0, py, "tick");
            svg.text(area.right + 8.0, py + 4.0, "start", "tl", &tick_label(v));
        }
        svg.line(area.right, area.top, area.right, area.bottom, "axis");
        svg.vtext(
            area.right + 52.0,
            area.mid_y(),
            "at",
            "offered (Mpps, grey)",
        );
    }
    let xt = linear_ticks(&x, &nice_ticks(0.0, total_s, 10), seconds);
    x_axis(&mut svg, area, &xt, "time (s)");
    let yt = linear_ticks(&y, &yvals, tick_label);
    y_axis(&mut svg, area, &yt, "cores in use");
    let n = policies.len();
    let mut entries = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let t = &p.timeline;
        let iv = f64::from(t.interval_ms.max(1)) / 1000.0;
        let cores = &t.active_cores[..shown(t)];
        let mut pts = Vec::with_capacity(cores.len() * 2);
        for (s, &c) in cores.iter().enumerate() {
            let py = y.map(f64::from(c));
            pts.push((x.map(s as f64 * iv), py));
            pts.push((x.map((s + 1) as f64 * iv), py));
        }
        // Policies often use the same number of cores: earlier lines are
        // drawn wider so that coinciding lines show as nested bands instead
        // of hiding each other.
        let width = 2.0 + 2.2 * (n - 1 - i) as f64 * (6.0 / n.max(6) as f64);
        svg.open_group("class=\"series\"");
        svg.title(&format!(
            "{}: {} cores on average",
            p.name,
            num(p.summary.avg_cores)
        ));
        svg.polyline(&pts, policy_color(i), width, policy_dash(i));
        svg.close_group();
        entries.push((
            format!(
                "{} · {}",
                short(&p.name, NAME_CHARS - 8),
                num(p.summary.avg_cores)
            ),
            i,
        ));
    }
    if policies.iter().all(|p| p.timeline.active_cores.is_empty()) {
        no_data(&mut svg, area, "no samples");
    }
    legend(&mut svg, area.right + 80.0, area.top + 10.0, &entries);
    svg.finish()
}

/// The colour swatch of policy `i` as an inline HTML element.
pub fn swatch(i: usize) -> String {
    format!(
        r#"<span class="sw" style="background:{}"></span>"#,
        esc(policy_color(i))
    )
}

/// How an axis of [`lines`] maps its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AxisScale {
    /// Linear, from 0 unless the values sit far from it.
    Linear,
    /// Base-10 logarithmic (values at or below 0 are left out).
    Log,
}

/// An axis of [`lines`]: its title and scale.
#[derive(Debug, Clone, Copy)]
pub struct Axis<'a> {
    /// The axis title (with its unit).
    pub title: &'a str,
    /// How it maps values.
    pub scale: AxisScale,
}

/// One line of [`lines`]: a name for the legend and `(x, y)` points in the
/// order they are joined.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's name.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// A scale of [`lines`] over `values` onto `r0..r1`, with its ticks.
fn line_axis(
    values: &[f64],
    scale: AxisScale,
    r0: f64,
    r1: f64,
    pad: bool,
) -> (ValueAxis, Vec<(f64, String, bool)>) {
    match scale {
        AxisScale::Log => {
            let pos = || values.iter().copied().filter(|v| v.is_finite() && *v > 0.0);
            let lo = pos().fold(f64::INFINITY, f64::min);
            let hi = pos().fold(0.0, f64::max);
            let (lo, hi) = if lo.is_finite() {
                (lo, hi)
            } else {
                (1.0, 10.0)
            };
            let s = Log10::new(lo, hi, r0, r1);
            let ticks = log_ticks(&s, tick_label);
            (ValueAxis::Log(s), ticks)
        }
        AxisScale::Linear => {
            let lo = finite(values.iter().copied()).fold(f64::INFINITY, f64::min);
            let hi = finite(values.iter().copied()).fold(f64::NEG_INFINITY, f64::max);
            let (lo, hi) = if !lo.is_finite() {
                (0.0, 1.0)
            } else if lo >= 0.0 && lo <= 0.5 * hi {
                // Near enough to 0 to start there.
                (0.0, nice_max(hi))
            } else if hi > lo {
                let margin = (hi - lo) * 0.1;
                (lo - margin, hi + margin)
            } else {
                (lo - 1.0, hi + 1.0)
            };
            let (lo, hi) = if pad {
                let p = (hi - lo) * 0.04;
                (lo - p, hi + p)
            } else {
                (lo, hi)
            };
            let s = Linear::new(lo, hi, r0, r1);
            let ticks = linear_ticks(&s, &nice_ticks(lo, hi, 8), tick_label);
            (ValueAxis::Lin(s), ticks)
        }
    }
}

/// Lines with point markers, one per series (a tooltip gives each point's
/// numbers): a quantity against a parameter the runs varied.
pub fn lines(label: &str, x: Axis<'_>, y: Axis<'_>, series: &[Series]) -> String {
    let area = Area {
        left: 80.0,
        top: 14.0,
        right: WIDTH - LEGEND_W - 20.0,
        bottom: 300.0,
    };
    let mut svg = Svg::new(WIDTH, area.bottom + 50.0, label);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .collect();
    let (xa, xt) = line_axis(&xs, x.scale, area.left, area.right, true);
    let (ya, yt) = line_axis(&ys, y.scale, area.bottom, area.top, false);
    let log = |a: &Axis<'_>| match a.scale {
        AxisScale::Log => ", log scale",
        AxisScale::Linear => "",
    };
    x_axis(&mut svg, area, &xt, &format!("{}{}", x.title, log(&x)));
    y_axis(&mut svg, area, &yt, &format!("{}{}", y.title, log(&y)));
    let shown = |a: &Axis<'_>, v: f64| v.is_finite() && (a.scale == AxisScale::Linear || v > 0.0);
    let mut entries = Vec::new();
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(px, py)| shown(&x, *px) && shown(&y, *py))
            .map(|&(px, py)| (px, py))
            .collect();
        let xy: Vec<(f64, f64)> = pts
            .iter()
            .map(|&(px, py)| (xa.map(px), ya.map(py)))
            .collect();
        svg.open_group("class=\"series\"");
        svg.title(&s.name);
        svg.polyline(&xy, policy_color(i), 2.2, policy_dash(i));
        svg.close_group();
        for ((px, py), (vx, vy)) in xy.iter().zip(&pts) {
            svg.circle(
                *px,
                *py,
                3.6,
                policy_color(i),
                " stroke=\"#fff\" stroke-width=\"1\"",
                &format!("{}: {} → {}", s.name, num(*vx), num(*vy)),
            );
        }
        entries.push((s.name.clone(), i));
    }
    if series.iter().all(|s| s.points.is_empty()) {
        no_data(&mut svg, area, "no run");
    }
    legend(&mut svg, area.right + 24.0, area.top + 10.0, &entries);
    svg.finish()
}
