use super::charts;
use super::svg::{self, coord, esc, heat_color, int, nice_ticks, Linear, Log10};
use super::*;
use crate::mechanisms::{
    AffinityAcceptCounters, DispatchCounters, Mechanisms, PolicyMechanisms, StateAccessCounters,
};
use crate::result::{PolicySummary, SweepPoint, Timeline};

/// Elements HTML closes by itself.
const VOID: &[&str] = &["meta", "br", "link", "img", "input", "hr", "col", "wbr"];

/// Checks that `doc` is well formed enough for any browser to read it the
/// way it was meant: every element opened is closed in order, `<` and `&`
/// in text only start tags and entities, attribute values are quoted and
/// hold no non-finite number. Returns the element names seen.
fn check_markup(doc: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    let b = doc.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => {
                if doc[i..].starts_with("<!--") {
                    i += doc[i..].find("-->").expect("comment closed") + 3;
                    continue;
                }
                if doc[i..].starts_with("<!") {
                    i += doc[i..].find('>').expect("doctype closed") + 1;
                    continue;
                }
                let end = i + doc[i..].find('>').expect("tag closed");
                let tag = &doc[i + 1..end];
                assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().unwrap_or_else(|| panic!("stray </{name}>"));
                    assert_eq!(open, name.trim(), "</{name}> closes <{open}>");
                } else {
                    let name: String = tag
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .collect();
                    assert!(!name.is_empty(), "'<' in text (unescaped?): {tag}");
                    check_attributes(tag);
                    seen.push(name.clone());
                    if name == "style" || name == "script" {
                        // Raw text up to the closing tag.
                        let close = format!("</{name}>");
                        i = end + doc[end..].find(&close).expect("raw text closed") + close.len();
                        continue;
                    }
                    if !tag.ends_with('/') && !VOID.contains(&name.as_str()) {
                        stack.push(name);
                    }
                }
                i = end + 1;
            }
            b'&' => {
                let entity: String = doc[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '#')
                    .collect();
                assert!(
                    !entity.is_empty() && doc[i + 1 + entity.len()..].starts_with(';'),
                    "bare '&' at {}",
                    &doc[i..(i + 20).min(doc.len())]
                );
                i += 1;
            }
            b'>' => panic!("bare '>' in text at {}", &doc[i.saturating_sub(30)..i + 1]),
            _ => i += 1,
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    seen
}

/// Attribute values are double-quoted, hold no quote of their kind, and no
/// `NaN` or `inf` (what Rust prints for non-finite numbers).
fn check_attributes(tag: &str) {
    let mut rest = tag;
    while let Some(eq) = rest.find('=') {
        let after = &rest[eq + 1..];
        assert!(after.starts_with('"'), "unquoted attribute in <{tag}>");
        let close = after[1..].find('"').expect("attribute closed");
        let value = &after[1..1 + close];
        for bad in ["NaN", "inf"] {
            assert!(!value.contains(bad), "{bad} in attribute of <{tag}>");
        }
        rest = &after[close + 2..];
    }
}

fn count(doc: &str, needle: &str) -> usize {
    doc.matches(needle).count()
}

fn policy(name: &str, cores: usize, samples: usize, dispatch: bool) -> PolicyResult {
    let rows = cores + usize::from(dispatch);
    let load: Vec<Vec<f32>> = (0..samples)
        .map(|s| {
            (0..rows)
                .map(|c| ((s * 7 + c * 13) % 100) as f32 / 100.0)
                .collect()
        })
        .collect();
    // The last processing core switched off for the second half.
    let active: Vec<Vec<bool>> = (0..samples)
        .map(|s| {
            (0..rows)
                .map(|c| !(c == cores - 1 && s >= samples / 2))
                .collect()
        })
        .collect();
    PolicyResult {
        name: name.to_string(),
        summary: PolicySummary {
            imbalance_median: 12.5,
            latency_p50_us: 20.0,
            latency_p95_us: 150.0,
            latency_p99_us: 900.0,
            drops: 42,
            reordered: 7,
            migrations: 3,
            avg_cores: rows as f64 - 0.5,
            packets: 100_000,
            processed: 99_958,
            avg_load: 0.7,
            cycles_per_packet: 1500.0,
            mechanisms: Mechanisms {
                policy: PolicyMechanisms::AffinityAccept(AffinityAcceptCounters {
                    steals: 2,
                    ..AffinityAcceptCounters::default()
                }),
                state: StateAccessCounters {
                    state_hits: 10,
                    ..StateAccessCounters::default()
                },
                slf_x1000: None,
                reframer: None,
            },
        },
        timeline: Timeline {
            interval_ms: 100,
            load,
            queue: vec![vec![0; rows]; samples],
            active_cores: (0..samples)
                .map(|s| rows as u16 - u16::from(s >= samples / 2))
                .collect(),
            active,
            drops: vec![1; samples],
            offered_pps: (0..samples).map(|s| 1e6 + s as f64 * 1e4).collect(),
        },
        imbalance_samples: vec![10.0, 12.5, 30.0],
        latency_cdf: (0..50)
            .map(|k| (2.0 * 1.2f64.powi(k), f64::from(k + 1) / 50.0))
            .collect(),
    }
}

fn comparison(policies: Vec<PolicyResult>, sweep: bool) -> Comparison {
    let sweep = if sweep {
        policies
            .iter()
            .flat_map(|p| {
                [0.5, 0.8, 1.0].map(|l| SweepPoint {
                    policy: p.name.clone(),
                    offered_load: l,
                    avg_load: l * 0.95,
                    packets: 10_000,
                    drops: if l < 0.9 { 0 } else { 120 },
                    latency_p95_us: 10.0 / (1.05 - l),
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    Comparison {
        workload: "preset campus4".into(),
        cores: 4,
        duration_s: 2.0,
        target_load: 0.8,
        clock_ghz: 2.3,
        seed: 1,
        policies,
        sweep,
        caveats: Vec::new(),
    }
}

#[test]
fn caveats_are_shown_in_the_settings() {
    let mut c = comparison(vec![policy("rss", 2, 6, false)], false);
    c.caveats = vec![crate::Caveat::TraceRanOut {
        at_s: 1.25,
        duration_s: 3.0,
    }];
    let page = html(&c);
    check_markup(&page);
    assert!(page.contains("the trace ran out at 1.250 s of the 3 s asked"));
}

#[test]
fn the_page_is_well_formed_and_has_every_chart() {
    let c = comparison(
        vec![policy("rss", 4, 20, false), policy("sw-rr", 4, 20, true)],
        false,
    );
    let page = html(&c);
    let tags = check_markup(&page);
    // Colour legend, one heatmap per policy, imbalance, CDF, tail, drops,
    // cores.
    assert_eq!(tags.iter().filter(|t| *t == "svg").count(), 1 + 2 + 5);
    for label in [
        "per-core load over time, rss",
        "per-core load over time, sw-rr",
        "imbalance per policy",
        "latency CDF per policy",
        "latency tail per policy",
        "drops per policy",
        "cores in use over time",
    ] {
        assert!(page.contains(&format!("aria-label=\"{label}\"")), "{label}");
    }
    assert!(!page.contains("NaN"));
    // Self-contained: nothing fetched (the SVG namespace is a name, not a
    // download).
    let without_ns = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!without_ns.contains("http://") && !without_ns.contains("https://"));
    assert!(!page.contains("<script") && !page.contains("<link"));
}

#[test]
fn each_policy_lists_its_own_mechanism_counters() {
    let aa = policy("affinity-accept", 4, 10, false);
    let mut sw = policy("sw-rr", 4, 10, true);
    sw.summary.mechanisms.policy =
        PolicyMechanisms::Dispatch(DispatchCounters { dispatched: 1234 });
    let mut page = String::new();
    mechanisms(&mut page, &[aa, sw]);
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("<tr><td")).collect();
    assert_eq!(rows.len(), 2, "{page}");
    assert!(rows[0].contains("affinity-accept") && rows[0].contains("steals <b>2</b>"));
    assert!(!rows[0].contains("dispatched"), "{}", rows[0]);
    assert!(rows[1].contains("sw-rr") && rows[1].contains("dispatched <b>1,234</b>"));
    assert!(!rows[1].contains("steals"), "{}", rows[1]);
    // Both have the state-access counters; nobody gets a column of dashes.
    assert!(rows.iter().all(|r| r.contains("state hits")));
    assert!(!page.contains("class=\"na\""), "{page}");
}

#[test]
fn tied_lowest_values_are_all_highlighted() {
    assert_eq!(best(&[3.0, 1.0, 2.0, 1.0]), vec![1, 3]);
    assert_eq!(best(&[2.0, 2.0]), Vec::<usize>::new(), "all equal: none");
    assert_eq!(best(&[f64::NAN, 5.0, 4.0]), vec![2]);
    assert_eq!(best(&[]), Vec::<usize>::new());
}

#[test]
fn a_sweep_replaces_the_drop_bars_with_load_curves() {
    let c = comparison(
        vec![policy("rss", 4, 20, false), policy("sprayer", 4, 20, false)],
        true,
    );
    let page = html(&c);
    check_markup(&page);
    assert!(page.contains("aria-label=\"drops against offered load\""));
    assert!(page.contains("aria-label=\"p95 latency against offered load\""));
    assert!(!page.contains("aria-label=\"drops per policy\""));
    // A marker per sweep point in each of the two charts, with its numbers.
    assert_eq!(count(&page, "requested load ("), 2 * 6);
    assert!(page.contains("3 loads per policy: 50%, 80%, 100%"));
}

#[test]
fn text_from_the_input_is_escaped() {
    let evil = "<b onload=\"x\">&'y'</b>";
    let mut c = comparison(vec![policy(evil, 4, 10, false)], true);
    c.workload = "/tmp/<dir>&\"'.pcap".into();
    let page = html(&c);
    check_markup(&page);
    assert!(!page.contains(evil));
    assert!(!page.contains("<dir>"));
    assert!(page.contains("&lt;b onload=&quot;x&quot;&gt;&amp;&#39;y&#39;&lt;/b&gt;"));
    assert!(page.contains("/tmp/&lt;dir&gt;&amp;&quot;&#39;.pcap"));
}

#[test]
fn empty_and_zero_data_give_a_valid_page() {
    let page = html(&Comparison::default());
    check_markup(&page);
    assert!(!page.contains("NaN"));
    assert!(page.contains("No policy was run"));

    let zero = PolicyResult {
        name: "rss".into(),
        ..PolicyResult::default()
    };
    let mut c = comparison(vec![zero.clone(), zero], false);
    c.duration_s = 0.0;
    let page = html(&c);
    check_markup(&page);
    assert!(!page.contains("NaN"));
    assert!(page.contains("no samples"));
    assert!(page.contains("no packet was processed"));
}

#[test]
fn non_finite_numbers_never_reach_the_markup() {
    let mut p = policy("rss", 2, 6, false);
    p.summary.imbalance_median = f64::NAN;
    p.summary.latency_p99_us = f64::INFINITY;
    p.summary.avg_load = f64::NAN;
    p.imbalance_samples = vec![f64::NAN, 5.0, f64::INFINITY];
    p.latency_cdf = vec![(f64::NAN, 0.5), (3.0, f64::NAN), (0.0, 0.2), (10.0, 1.0)];
    p.timeline.load[1][0] = f32::NAN;
    p.timeline.load[2][1] = f32::INFINITY;
    p.timeline.offered_pps[0] = f64::NAN;
    let mut c = comparison(vec![p], true);
    c.sweep[0].latency_p95_us = f64::NAN;
    c.sweep[1].offered_load = f64::INFINITY;
    c.target_load = f64::NAN;
    let page = html(&c);
    check_markup(&page);
    assert!(!page.contains("NaN"));
}

#[test]
fn heatmap_rows_are_cores_then_the_dispatcher() {
    let p = policy("sw-rr", 4, 10, true);
    let map = charts::heatmap(&p, 0, 4, 1.0);
    check_markup(&map);
    for row in ["core 0", "core 3", "dispatch"] {
        assert!(map.contains(&format!(">{row}</text>")), "{row}");
    }
    assert!(!map.contains(">core 4<"));
    // The last core was off for the second half: grey cells saying so.
    assert!(map.contains(svg::INACTIVE));
    assert!(map.contains("core 3, 0.5–1 s: not in use"));
    let plain = charts::heatmap(&policy("rss", 4, 10, false), 0, 4, 1.0);
    assert!(!plain.contains("dispatch"));
}

#[test]
fn heatmap_merges_equal_cells_and_bins_long_runs() {
    let mut p = policy("rss", 3, 400, false);
    p.timeline.active.clear(); // an older result: every core in use
    for row in &mut p.timeline.load {
        row.fill(0.5);
    }
    let map = charts::heatmap(&p, 0, 3, 40.0);
    check_markup(&map);
    // One rectangle per row (plus the title swatch).
    assert_eq!(count(&map, "<rect"), 3 + 1);
    assert!(!map.contains(svg::INACTIVE));

    let long = policy("rss", 2, 20_000, false);
    let map = charts::heatmap(&long, 0, 2, 0.0);
    check_markup(&map);
    assert!(count(&map, "<rect") <= 2 * 900 + 1);
    assert!(map.contains(">2k</text>"), "the time axis reaches 2000 s");
}

#[test]
fn the_draining_sample_after_the_run_is_left_out() {
    // 1 s at 100 ms: ten samples, then the partial one while queues drain.
    let p = policy("rss", 2, 11, false);
    let map = charts::heatmap(&p, 0, 2, 1.0);
    check_markup(&map);
    assert!(map.contains("core 0, 0.9–1 s"));
    assert!(!map.contains("–1.1 s"));
    let cores = charts::cores_over_time(&[p], 1.0);
    check_markup(&cores);
    // The step line ends at 1 s, the right end of the axis.
    assert!(cores.contains(">1</text>") && !cores.contains(">1.1</text>"));
}

#[test]
fn sweep_points_without_drops_sit_on_the_none_line() {
    let c = comparison(vec![policy("rss", 2, 4, false)], true);
    let chart = charts::sweep_drops(&c.policies, &c.sweep);
    check_markup(&chart);
    assert!(chart.contains(">none</text>"));
    assert!(chart.contains("0 of 10,000 packets dropped"));
    assert!(chart.contains("120 of 10,000 packets dropped"));
}

#[test]
fn scales_and_ticks() {
    assert_eq!(
        nice_ticks(0.0, 10.0, 5),
        vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    );
    assert_eq!(nice_ticks(0.0, 1.0, 4), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    assert_eq!(nice_ticks(f64::NAN, 1.0, 4), vec![0.0, 1.0]);
    let x = Linear::new(0.0, 10.0, 100.0, 200.0);
    assert_eq!(x.map(5.0), 150.0);
    assert_eq!(x.map(20.0), 200.0);
    assert_eq!(Linear::new(3.0, 3.0, 0.0, 1.0).map(3.0), 1.0);
    let log = Log10::new(2.5, 4000.0, 0.0, 400.0);
    let majors: Vec<f64> = log
        .ticks()
        .into_iter()
        .filter(|t| t.1)
        .map(|t| t.0)
        .collect();
    assert_eq!(majors, vec![1.0, 10.0, 100.0, 1000.0, 10000.0]);
    assert_eq!(log.map(100.0), 200.0);
    assert_eq!(log.map(0.0), 0.0);
    assert_eq!(svg::tick_label(2500.0), "2.5k");
    assert_eq!(svg::tick_label(0.25), "0.25");
}

#[test]
fn formatting_helpers() {
    assert_eq!(
        esc("<a href='x'>&\"</a>"),
        "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
    );
    assert_eq!(coord(1.25), "1.3");
    assert_eq!(coord(3.0), "3");
    assert_eq!(coord(f64::NAN), "0");
    assert_eq!(coord(f64::NEG_INFINITY), "0");
    assert_eq!(int(0), "0");
    assert_eq!(int(1_234_567), "1,234,567");
    assert_eq!(svg::num(f64::NAN), "–");
    assert_eq!(svg::num(12_345.6), "12,346");
    assert_eq!(svg::pct(0.123), "12%");
    assert_eq!(svg::pct(0.000_113), "0.011%");
    assert_eq!(svg::pct(0.0), "0%");
    assert_eq!(svg::pct_tick(1.0), "100%");
    assert_eq!(svg::pct_tick(1e-5), "0.001%");
    assert_eq!(svg::pct_tick(0.1), "10%");
    assert_eq!(heat_color(0.0), "#440154");
    assert_eq!(heat_color(1.0), "#fde725");
    assert_eq!(heat_color(7.0), heat_color(1.0));
    assert_eq!(heat_color(f64::NAN), heat_color(0.0));
}

#[test]
fn the_markup_checker_rejects_broken_markup() {
    for bad in [
        "<div><span></div>",
        "<div>",
        "a < b",
        "<p>fish & chips</p>",
        "<rect x=\"NaN\"/>",
        "</p>",
    ] {
        assert!(
            std::panic::catch_unwind(|| check_markup(bad)).is_err(),
            "{bad}"
        );
    }
    check_markup("<p>a &lt; b &amp; c<br></p>");
}

#[test]
fn imbalance_goes_logarithmic_when_values_span_decades() {
    let mut fair = policy("sprayer", 2, 4, false);
    fair.summary.imbalance_median = 0.2;
    fair.imbalance_samples = vec![0.1, 0.2, 0.3];
    let unfair = policy("rss", 2, 4, false);
    let chart = charts::imbalance(&[fair.clone(), unfair.clone()]);
    check_markup(&chart);
    assert!(chart.contains("log scale"));
    assert!(chart.contains(">0.1%</text>") && chart.contains(">100%</text>"));
    let chart = charts::imbalance(&[unfair]);
    assert!(!chart.contains("log scale"));
    assert!(chart.contains(">0%</text>"));
}

#[test]
fn cores_that_never_change_are_said_not_drawn() {
    let mut flat = vec![policy("rss", 4, 20, false), policy("sprayer", 4, 20, false)];
    for p in &mut flat {
        p.timeline.active_cores = vec![4; 20];
    }
    let page = html(&comparison(flat.clone(), false));
    check_markup(&page);
    assert!(!page.contains("aria-label=\"cores in use over time\""));
    assert!(
        page.contains("No policy changed its number of cores"),
        "{page}"
    );
    // One policy that scales: the chart is back.
    flat[1].timeline.active_cores[10] = 3;
    let page = html(&comparison(flat, false));
    assert!(page.contains("aria-label=\"cores in use over time\""));
}

/// Checks a figure's CSV: a header, then rows of as many fields, the
/// numeric ones parsing (empty: no sample). Returns the data rows.
fn check_csv(csv: &str, header: &str) -> usize {
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(header));
    let width = header.split(',').count();
    let mut rows = 0;
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), width, "{line}");
        for f in &fields[1..] {
            assert!(f.is_empty() || f.parse::<f64>().is_ok(), "{line}");
        }
        rows += 1;
    }
    rows
}

#[test]
fn figures_are_standalone_svgs_with_their_csv_and_caption() {
    let c = comparison(
        vec![policy("rss", 4, 20, false), policy("rsspp", 4, 20, false)],
        false,
    );
    let figs = figures(&c);
    let stems: Vec<&str> = figs.iter().map(|f| f.stem.as_str()).collect();
    assert_eq!(
        stems,
        [
            "rsspp-fig10-latency",
            "rsspp-fig11-scaling",
            "rsspp-fig12-imbalance"
        ]
    );
    for f in &figs {
        let body = f
            .svg
            .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
            .expect("an XML declaration");
        let seen = check_markup(body);
        assert_eq!(seen[0], "svg");
        assert!(seen.contains(&"style".to_string()), "{}", f.stem);
        assert!(f.caption.contains("RSS++") && f.caption.contains("This run"));
    }
    assert!(figs[0].caption.contains("Figure 10") && figs[0].caption.contains("14x"));
    assert!(figs[1].caption.contains("Figure 11"));
    assert!(figs[2].caption.contains("Figure 12") && figs[2].caption.contains("51.2%"));
    // Imbalances are in percent already.
    assert!(
        figs[2].caption.contains("rss: 12.5%"),
        "{}",
        figs[2].caption
    );
    // 50 CDF points, 20 samples of cores in use, 3 imbalance samples, per
    // policy.
    assert_eq!(
        check_csv(&figs[0].csv, "policy,latency_us,fraction_at_or_below"),
        100
    );
    assert_eq!(check_csv(&figs[1].csv, "policy,time_s,active_cores"), 40);
    assert_eq!(check_csv(&figs[2].csv, "policy,sample,imbalance_pct"), 6);
    assert!(figs[1].csv.contains("\nrss,2,3\n"), "{}", figs[1].csv);
}

#[test]
fn scaling_is_a_figure_only_when_cores_changed() {
    let mut p = policy("rss", 4, 10, false);
    p.timeline.active_cores = vec![4; 10];
    p.summary.imbalance_median = f64::NAN;
    p.imbalance_samples = vec![f64::NAN];
    let figs = figures(&comparison(vec![p], false));
    let stems: Vec<&str> = figs.iter().map(|f| f.stem.as_str()).collect();
    assert_eq!(stems, ["rsspp-fig10-latency", "rsspp-fig12-imbalance"]);
    // No sample: an empty field, "n/a" in the caption.
    assert_eq!(check_csv(&figs[1].csv, "policy,sample,imbalance_pct"), 1);
    assert!(figs[1].csv.ends_with("rss,0,\n"));
    assert!(figs[1].caption.contains("rss: n/a"));
}

/// An experiment whose every run gives `make(run index, policy name)`.
fn experiment(
    id: crate::paper::ExperimentId,
    make: impl Fn(usize, &str) -> PolicyResult,
) -> crate::paper::Experiment {
    use crate::paper::{runs, Run, Scale};
    let runs = runs(id, Scale::Quick)
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let policies = spec.policies.iter().map(|n| make(i, n)).collect();
            Run {
                comparison: comparison(policies, false),
                spec,
                speed: 1.0,
            }
        })
        .collect();
    crate::paper::Experiment {
        id,
        runs,
        wall_s: 1.5,
    }
}

#[test]
fn a_paper_figure_draws_its_runs_and_names_their_commands() {
    use crate::paper::{ExperimentId, FigureId, FLOW_COUNTS};
    // Sprayer reorders 40% of the packets of run 0, 10% of the next, …
    let e = experiment(ExperimentId::FlowAwareness, |i, name| {
        let mut p = policy(name, 4, 10, false);
        p.summary.reordered = if name == "sprayer" {
            40_000 >> (2 * i)
        } else {
            0
        };
        p.summary.processed = 100_000;
        p
    });
    let f = paper_figure(FigureId::Rsspp15, &e);
    assert_eq!(f.figure.stem, "rsspp-fig15");
    let body = f
        .figure
        .svg
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        .expect("an XML declaration");
    let seen = check_markup(body);
    // Two panels in one document.
    assert_eq!(seen.iter().filter(|s| *s == "svg").count(), 1);
    assert!(seen.iter().filter(|s| *s == "g").count() >= 2);
    assert!(body.contains("translate(0 350)"), "the second panel below");
    assert_eq!(
        check_csv(
            &f.figure.csv,
            "policy,flows,packets,processed,reordered,reordered_pct,cycles_per_packet"
        ),
        3 * FLOW_COUNTS.len()
    );
    assert!(f.figure.csv.contains("\nsprayer,4,100000,100000,40000,40,"));
    assert!(
        f.this_run.contains("40% of the packets with 4 flows"),
        "{}",
        f.this_run
    );
    assert!(f.figure.caption.contains("about 30%"), "the paper's number");
    for r in &e.runs {
        assert!(f.figure.caption.contains(&r.spec.command()));
    }
    let index = index(&[f], &[e], crate::paper::Scale::Quick);
    assert!(index.contains("`rsspp figures --quick`"));
    assert!(index.contains("[csv](rsspp-fig15.csv)"));
    assert!(index.contains("| RSS++ Fig. 15 (flow-awareness) |"));
}
