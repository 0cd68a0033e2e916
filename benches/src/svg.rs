//! Grouped bar charts as self-contained SVG: categories along the x axis, one bar per series
//! in each category, one colour per series, a legend, and each bar's value in a `<title>`
//! (shown on hover). The y axis is logarithmic when the values span an order of magnitude or
//! more, or when the chart has a reference line (ratios), else linear from zero.

use std::fmt::Write as _;

/// One bar: its height and the text shown on hover.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Height in the chart's unit; only positive finite values are drawn.
    pub value: f64,
    /// The hover text.
    pub tip: String,
}

/// One series: a legend entry and a bar (or a gap) per category.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Index into the palette, so that one implementation keeps its colour across charts.
    pub colour: usize,
    /// One entry per category of the chart; `None` leaves a gap.
    pub bars: Vec<Option<Bar>>,
}

/// A grouped bar chart.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    /// Heading, also the SVG's `<title>`.
    pub title: String,
    /// The y axis' label (the unit).
    pub unit: String,
    /// Group labels along the x axis.
    pub categories: Vec<String>,
    /// Bars of each category, in legend order.
    pub series: Vec<Series>,
    /// A dashed horizontal line (1 for ratios), which also makes the axis logarithmic.
    pub reference: Option<f64>,
}

/// Colours of the series, distinguishable and readable on white.
const PALETTE: [&str; 16] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f3b73", "#000000", "#17becf", "#7f7f7f", "#bcbd22", "#6b3fa0",
];

/// The palette's colour for index `k` (wrapping around).
pub fn colour(k: usize) -> &'static str {
    PALETTE[k % PALETTE.len()]
}

const LEFT: f64 = 72.0;
const TOP: f64 = 40.0;
const PLOT_HEIGHT: f64 = 260.0;
const BOTTOM: f64 = 36.0;
const BAR_WIDTH: f64 = 10.0;
const CHAR_WIDTH: f64 = 7.0;
const LEGEND_ROW: f64 = 18.0;

/// The y axis: maps values to heights and lists its ticks.
struct Axis {
    log: bool,
    low: f64,
    high: f64,
}

impl Axis {
    fn new(values: &[f64], reference: Option<f64>) -> Axis {
        let mut low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let mut high = values.iter().copied().fold(0.0, f64::max);
        if let Some(r) = reference {
            low = low.min(r);
            high = high.max(r);
        }
        if !low.is_finite() || high <= 0.0 {
            return Axis {
                log: false,
                low: 0.0,
                high: 1.0,
            };
        }
        if reference.is_some() || high / low >= 10.0 {
            // The smallest bar keeps some height (bars grow from the bottom without a
            // reference line), the largest some room.
            let (low, high) = match reference {
                Some(_) => (low, high),
                None => (low * 0.8, high * 1.1),
            };
            let low = nice_below(low);
            let mut high = nice_step(high);
            if high <= low {
                high = nice_step(low * 1.5);
            }
            Axis {
                log: true,
                low,
                high,
            }
        } else {
            Axis {
                log: false,
                low: 0.0,
                high: nice_step(high / 5.0) * (high / nice_step(high / 5.0)).ceil(),
            }
        }
    }

    /// Fraction of the plot's height at `v`, clamped to the axis.
    fn fraction(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.log10() - self.low.log10()) / (self.high.log10() - self.low.log10())
        } else {
            (v - self.low) / (self.high - self.low)
        };
        f.clamp(0.0, 1.0)
    }

    /// Tick values with their labels.
    fn ticks(&self) -> Vec<(f64, String)> {
        let mut ticks = Vec::new();
        if self.log {
            let first = self.low.log10().floor() as i32;
            let last = self.high.log10().ceil() as i32;
            // The fewer decades, the more ticks between the powers of ten.
            let decades = (self.high / self.low).log10();
            let mantissas: &[f64] = if decades <= 1.0 + 1e-9 {
                &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0]
            } else if decades <= 3.0 + 1e-9 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            for e in first..=last {
                for &m in mantissas {
                    let v = m * 10f64.powi(e);
                    if v >= self.low * (1.0 - 1e-9) && v <= self.high * (1.0 + 1e-9) {
                        let decimals = (-e).max(0) as usize + usize::from(m.fract() != 0.0);
                        ticks.push((v, fixed(v, decimals)));
                    }
                }
            }
        } else {
            let step = nice_step(self.high / 5.0);
            let decimals = (-step.log10().floor()).max(0.0) as usize;
            let mut k = 0.0;
            while k * step <= self.high * (1.0 + 1e-9) {
                ticks.push((k * step, fixed(k * step, decimals)));
                k += 1.0;
            }
        }
        ticks
    }
}

/// The largest of 1, 2, 5 × 10^k at most `x` (positive).
fn nice_below(x: f64) -> f64 {
    let power = 10f64.powf(x.log10().floor());
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * power)
        .find(|&s| s <= x * (1.0 + 1e-9))
        .unwrap_or(power)
}

/// The smallest of 1, 2, 5 × 10^k at least `x`.
fn nice_step(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&s| s >= x * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

fn fixed(v: f64, decimals: usize) -> String {
    format!("{v:.decimals$}")
}

/// Text with `&`, `<`, `>`, and quotes escaped for XML content and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_WIDTH
}

impl BarChart {
    /// Whether the chart has at least one bar to draw.
    pub fn has_bars(&self) -> bool {
        self.values().next().is_some()
    }

    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.bars.iter().flatten())
            .map(|b| b.value)
            .filter(|v| v.is_finite() && *v > 0.0)
    }

    /// Renders the chart as a standalone SVG document (no scripts, no external resources).
    pub fn svg(&self) -> String {
        let values: Vec<f64> = self.values().collect();
        let axis = Axis::new(&values, self.reference);
        let n = self.series.len().max(1) as f64;
        let widest_label = self
            .categories
            .iter()
            .map(|c| text_width(c))
            .fold(0.0, f64::max);
        let group = (n * BAR_WIDTH + 12.0).max(widest_label + 10.0);
        let plot_width = group * self.categories.len().max(1) as f64;
        let legend_x = LEFT + plot_width + 24.0;
        let legend_width = 24.0
            + self
                .series
                .iter()
                .map(|s| text_width(&s.name))
                .fold(0.0, f64::max);
        // The title is set larger and bold.
        let title_width = text_width(&self.title) * 1.25;
        let width = (legend_x + legend_width + 8.0).max(LEFT + title_width + 8.0);
        let legend_height = self.series.len() as f64 * LEGEND_ROW;
        let height = TOP + PLOT_HEIGHT.max(legend_height) + BOTTOM;
        let base = TOP + PLOT_HEIGHT;
        let y = |v: f64| base - axis.fraction(v) * PLOT_HEIGHT;
        // Bars grow from the reference line when there is one (up: above it), else from the
        // bottom.
        let from = self.reference.map_or(base, y);

        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\">"
        );
        let _ = writeln!(out, "<title>{}</title>", escape(&self.title));
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
            escape(&self.title)
        );
        // Grid and tick labels.
        out.push_str("<g class=\"axis\">\n");
        for (v, label) in axis.ticks() {
            let ty = y(v);
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" y1=\"{ty:.1}\" x2=\"{:.1}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/>",
                LEFT + plot_width
            );
            let _ = writeln!(
                out,
                "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                LEFT - 6.0,
                ty + 4.0
            );
        }
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{base}\" stroke=\"#333\"/>"
        );
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{base}\" x2=\"{:.1}\" y2=\"{base}\" stroke=\"#333\"/>",
            LEFT + plot_width
        );
        let _ = writeln!(
            out,
            "<text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">{}{}</text>",
            TOP + PLOT_HEIGHT / 2.0,
            TOP + PLOT_HEIGHT / 2.0,
            escape(&self.unit),
            if axis.log { " (log scale)" } else { "" }
        );
        out.push_str("</g>\n");
        // Bars, group by group.
        out.push_str("<g class=\"bars\">\n");
        for (k, category) in self.categories.iter().enumerate() {
            let x0 = LEFT + group * k as f64 + (group - n * BAR_WIDTH) / 2.0;
            for (j, s) in self.series.iter().enumerate() {
                let Some(Some(bar)) = s.bars.get(k) else {
                    continue;
                };
                if !(bar.value.is_finite() && bar.value > 0.0) {
                    continue;
                }
                let end = y(bar.value);
                let _ = writeln!(
                    out,
                    "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                    x0 + j as f64 * BAR_WIDTH,
                    end.min(from),
                    BAR_WIDTH - 1.0,
                    (from - end).abs().max(1.0),
                    colour(s.colour),
                    escape(&bar.tip)
                );
            }
            let _ = writeln!(
                out,
                "<text class=\"category\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                LEFT + group * (k as f64 + 0.5),
                base + 18.0,
                escape(category)
            );
        }
        out.push_str("</g>\n");
        if let Some(r) = self.reference {
            let ry = y(r);
            let _ = writeln!(
                out,
                "<line class=\"reference\" x1=\"{LEFT}\" y1=\"{ry:.1}\" x2=\"{:.1}\" y2=\"{ry:.1}\" stroke=\"#000\" stroke-dasharray=\"4 3\"/>",
                LEFT + plot_width
            );
        }
        // Legend.
        out.push_str("<g class=\"legend\">\n");
        for (j, s) in self.series.iter().enumerate() {
            let ly = TOP + j as f64 * LEGEND_ROW;
            let _ = writeln!(
                out,
                "<rect x=\"{legend_x:.1}\" y=\"{ly:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                colour(s.colour)
            );
            let _ = writeln!(
                out,
                "<text class=\"legend\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                legend_x + 18.0,
                ly + 10.0,
                escape(&s.name)
            );
        }
        out.push_str("</g>\n</svg>\n");
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Checks that every tag is closed in order and that no `&` starts anything but an entity;
    /// returns the number of elements.
    pub(crate) fn well_formed(doc: &str) -> usize {
        let mut stack: Vec<&str> = Vec::new();
        let mut elements = 0;
        let mut rest = doc;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            for (k, _) in text.match_indices('&') {
                let entity = &text[k..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                        .iter()
                        .any(|e| entity.starts_with(e)),
                    "bare & in {text:?}"
                );
            }
            let close = rest[open..].find('>').expect("unclosed tag") + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if tag.starts_with('!') || tag.starts_with('?') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim()), "mismatched </{name}>");
            } else {
                elements += 1;
                let name = tag.split_whitespace().next().expect("empty tag");
                let name = name.trim_end_matches('/');
                if !tag.ends_with('/') {
                    stack.push(name);
                }
                assert_eq!(
                    tag.matches('"').count() % 2,
                    0,
                    "unbalanced quotes in <{tag}>"
                );
            }
        }
        assert!(stack.is_empty(), "unclosed elements {stack:?}");
        elements
    }

    fn bar(value: f64) -> Option<Bar> {
        Some(Bar {
            value,
            tip: format!("{value} & more"),
        })
    }

    #[test]
    fn bars_legend_and_labels() {
        let chart = BarChart {
            title: "GFLOP/s <spgemm>".into(),
            unit: "GFLOP/s".into(),
            categories: vec!["banded".into(), "road".into()],
            series: vec![
                Series {
                    name: "cpu".into(),
                    colour: 0,
                    bars: vec![bar(2.0), bar(0.5)],
                },
                Series {
                    name: "mkl".into(),
                    colour: 3,
                    bars: vec![None, bar(40.0)],
                },
            ],
            reference: None,
        };
        let svg = chart.svg();
        assert!(well_formed(&svg) > 10);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 3);
        assert_eq!(svg.matches("class=\"category\"").count(), 2);
        assert_eq!(svg.matches("<text class=\"legend\"").count(), 2);
        assert!(svg.contains("<title>40 &amp; more</title>"));
        assert!(svg.contains("GFLOP/s &lt;spgemm&gt;"));
        assert!(svg.contains(colour(3)));
        // 0.5 to 40 spans two decades: log scale from 0.2 to 50.
        assert!(svg.contains("(log scale)"));
        let ticks: Vec<&str> = svg
            .split("<text class=\"tick\"")
            .skip(1)
            .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
            .collect();
        assert_eq!(ticks, ["0.2", "0.5", "1", "2", "5", "10", "20", "50"]);
    }

    #[test]
    fn linear_axis_and_reference_line() {
        let axis = Axis::new(&[3.0, 7.0], None);
        assert!(!axis.log);
        let labels: Vec<String> = axis.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "2", "4", "6", "8"]);
        let ratio = Axis::new(&[1.5, 2.5], Some(1.0));
        assert!(ratio.log);
        assert_eq!((ratio.low, ratio.high), (1.0, 5.0));
        assert_eq!(ratio.fraction(1.0), 0.0);
        assert!((ratio.fraction(5f64.sqrt()) - 0.5).abs() < 1e-12);
        let labels: Vec<String> = ratio.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["1", "1.5", "2", "3", "5"]);
        let wide = Axis::new(&[0.012, 0.9, 150.0], Some(1.0));
        assert_eq!((wide.low, wide.high), (0.01, 200.0));
        let labels: Vec<String> = wide.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.01", "0.1", "1", "10", "100"]);
        let small = Axis::new(&[0.012, 0.04], None);
        let labels: Vec<String> = small.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.00", "0.01", "0.02", "0.03", "0.04"]);
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_below(0.7), 0.5);
        assert_eq!(nice_below(20.0), 20.0);
    }

    #[test]
    fn empty_and_bad_values_draw_no_bar() {
        let chart = BarChart {
            title: "t".into(),
            unit: "x".into(),
            categories: vec!["a".into()],
            series: vec![Series {
                name: "s".into(),
                colour: 17,
                bars: vec![bar(f64::NAN)],
            }],
            reference: Some(1.0),
        };
        assert!(!chart.has_bars());
        let svg = chart.svg();
        well_formed(&svg);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 0);
        assert!(svg.contains("class=\"reference\""));
        assert_eq!(colour(17), colour(1));
    }
}
