//! Drawing one screen of `rsspp top` from the history: the header, the
//! per-CPU load heatmap with current figures, and the indirection table.
//!
//! A frame is lines of styled spans, written either plain (no escapes: for
//! `--once`, scripts and tests; the heat is then shown by block heights) or
//! with 256-colour SGR escapes for the live view.

use std::fmt::Write as _;
use std::time::Duration;

use super::history::History;

/// How a span looks. Colours are xterm-256 indices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    fg: Option<u8>,
    bg: Option<u8>,
    bold: bool,
    dim: bool,
    reverse: bool,
}

impl Style {
    const BOLD: Style = Style {
        fg: None,
        bg: None,
        bold: true,
        dim: false,
        reverse: false,
    };
    const DIM: Style = Style {
        fg: None,
        bg: None,
        bold: false,
        dim: true,
        reverse: false,
    };
    const ALERT: Style = Style {
        fg: Some(196),
        bg: None,
        bold: true,
        dim: false,
        reverse: false,
    };

    fn bg(colour: u8) -> Style {
        Style {
            bg: Some(colour),
            ..Style::default()
        }
    }

    fn on(colour: u8) -> Style {
        // Black text on a CPU's colour: all palette entries are light.
        Style {
            fg: Some(16),
            bg: Some(colour),
            ..Style::default()
        }
    }

    fn fg(colour: u8) -> Style {
        Style {
            fg: Some(colour),
            ..Style::default()
        }
    }

    fn sgr(&self) -> String {
        let mut codes = Vec::new();
        if self.bold {
            codes.push("1".to_string());
        }
        if self.dim {
            codes.push("2".to_string());
        }
        if self.reverse {
            codes.push("7".to_string());
        }
        if let Some(c) = self.fg {
            codes.push(format!("38;5;{c}"));
        }
        if let Some(c) = self.bg {
            codes.push(format!("48;5;{c}"));
        }
        format!("\x1b[{}m", codes.join(";"))
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Span {
    text: String,
    style: Style,
}

/// One line of spans.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Line(Vec<Span>);

impl Line {
    fn push(&mut self, text: impl Into<String>, style: Style) -> &mut Self {
        self.0.push(Span {
            text: text.into(),
            style,
        });
        self
    }

    fn text(&mut self, text: impl Into<String>) -> &mut Self {
        self.push(text, Style::default())
    }

    fn width(&self) -> usize {
        self.0.iter().map(|s| s.text.chars().count()).sum()
    }

    fn plain(&self, width: usize) -> String {
        let s: String = self
            .0
            .iter()
            .flat_map(|s| s.text.chars())
            .take(width)
            .collect();
        s.trim_end().to_string()
    }

    fn ansi(&self, width: usize) -> String {
        let mut out = String::new();
        let mut left = width;
        for span in &self.0 {
            if left == 0 {
                break;
            }
            let text: String = span.text.chars().take(left).collect();
            left -= text.chars().count();
            if span.style == Style::default() {
                out.push_str(&text);
            } else {
                let _ = write!(out, "{}{text}\x1b[0m", span.style.sgr());
            }
        }
        out
    }
}

/// A whole screen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frame {
    lines: Vec<Line>,
    width: usize,
}

impl Frame {
    /// The frame without escapes, lines joined by `\n`.
    pub fn plain(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            out.push_str(&l.plain(self.width));
            out.push('\n');
        }
        out
    }

    /// The frame's lines with colour escapes, each clipped to the width.
    pub fn ansi_lines(&self) -> Vec<String> {
        self.lines.iter().map(|l| l.ansi(self.width)).collect()
    }
}

/// What the frame is drawn for.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// The daemon's address, for the title.
    pub addr: &'a str,
    /// Time between samples.
    pub every: Duration,
    /// Columns available.
    pub width: usize,
    /// Lines available (`None`: as many as needed, for `--once`).
    pub height: Option<usize>,
    /// Colour escapes (live view) or block heights (plain).
    pub colour: bool,
    /// The last line: keys, or why the last scrape failed.
    pub status: Option<(String, bool)>,
}

/// Heat colours from idle to saturated, blue → cyan → green → yellow → red
/// (the usual heatmap reading; index 0 is idle). The lowest loads start at
/// a mid blue, not navy, which on a black terminal read as idle.
const HEAT: [u8; 25] = [
    235, 25, 26, 27, 32, 33, 38, 39, 44, 45, 51, 49, 48, 47, 46, 82, 118, 154, 190, 226, 220, 214,
    208, 202, 196,
];

/// Block heights for the plain heatmap: one eighth per step.
const BLOCKS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Light, distinct backgrounds for CPUs in the table (by position in the
/// daemon's CPU list, so neighbours differ).
const CPU_COLOURS: [u8; 12] = [75, 215, 114, 204, 141, 180, 80, 222, 176, 250, 109, 150];

fn heat_colour(load: f64) -> u8 {
    if load.is_nan() || load <= 0.0 {
        HEAT[0]
    } else {
        let steps = (HEAT.len() - 1) as f64;
        HEAT[((load.min(1.0) * steps).ceil() as usize).clamp(1, HEAT.len() - 1)]
    }
}

fn heat_block(load: f64) -> char {
    if load.is_nan() {
        return ' ';
    }
    BLOCKS[(load.clamp(0.0, 1.0) * 8.0).round() as usize]
}

/// A packet rate in a few characters: 950, 12.3k, 1.23M.
fn rate(r: f64) -> String {
    if r < 1e3 {
        format!("{r:.0}")
    } else if r < 1e6 {
        format!("{:.1}k", r / 1e3)
    } else if r < 1e9 {
        format!("{:.2}M", r / 1e6)
    } else {
        format!("{:.2}G", r / 1e9)
    }
}

/// A short duration: 14.2 µs, 1.50 ms, 100 ms, 2.00 s.
fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1e-2 {
        format!("{:.2} ms", s * 1e3)
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn imbalance(r: f64) -> String {
    if r.is_nan() {
        "-".into()
    } else if r.is_infinite() {
        "∞ (a CPU idle beside busy ones)".into()
    } else {
        format!("{:.0}%", r * 100.0)
    }
}

/// Draws the screen.
pub fn draw(history: &History, view: &View<'_>) -> Frame {
    let mut lines = Vec::new();
    let Some(latest) = history.latest() else {
        let mut l = Line::default();
        l.text(format!(
            "rsspp top: waiting for the first sample from {}",
            view.addr
        ));
        lines.push(l);
        return finish(lines, view);
    };
    let delta = history.delta();

    // Title and the daemon-wide figures.
    let mut title = Line::default();
    title.push("rsspp top", Style::BOLD).text(format!(
        ": {} ({}) at {}, a sample every {} ms",
        latest.iface.as_deref().unwrap_or("?"),
        latest.mode.as_deref().unwrap_or("?"),
        view.addr,
        view.every.as_millis()
    ));
    lines.push(title);
    // Most telling first: a narrow terminal clips the end of the line.
    let mut figures = Line::default();
    figures
        .text("imbalance ")
        .push(imbalance(latest.imbalance), Style::BOLD);
    if let Some(d) = delta {
        figures.text(format!("  total {} pkt/s", rate(d.total_rate())));
    }
    // On a narrow screen the daemon's figures go on a second line rather
    // than off the edge.
    let mut second = Line::default();
    let narrow = view.height.is_some() && view.width < 100;
    let rest = if narrow { &mut second } else { &mut figures };
    rest.text(if narrow {
        "migrations "
    } else {
        "  migrations "
    })
    .push(latest.migrations.to_string(), Style::BOLD);
    if let Some(d) = delta {
        rest.text(format!(" (+{})", d.migrations));
    }
    rest.text(format!("  rounds {}", latest.rounds));
    if let Some(i) = latest.interval_seconds.filter(|i| *i > 0.0) {
        rest.text(format!(" every {}", seconds(i)));
    }
    if let Some(m) = delta.and_then(|d| d.mean_round_seconds) {
        rest.text(format!(", {} each", seconds(m)));
    }
    lines.push(figures);
    if narrow {
        lines.push(second);
    }
    lines.push(Line::default());

    // The heatmap: rows are CPUs, columns samples, newest on the right.
    let cpu_digits = latest
        .cpus
        .iter()
        .map(|c| c.cpu.to_string().len())
        .max()
        .unwrap_or(1);
    let label_w = 4 + cpu_digits + 1;
    let stats_w = 26;
    let heat_w = if view.height.is_some() {
        // Live: fill the width; the history may not reach back that far yet.
        view.width.saturating_sub(label_w + 2 + stats_w).max(4)
    } else {
        history.columns().len()
    };
    let columns: Vec<_> = history.columns().rev().take(heat_w).collect();
    let mut heading = Line::default();
    heading.push(
        format!(
            "CPU load over time, newest on the right{}",
            if view.colour {
                ""
            } else {
                " (block height = load)"
            }
        ),
        Style::BOLD,
    );
    lines.push(heading);
    let mut header = Line::default();
    header.text(format!(
        "{:w$}{:>6} {:>10} {:>8} {:>8}",
        "",
        "load",
        "pkt/s",
        "drop/s",
        "buckets",
        w = label_w + 2 + heat_w
    ));
    lines.push(header);

    let mut cpu_rows = Vec::new();
    for (i, cpu) in latest.cpus.iter().enumerate() {
        let colour = CPU_COLOURS[i % CPU_COLOURS.len()];
        let mut row = Line::default();
        let label = format!("cpu {:>w$}", cpu.cpu, w = cpu_digits);
        if view.colour {
            row.push(label, Style::on(colour)).text(" ");
        } else {
            row.text(format!("{label} "));
        }
        row.push("│", Style::DIM);
        // Blank columns on the left until the history fills the width.
        let pad = heat_w - columns.len();
        row.text(" ".repeat(pad));
        for col in columns.iter().rev() {
            let load = col.load(cpu.cpu);
            if view.colour {
                match load {
                    Some(l) => row.push(" ", Style::bg(heat_colour(l))),
                    None => row.text(" "),
                };
            } else {
                row.text(heat_block(load.unwrap_or(f64::NAN)).to_string());
            }
        }
        row.push("│", Style::DIM);
        let load_text = format!("{:>5.0}%", cpu.load * 100.0);
        if view.colour {
            row.push(load_text, Style::fg(heat_colour(cpu.load)));
        } else {
            row.text(load_text);
        }
        let r = delta
            .and_then(|d| d.rate(cpu.cpu))
            .map_or("-".to_string(), rate);
        let drops = delta
            .and_then(|d| d.drop_rate(cpu.cpu))
            .map_or("-".to_string(), rate);
        // No table when the daemon exports no per-bucket series.
        let buckets = if latest.table.is_empty() {
            "-".to_string()
        } else {
            latest
                .table
                .iter()
                .filter(|&&c| c == cpu.cpu)
                .count()
                .to_string()
        };
        row.text(format!(" {r:>10} "));
        if drops != "-" && drops != "0" {
            row.push(format!("{drops:>8}"), Style::BOLD);
        } else {
            row.text(format!("{drops:>8}"));
        }
        row.text(format!(" {buckets:>8}"));
        cpu_rows.push(row);
    }
    let mut axis = Line::default();
    axis.text(" ".repeat(label_w));
    // The time label sits where the data begins (a view just started has
    // a few columns of history on the right, not the whole width), or as
    // far left of "now" as it needs.
    let data = columns.len().min(heat_w);
    let span = view.every.as_secs_f64() * data.saturating_sub(1) as f64;
    let label: Vec<char> = format!(" {span:.0} s ago ").chars().collect();
    let right: Vec<char> = " now ┘".chars().collect();
    let total = heat_w + 2;
    let mut chars: Vec<char> = std::iter::once('└')
        .chain(std::iter::repeat_n('─', heat_w))
        .chain(std::iter::once('┘'))
        .collect();
    if data > 1 && total > label.len() + right.len() {
        let start = (1 + heat_w - data)
            .min(total - right.len() - label.len())
            .max(1);
        chars[start..start + label.len()].copy_from_slice(&label);
        chars[total - right.len()..].copy_from_slice(&right);
    }
    axis.push(chars.into_iter().collect::<String>(), Style::DIM);
    let mut legend = Line::default();
    legend.text(format!("{:w$}load  0% ", "", w = label_w));
    if view.colour {
        for step in 0..=20 {
            legend.push(" ", Style::bg(heat_colour(step as f64 / 20.0)));
        }
    } else {
        legend.text(BLOCKS[1..].iter().collect::<String>());
    }
    legend.text(" 100%");

    // The table: a grid of buckets, each showing (and coloured by) its CPU.
    let table = &latest.table;
    let moved = delta.map(|d| d.moved.as_slice()).unwrap_or(&[]);
    // In colour the CPU's background marks a cell, so single-digit CPUs
    // need no gap: twice the buckets a row, and a 512-bucket grid fits
    // an 80×24 screen.
    let dense = view.colour && cpu_digits == 1;
    let cell_w = if dense { 1 } else { cpu_digits + 1 };
    let per_row = {
        let fit = view.width.saturating_sub(6) / cell_w;
        // A power of two keeps the row starts round bucket numbers.
        let p = if fit == 0 { 1 } else { 1usize << fit.ilog2() };
        p.min(table.len().max(1))
    };
    let mut table_lines = Vec::new();
    let mut heading = Line::default();
    let title = if table.is_empty() {
        "Indirection table: not exported (per-bucket metrics off: rsspp run --bucket-metrics on)"
            .to_string()
    } else {
        format!(
            "Indirection table: {} buckets, each showing its CPU{}",
            table.len(),
            if view.colour {
                " (reversed: moved in the last sample)"
            } else {
                " (* moved in the last sample)"
            }
        )
    };
    heading.push(title, Style::BOLD);
    table_lines.push(heading);
    for (r, chunk) in table.chunks(per_row).enumerate() {
        let mut row = Line::default();
        row.text(format!("{:>5} ", r * per_row));
        for (j, cpu) in chunk.iter().enumerate() {
            let b = r * per_row + j;
            let was_moved = moved.get(b).copied().unwrap_or(false);
            let index = latest.cpus.iter().position(|c| c.cpu == *cpu);
            if view.colour {
                let mut style = index.map_or(Style::default(), |i| {
                    Style::on(CPU_COLOURS[i % CPU_COLOURS.len()])
                });
                style.reverse = was_moved;
                // The gap is coloured too: runs of buckets on one CPU read
                // as one band.
                let cell = if dense {
                    cpu.to_string()
                } else {
                    format!("{cpu:>w$} ", w = cpu_digits)
                };
                row.push(cell, style);
            } else {
                let mark = if was_moved { "*" } else { " " };
                row.text(format!("{cpu:>w$}{mark}", w = cpu_digits));
            }
        }
        table_lines.push(row);
    }

    // Fit the height: the table grid goes first, then CPU rows.
    let fixed = lines.len() + 2 + 1 + 1 + usize::from(view.status.is_some());
    let mut table_part = table_lines;
    if let Some(h) = view.height {
        let cpu_fit = h.saturating_sub(fixed + 2);
        if cpu_rows.len() > cpu_fit {
            let hidden = cpu_rows.len() - cpu_fit.saturating_sub(1);
            cpu_rows.truncate(cpu_fit.saturating_sub(1));
            let mut more = Line::default();
            more.push(
                format!("… {hidden} more CPUs: enlarge the terminal"),
                Style::DIM,
            );
            cpu_rows.push(more);
        }
        let room = h.saturating_sub(fixed + cpu_rows.len());
        if table_part.len() > room {
            let needed = table_part.len() + 1 - room.max(1);
            let mut counts = Line::default();
            counts.push(
                format!(
                    "Indirection table: {} buckets (the grid needs {needed} more lines)",
                    table.len()
                ),
                Style::BOLD,
            );
            table_part = if room > 0 { vec![counts] } else { Vec::new() };
        }
    }
    lines.extend(cpu_rows);
    lines.push(axis);
    lines.push(legend);
    if !table_part.is_empty() {
        lines.push(Line::default());
        lines.extend(table_part);
    }
    finish(lines, view)
}

fn finish(mut lines: Vec<Line>, view: &View<'_>) -> Frame {
    if let Some((status, alert)) = &view.status {
        if let Some(h) = view.height {
            // The status sits on the last line of the screen.
            while lines.len() + 1 < h {
                lines.push(Line::default());
            }
        }
        let mut l = Line::default();
        l.push(
            status.clone(),
            if *alert { Style::ALERT } else { Style::DIM },
        );
        lines.push(l);
    }
    let width = if view.height.is_some() {
        view.width
    } else {
        // `--once`: nothing is clipped.
        lines.iter().map(Line::width).max().unwrap_or(0)
    };
    Frame { lines, width }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::scrape::{CpuSample, DaemonSample};
    use super::*;

    fn sample(loads: &[(u32, f64, u64)], table: &[u32]) -> DaemonSample {
        DaemonSample {
            iface: Some("veth0".into()),
            mode: Some("software".into()),
            cpus: loads
                .iter()
                .map(|&(cpu, load, packets_total)| CpuSample {
                    cpu,
                    load,
                    packets_total,
                    dropped_total: None,
                })
                .collect(),
            table: table.to_vec(),
            bucket_packets: vec![0; table.len()],
            imbalance: 0.25,
            migrations: 3,
            rounds: 10,
            interval_seconds: Some(0.1),
            rebalance_seconds_sum: 0.0,
            rebalance_seconds_count: 0,
        }
    }

    fn history() -> History {
        let t0 = Instant::now();
        let mut h = History::new(100);
        h.push(t0, sample(&[(0, 0.0, 0), (1, 1.0, 0)], &[0, 1, 0, 1]));
        let mut later = sample(&[(0, 0.5, 2000), (1, 1.0, 5000)], &[0, 1, 0, 0]);
        later.rounds += 10;
        h.push(t0 + Duration::from_secs(1), later);
        h
    }

    fn view(height: Option<usize>, colour: bool) -> View<'static> {
        View {
            addr: "127.0.0.1:9464",
            every: Duration::from_millis(500),
            width: 80,
            height,
            colour,
            status: None,
        }
    }

    #[test]
    fn plain_rows_show_the_load_history_as_block_heights() {
        let text = draw(&history(), &view(None, false)).plain();
        assert!(!text.contains('\x1b'), "escapes in plain output:\n{text}");
        assert!(
            text.contains("cpu 0 │ ▄│   50%       2.0k        -        3"),
            "{text}"
        );
        assert!(
            text.contains("cpu 1 │██│  100%       5.0k        -        1"),
            "{text}"
        );
        // Bucket 3 moved from CPU 1 to CPU 0.
        assert!(text.contains("    0 0 1 0 0*"), "{text}");
        assert!(text.contains("imbalance 25%"), "{text}");
    }

    #[test]
    fn drops_per_second_and_a_missing_table_are_shown() {
        let t0 = Instant::now();
        let mut h = History::new(10);
        let mut a = sample(&[(0, 0.9, 0), (1, 0.2, 0)], &[]);
        a.cpus[0].dropped_total = Some(100);
        a.cpus[1].dropped_total = Some(0);
        let mut b = sample(&[(0, 1.0, 9000), (1, 0.2, 1000)], &[]);
        b.cpus[0].dropped_total = Some(1600);
        b.cpus[1].dropped_total = Some(0);
        b.rounds += 20;
        h.push(t0, a);
        h.push(t0 + Duration::from_secs(2), b);
        let text = draw(&h, &view(None, false)).plain();
        // 1,500 dropped in 2 s on CPU 0; no per-bucket series: no count.
        assert!(text.contains("   4.5k      750        -"), "{text}");
        assert!(text.contains("    500        0        -"), "{text}");
        assert!(text.contains("Indirection table: not exported"), "{text}");
    }

    #[test]
    fn the_live_frame_fits_the_screen_and_colours_the_heat() {
        let mut v = view(Some(24), true);
        v.status = Some(("q quit".into(), false));
        let frame = draw(&history(), &v);
        let lines = frame.ansi_lines();
        assert_eq!(lines.len(), 24, "status on the last line");
        assert!(lines.last().unwrap().contains("q quit"));
        let full = heat_colour(1.0);
        assert_eq!(full, 196);
        assert!(lines
            .iter()
            .any(|l| l.contains(&format!("\x1b[48;5;{full}m \x1b[0m"))));
    }

    #[test]
    fn a_small_screen_drops_the_table_grid_before_the_cpus() {
        let mut h = History::new(10);
        let table: Vec<u32> = (0..256).map(|b| b % 2).collect();
        h.push(Instant::now(), sample(&[(0, 0.2, 0), (1, 0.4, 0)], &table));
        // 32 buckets a row at 80 columns: the grid needs 8 lines.
        let tall = draw(&h, &view(Some(40), false)).plain();
        assert!(tall.contains("  224 0 1 0 1"), "{tall}");
        let short = draw(&h, &view(Some(16), false)).plain();
        assert!(short.contains("cpu 1"), "{short}");
        assert!(short.contains("the grid needs"), "{short}");
        assert!(!short.contains("  224 "), "{short}");
        assert!(short.lines().count() <= 16, "{short}");
        // Too short even for the CPUs: the rows are cut with a note.
        let tiny = draw(&h, &view(Some(9), false)).plain();
        assert!(tiny.contains("more CPUs"), "{tiny}");
        assert!(tiny.lines().count() <= 9, "{tiny}");
    }

    #[test]
    fn a_512_bucket_grid_fits_80_by_24_in_colour() {
        let mut h = History::new(10);
        let table: Vec<u32> = (0..512).map(|b| b % 2).collect();
        h.push(Instant::now(), sample(&[(0, 0.2, 0), (1, 0.4, 0)], &table));
        let frame = draw(&h, &view(Some(24), true));
        let text = frame.plain();
        assert!(text.lines().count() <= 24, "{text}");
        assert!(!text.contains("the grid needs"), "{text}");
        // 64 buckets a row: the last row starts at bucket 448.
        assert!(text.contains("  448 0101"), "{text}");
    }

    #[test]
    fn the_time_axis_spans_the_data_shown() {
        // Four samples a second apart in a live view 80 columns wide: the
        // axis says 3 s, next to the data, not the width's 50-odd seconds.
        let t0 = Instant::now();
        let mut h = History::new(100);
        for i in 0..4u64 {
            let mut s = sample(&[(0, 0.5, i * 100)], &[0]);
            s.rounds += i;
            h.push(t0 + Duration::from_secs(i), s);
        }
        let mut v = view(Some(24), false);
        v.every = Duration::from_secs(1);
        let text = draw(&h, &v).plain();
        let axis = text.lines().find(|l| l.contains('└')).expect("an axis");
        assert!(
            axis.contains(" 3 s ago ") && axis.contains(" now ┘"),
            "{axis}"
        );
        let label_at = axis.find(" 3 s ago").unwrap();
        let row = text.lines().find(|l| l.starts_with("cpu 0")).unwrap();
        let data_at = row.find('▄').expect("the data's column");
        assert!(
            label_at + 10 >= data_at,
            "label far left of the data:\n{row}\n{axis}"
        );
    }

    #[test]
    fn heat_colours_and_blocks_rise_with_load() {
        assert_eq!(heat_colour(0.0), HEAT[0]);
        assert_eq!(heat_colour(f64::NAN), HEAT[0]);
        assert_eq!(heat_colour(0.001), HEAT[1]);
        assert_eq!(heat_colour(1.0), HEAT[24]);
        assert_eq!(heat_colour(7.0), HEAT[24]);
        assert_eq!(heat_block(0.0), ' ');
        assert_eq!(heat_block(0.5), '▄');
        assert_eq!(heat_block(1.0), '█');
        assert_eq!(rate(950.0), "950");
        assert_eq!(rate(12_345.0), "12.3k");
        assert_eq!(rate(1_234_567.0), "1.23M");
        assert_eq!(seconds(14.2e-6), "14.2 µs");
        assert_eq!(seconds(0.1), "100 ms");
    }
}
