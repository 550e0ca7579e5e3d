//! The drawing primitives of the report: an SVG string builder that only
//! ever writes finite coordinates and escaped text, scales, tick choice and
//! number formatting.

use std::fmt::Write;

/// Escapes `s` for HTML/SVG text and attribute values (both quote kinds).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

/// A coordinate as SVG text: one decimal, and 0 for a non-finite value so
/// that bad input never produces `NaN` in the page.
pub fn coord(x: f64) -> String {
    if x.is_finite() {
        let r = (x * 10.0).round() / 10.0;
        if r == r.trunc() {
            format!("{}", r as i64)
        } else {
            format!("{r:.1}")
        }
    } else {
        "0".into()
    }
}

/// An integer with thousands separators.
pub fn int(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A measurement with precision suited to its size (`–` when not finite).
pub fn num(x: f64) -> String {
    if x == f64::INFINITY {
        return "∞".into();
    }
    if !x.is_finite() {
        return "–".into();
    }
    let a = x.abs();
    if a >= 1000.0 {
        let sign = if x < 0.0 { "-" } else { "" };
        format!("{sign}{}", int(a.round() as u64))
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A fraction as a percentage with precision suited to its size.
pub fn pct(fraction: f64) -> String {
    if fraction == f64::INFINITY {
        return "∞".into();
    }
    if !fraction.is_finite() {
        return "–".into();
    }
    let p = fraction * 100.0;
    if p == 0.0 {
        "0%".into()
    } else if p.abs() >= 10.0 {
        format!("{p:.0}%")
    } else if p.abs() >= 0.1 {
        format!("{p:.1}%")
    } else {
        // Two significant digits in plain decimals: 0.011%, 0.00042%.
        let decimals = (1.0 - p.abs().log10().floor()).clamp(2.0, 9.0) as usize;
        format!("{p:.decimals$}%")
    }
}

/// A percentage tick of a log axis: `100%`, `1%`, `0.01%` (plain decimals,
/// as many as the value needs).
pub fn pct_tick(fraction: f64) -> String {
    if !(fraction.is_finite() && fraction > 0.0) {
        return "0%".into();
    }
    let p = fraction * 100.0;
    let decimals = (-p.log10().floor()).clamp(0.0, 12.0) as usize;
    format!("{p:.decimals$}%")
}

/// Short tick label: `2.5`, `10`, `1k`, `20k`, `1M`.
pub fn tick_label(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    let (scaled, unit) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    // Three decimals, or as many as the first significant digit needs
    // (a log axis's 0.0001 is not "0").
    let a = scaled.abs();
    let decimals = if a > 0.0 && a < 1e-3 {
        (-a.log10()).ceil() as usize + 1
    } else {
        3
    };
    let mut s = format!("{scaled:.decimals$}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    if s == "-0" {
        s = "0".into();
    }
    s + unit
}

/// A linear map from a data interval onto a pixel interval.
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl Linear {
    /// Maps `[d0, d1]` onto `[r0, r1]`; an empty or non-finite domain
    /// becomes `[0, 1]` so every value still lands somewhere finite.
    pub fn new(d0: f64, d1: f64, r0: f64, r1: f64) -> Self {
        let (d0, d1) = if d0.is_finite() && d1.is_finite() && d1 > d0 {
            (d0, d1)
        } else {
            (0.0, 1.0)
        };
        Self { d0, d1, r0, r1 }
    }

    /// The pixel position of `v` (clamped to the range).
    pub fn map(&self, v: f64) -> f64 {
        let t = ((v - self.d0) / (self.d1 - self.d0)).clamp(0.0, 1.0);
        let t = if t.is_finite() { t } else { 0.0 };
        self.r0 + t * (self.r1 - self.r0)
    }

    /// The domain.
    pub fn domain(&self) -> (f64, f64) {
        (self.d0, self.d1)
    }
}

/// A base-10 logarithmic map; the domain is widened to whole decades.
#[derive(Debug, Clone, Copy)]
pub struct Log10 {
    lo: f64,
    hi: f64,
    inner: Linear,
}

impl Log10 {
    /// Maps `[lo, hi]` (positive; widened to decades) onto `[r0, r1]`.
    pub fn new(lo: f64, hi: f64, r0: f64, r1: f64) -> Self {
        let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
        let hi = if hi.is_finite() && hi > lo {
            hi
        } else {
            lo * 10.0
        };
        let e0 = lo.log10().floor();
        let mut e1 = hi.log10().ceil();
        if e1 <= e0 {
            e1 = e0 + 1.0;
        }
        Self {
            lo: 10f64.powf(e0),
            hi: 10f64.powf(e1),
            inner: Linear::new(e0, e1, r0, r1),
        }
    }

    /// The pixel position of `v` (clamped; non-positive values go to the
    /// low end).
    pub fn map(&self, v: f64) -> f64 {
        let v = if v > 0.0 { v } else { self.lo };
        self.inner.map(v.log10())
    }

    /// Decades `(value, is_major)`: majors at powers of ten, minors at
    /// 2…9 times them.
    pub fn ticks(&self) -> Vec<(f64, bool)> {
        let mut out = Vec::new();
        let mut decade = self.lo;
        while decade < self.hi * 1.000_001 {
            out.push((decade, true));
            if decade * 10.0 <= self.hi * 1.000_001 {
                for m in 2..=9 {
                    out.push((decade * f64::from(m), false));
                }
            }
            decade *= 10.0;
        }
        out
    }
}

/// About `target` round ticks (1, 2, 5 × 10ⁿ) covering `[lo, hi]`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return vec![0.0, 1.0];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil();
    let last = (hi / step + 1e-9).floor();
    let n = (last - first) as i64;
    (0..=n.clamp(0, 100))
        .map(|i| (first + i as f64) * step)
        .collect()
}

/// The upper end of an axis that starts at 0 and must show `max`.
pub fn nice_max(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let ticks = nice_ticks(0.0, max, 5);
    let step = if ticks.len() >= 2 {
        ticks[1] - ticks[0]
    } else {
        max
    };
    (max / step).ceil() * step
}

/// An SVG document being written. Coordinates go through [`coord`] and
/// text through [`esc`], so nothing the data holds can break the markup.
pub struct Svg {
    buf: String,
}

impl Svg {
    /// A `width` × `height` drawing described by `label` for screen readers.
    pub fn new(width: f64, height: f64, label: &str) -> Self {
        let mut buf = String::with_capacity(8 * 1024);
        let _ = write!(
            buf,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{l}">"#,
            w = coord(width),
            h = coord(height),
            l = esc(label)
        );
        Self { buf }
    }

    /// A rectangle; `title` becomes its tooltip.
    #[allow(clippy::too_many_arguments)]
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, extra: &str, title: &str) {
        let _ = write!(
            self.buf,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"{}"#,
            coord(x),
            coord(y),
            coord(w.max(0.0)),
            coord(h.max(0.0)),
            esc(fill),
            extra
        );
        self.close_with_title(title, "rect");
    }

    /// A line segment of class `class`.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, class: &str) {
        let _ = write!(
            self.buf,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" class="{}"/>"#,
            coord(x1),
            coord(y1),
            coord(x2),
            coord(y2),
            esc(class)
        );
    }

    /// Text at `(x, y)`; `anchor` is `start`, `middle` or `end`.
    pub fn text(&mut self, x: f64, y: f64, anchor: &str, class: &str, content: &str) {
        let _ = write!(
            self.buf,
            r#"<text x="{}" y="{}" text-anchor="{}" class="{}">{}</text>"#,
            coord(x),
            coord(y),
            esc(anchor),
            esc(class),
            esc(content)
        );
    }

    /// Text rotated by -90° around its position (a vertical axis label).
    pub fn vtext(&mut self, x: f64, y: f64, class: &str, content: &str) {
        let _ = write!(
            self.buf,
            r#"<text x="{x}" y="{y}" text-anchor="middle" class="{c}" transform="rotate(-90 {x} {y})">{t}</text>"#,
            x = coord(x),
            y = coord(y),
            c = esc(class),
            t = esc(content)
        );
    }

    /// A polyline through `points` (no-op for fewer than two).
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64, dash: &str) {
        if points.len() < 2 {
            return;
        }
        self.buf.push_str(r#"<polyline fill="none" points=""#);
        for (i, (x, y)) in points.iter().enumerate() {
            if i > 0 {
                self.buf.push(' ');
            }
            let _ = write!(self.buf, "{},{}", coord(*x), coord(*y));
        }
        let _ = write!(
            self.buf,
            r#"" stroke="{}" stroke-width="{}" stroke-linejoin="round""#,
            esc(stroke),
            coord(width)
        );
        if !dash.is_empty() {
            let _ = write!(self.buf, r#" stroke-dasharray="{}""#, esc(dash));
        }
        self.buf.push_str("/>");
    }

    /// A closed, filled polygon through `points`.
    pub fn polygon(&mut self, points: &[(f64, f64)], fill: &str, opacity: f64) {
        if points.len() < 3 {
            return;
        }
        self.buf.push_str(r#"<polygon points=""#);
        for (i, (x, y)) in points.iter().enumerate() {
            if i > 0 {
                self.buf.push(' ');
            }
            let _ = write!(self.buf, "{},{}", coord(*x), coord(*y));
        }
        let _ = write!(
            self.buf,
            r#"" fill="{}" fill-opacity="{}" stroke="none"/>"#,
            esc(fill),
            opacity.clamp(0.0, 1.0)
        );
    }

    /// A circle; `title` becomes its tooltip.
    pub fn circle(&mut self, x: f64, y: f64, r: f64, fill: &str, extra: &str, title: &str) {
        let _ = write!(
            self.buf,
            r#"<circle cx="{}" cy="{}" r="{}" fill="{}"{}"#,
            coord(x),
            coord(y),
            coord(r),
            esc(fill),
            extra
        );
        self.close_with_title(title, "circle");
    }

    /// Opens a group (`<g>`) with raw attributes written by this module's
    /// callers (never from data).
    pub fn open_group(&mut self, attrs: &str) {
        let _ = write!(self.buf, "<g {attrs}>");
    }

    /// Closes the innermost group.
    pub fn close_group(&mut self) {
        self.buf.push_str("</g>");
    }

    /// A tooltip for the innermost open group.
    pub fn title(&mut self, title: &str) {
        let _ = write!(self.buf, "<title>{}</title>", esc(title));
    }

    fn close_with_title(&mut self, title: &str, tag: &str) {
        if title.is_empty() {
            self.buf.push_str("/>");
        } else {
            let _ = write!(self.buf, "><title>{}</title></{tag}>", esc(title));
        }
    }

    /// The finished `<svg>` element.
    pub fn finish(mut self) -> String {
        self.buf.push_str("</svg>");
        self.buf
    }
}

/// Colours of the policies (Tableau 10, which stays distinguishable for
/// most colour-vision deficiencies); past ten they repeat dashed.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#17becf",
];

/// The colour of the `i`-th policy.
pub fn policy_color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The dash pattern of the `i`-th policy's lines (solid for the first ten).
pub fn policy_dash(i: usize) -> &'static str {
    match (i / PALETTE.len()) % 3 {
        0 => "",
        1 => "7 4",
        _ => "2 3",
    }
}

/// Viridis stops (perceptually uniform, readable in grey): 0 %, 10 %, … 100 %.
const VIRIDIS: [(u8, u8, u8); 11] = [
    (68, 1, 84),
    (72, 36, 117),
    (65, 68, 135),
    (53, 95, 141),
    (42, 120, 142),
    (33, 145, 140),
    (34, 168, 132),
    (68, 191, 112),
    (122, 209, 81),
    (189, 223, 38),
    (253, 231, 37),
];

/// The heatmap colour of a load fraction (clamped to 0–1).
pub fn heat_color(load: f64) -> String {
    let t = if load.is_finite() {
        load.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let pos = t * (VIRIDIS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(VIRIDIS.len() - 2);
    let f = pos - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// The colour of a core that was not in use.
pub const INACTIVE: &str = "#d4d4d4";
