//! Self-contained SVG line charts, sans-I/O: series in, one SVG document
//! out. Small on purpose — two chart kinds, no plotting dependency.

use std::fmt::Write as _;

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 210.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 56.0;

/// Colours of the series, in order (colour-blind safe).
pub const PALETTE: [&str; 6] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
];

/// One axis.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Label under / beside the axis.
    pub label: String,
    /// Logarithmic (base 10) instead of linear.
    pub log: bool,
    /// Range shown.
    pub min: f64,
    /// Range shown.
    pub max: f64,
    /// Tick positions and labels; empty: decades and their 2s and 5s (log)
    /// or five even steps (linear).
    pub ticks: Vec<(f64, String)>,
}

impl Axis {
    /// A log axis spanning `values`, padded to whole 1-2-5 steps.
    pub fn log_over(label: &str, values: impl Iterator<Item = f64>) -> Axis {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if lo > hi {
            (lo, hi) = (1.0, 10.0);
        }
        Axis {
            label: label.into(),
            log: true,
            min: step_below(lo),
            max: step_above(hi.max(lo * 1.5)),
            ticks: Vec::new(),
        }
    }

    fn pos(&self, v: f64) -> f64 {
        let f = |x: f64| if self.log { x.max(1e-12).log10() } else { x };
        let (a, b) = (f(self.min), f(self.max));
        if b == a {
            0.5
        } else {
            ((f(v) - a) / (b - a)).clamp(-0.02, 1.02)
        }
    }

    fn tick_list(&self) -> Vec<(f64, String)> {
        if !self.ticks.is_empty() {
            return self.ticks.clone();
        }
        if !self.log {
            return (0..=5)
                .map(|i| self.min + (self.max - self.min) * i as f64 / 5.0)
                .map(|v| (v, number(v)))
                .collect();
        }
        let mut out = Vec::new();
        let mut decade = 10f64.powf(self.min.log10().floor());
        while decade <= self.max * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                let v = decade * m;
                if v >= self.min * 0.9999 && v <= self.max * 1.0001 {
                    out.push((v, number(v)));
                }
            }
            decade *= 10.0;
        }
        out
    }
}

/// The largest 1-2-5 step at or below `v`.
fn step_below(v: f64) -> f64 {
    let d = 10f64.powf(v.log10().floor());
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * d)
        .find(|s| *s <= v * 1.0001)
        .unwrap_or(d)
}

/// The smallest 1-2-5 step at or above `v`.
fn step_above(v: f64) -> f64 {
    let d = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * d)
        .find(|s| *s >= v * 0.9999)
        .unwrap_or(10.0 * d)
}

/// A number as a short label: 0.05, 2, 500, 5k, 20k.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 && (a / 1000.0).fract() == 0.0 {
        format!("{}k", v / 1000.0)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// One line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Colour (CSS).
    pub color: String,
    /// Dashed instead of solid.
    pub dashed: bool,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A labelled point drawn as a hollow marker (e.g. a published figure).
#[derive(Debug, Clone)]
pub struct Marker {
    /// Legend text.
    pub name: String,
    /// Colour (CSS).
    pub color: String,
    /// Position.
    pub at: (f64, f64),
}

/// A chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Lines.
    pub series: Vec<Series>,
    /// Single points.
    pub markers: Vec<Marker>,
}

impl Chart {
    /// The SVG document.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(8 * 1024);
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
             viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
            LEFT + plot_w() / 2.0,
            escape(&self.title)
        );
        self.grid(&mut s);
        for (i, series) in self.series.iter().enumerate() {
            self.line(&mut s, series, i);
        }
        for (i, m) in self.markers.iter().enumerate() {
            self.marker(&mut s, m, self.series.len() + i);
        }
        s.push_str("</svg>\n");
        s
    }

    fn px(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (
            LEFT + self.x.pos(x) * plot_w(),
            TOP + (1.0 - self.y.pos(y)) * plot_h(),
        )
    }

    fn grid(&self, s: &mut String) {
        let (x0, x1, y0, y1) = (LEFT, LEFT + plot_w(), TOP, TOP + plot_h());
        for (v, label) in self.x.tick_list() {
            let x = LEFT + self.x.pos(v) * plot_w();
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{y1}\" stroke=\"#ddd\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                y1 + 16.0,
                escape(&label)
            );
        }
        for (v, label) in self.y.tick_list() {
            let y = TOP + (1.0 - self.y.pos(v)) * plot_h();
            let _ = writeln!(
                s,
                "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                x0 - 6.0,
                y + 4.0,
                escape(&label)
            );
        }
        let _ = writeln!(
            s,
            "<rect x=\"{x0}\" y=\"{y0}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" \
             stroke=\"#333\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text transform=\"translate(18 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            plot_w(),
            plot_h(),
            LEFT + plot_w() / 2.0,
            H - 14.0,
            escape(&self.x.label),
            TOP + plot_h() / 2.0,
            escape(&self.y.label)
        );
    }

    fn line(&self, s: &mut String, series: &Series, slot: usize) {
        let pts: Vec<String> = series
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|p| {
                let (x, y) = self.px(*p);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let dash = if series.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            escape(&series.color),
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                s,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"2.5\" fill=\"{}\"/>",
                escape(&series.color)
            );
        }
        self.legend(s, slot, &series.name, &series.color, dash, false);
    }

    fn marker(&self, s: &mut String, m: &Marker, slot: usize) {
        let (x, y) = self.px(m.at);
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"9\" height=\"9\" fill=\"white\" \
             stroke=\"{}\" stroke-width=\"2\"/>",
            x - 4.5,
            y - 4.5,
            escape(&m.color)
        );
        self.legend(s, slot, &m.name, &m.color, "", true);
    }

    fn legend(&self, s: &mut String, slot: usize, name: &str, color: &str, dash: &str, box_: bool) {
        let x = LEFT + plot_w() + 14.0;
        let y = TOP + 10.0 + slot as f64 * 20.0;
        let color = escape(color);
        if box_ {
            let _ = write!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"9\" height=\"9\" fill=\"white\" \
                 stroke=\"{color}\" stroke-width=\"2\"/>",
                x + 6.0,
                y - 4.5
            );
        } else {
            let _ = write!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" \
                 stroke-width=\"2\"{dash}/>",
                x + 22.0
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 28.0,
            y + 4.0,
            escape(name)
        );
    }
}

fn plot_w() -> f64 {
    W - LEFT - RIGHT
}

fn plot_h() -> f64 {
    H - TOP - BOTTOM
}

/// Text for an SVG text node or attribute.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "a <b> & c".into(),
            x: Axis::log_over("clients", [500.0, 19_900.0].into_iter()),
            y: Axis::log_over("ms", [0.3, 42.0].into_iter()),
            series: vec![Series {
                name: "C1 p50".into(),
                color: PALETTE[0].into(),
                dashed: true,
                points: vec![
                    (500.0, 0.3),
                    (5000.0, 2.0),
                    (19_900.0, 30.0),
                    (1.0, f64::NAN),
                ],
            }],
            markers: vec![Marker {
                name: "reference".into(),
                color: PALETTE[1].into(),
                at: (335.0, 23.78),
            }],
        }
    }

    #[test]
    fn renders_a_well_formed_document() {
        let svg = chart().render();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;b&gt; &amp; c"), "title escaped");
        assert!(!svg.contains("NaN"), "non-finite points are skipped");
        assert!(svg.contains("stroke-dasharray"));
        // Every element is closed: as many opening tags as closings.
        let opens = svg.matches('<').count();
        let self_closed = svg.matches("/>").count();
        let closes = svg.matches("</").count();
        assert_eq!(opens, self_closed + 2 * closes);
        // Three points inside the plot, one marker.
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn log_axes_snap_to_1_2_5_steps() {
        let a = Axis::log_over("", [0.3, 42.0].into_iter());
        assert_eq!((a.min, a.max), (0.2, 50.0));
        let labels: Vec<String> = a.tick_list().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.2", "0.5", "1", "2", "5", "10", "20", "50"]);
        assert_eq!(Axis::log_over("", std::iter::empty()).max, 10.0);
        assert_eq!(number(5000.0), "5k");
        assert_eq!(number(19_900.0), "19900");
        assert_eq!(number(0.05), "0.05");
    }
}
