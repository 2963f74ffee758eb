//! Plots of experiment results: one line per series with 95% confidence
//! error bars, the paper's stated values as dashed reference lines, written
//! as PNG and SVG. Text uses an embedded DejaVu Sans, so no system fonts are
//! needed.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::runner::ExperimentResult;
use crate::spec::ReferenceLine;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

fn register() {
    REGISTER.call_once(|| {
        if register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            panic!("embedded font failed to load");
        }
    });
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// One point of a line: x, y and the 95% confidence half-width of y
/// (infinite or NaN: no error bar).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ChartPoint {
    pub x: f64,
    pub y: f64,
    pub ci_half_width: f64,
}

/// A chart of lines with error bars, whatever produced them.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// One line per series, in legend order.
    pub series: Vec<(String, Vec<ChartPoint>)>,
    /// The y axis's top (lines above it are cut off); `None`: fit the data.
    pub y_max: Option<f64>,
    /// A log-scale x axis; `None`: when x spans a factor of 8 or more.
    pub log_x: Option<bool>,
}

impl Chart {
    /// The chart of a simulator experiment: its metric per series.
    pub fn of_experiment(result: &ExperimentResult) -> Chart {
        Chart {
            title: if result.paper.is_empty() {
                result.name.clone()
            } else {
                format!("{} ({})", result.name, result.paper)
            },
            x_label: result.x.clone(),
            y_label: result.metric.clone(),
            series: result
                .by_series()
                .into_iter()
                .map(|(label, points)| {
                    let points = points
                        .iter()
                        .map(|p| ChartPoint {
                            x: p.x,
                            y: p.metric,
                            ci_half_width: p.metric_ci_half_width,
                        })
                        .collect();
                    (label, points)
                })
                .collect(),
            y_max: None,
            log_x: None,
        }
    }
}

impl Chart {
    /// Each series' metric against the result field `field` of its points
    /// (sorted by it); a `_bytes` field is shown in MB (10^6 bytes).
    pub fn of_experiment_against(result: &ExperimentResult, field: &str) -> Result<Chart, String> {
        let scale = if field.ends_with("_bytes") { 1e6 } else { 1.0 };
        let mut chart = Chart::of_experiment(result);
        chart.x_label = if scale == 1.0 {
            field.to_string()
        } else {
            format!("{} (MB)", field.trim_end_matches("_bytes"))
        };
        chart.series = result
            .by_series()
            .into_iter()
            .map(|(label, points)| {
                let mut line = points
                    .iter()
                    .map(|p| {
                        let value = serde_json::to_value(p).map_err(|e| e.to_string())?;
                        let x = value.get(field).and_then(|v| v.as_f64()).ok_or_else(|| {
                            format!("unknown or non-numeric result field '{field}'")
                        })?;
                        Ok(ChartPoint {
                            x: x / scale,
                            y: p.metric,
                            ci_half_width: p.metric_ci_half_width,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                line.sort_by(|a, b| a.x.total_cmp(&b.x));
                Ok((label, line))
            })
            .collect::<Result<_, String>>()?;
        Ok(chart)
    }
}

/// Writes `<stem>.png` and `<stem>.svg` under `dir`.
pub fn write_plots(
    result: &ExperimentResult,
    reference: &[ReferenceLine],
    dir: &Path,
    stem: &str,
) -> Result<(), String> {
    write_chart(&Chart::of_experiment(result), reference, dir, stem)
}

/// Writes `<stem>.png` and `<stem>.svg` of `chart` under `dir`.
pub fn write_chart(
    chart: &Chart,
    reference: &[ReferenceLine],
    dir: &Path,
    stem: &str,
) -> Result<(), String> {
    register();
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw(
        BitMapBackend::new(&png, (960, 600)).into_drawing_area(),
        chart,
        reference,
    )?;
    draw(
        SVGBackend::new(&svg, (960, 600)).into_drawing_area(),
        chart,
        reference,
    )?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    result: &Chart,
    reference: &[ReferenceLine],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |err: DrawingAreaErrorKind<DB::ErrorType>| err.to_string();
    root.fill(&WHITE).map_err(e)?;
    let all_points = || result.series.iter().flat_map(|(_, points)| points.iter());
    let xs = all_points()
        .map(|p| p.x)
        .chain(reference.iter().flat_map(|r| r.x_values.iter().copied()));
    let (x_min, x_max) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let ys = all_points()
        .map(|p| {
            let ci = if p.ci_half_width.is_finite() {
                p.ci_half_width.min(p.y.abs())
            } else {
                0.0
            };
            p.y + ci
        })
        .chain(reference.iter().flat_map(|r| r.y_values.iter().copied()));
    let y_max = result
        .y_max
        .unwrap_or_else(|| ys.fold(0.0f64, f64::max) * 1.1 + 1e-9);
    let log_x = result
        .log_x
        .unwrap_or(x_max / x_min.max(1e-9) >= 8.0 && x_min > 0.0);
    let title = result.title.clone();
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64);
    let x_range = if log_x {
        (x_min * 0.8).log2()..(x_max * 1.25).log2()
    } else {
        let pad = (x_max - x_min).max(1.0) * 0.05;
        (x_min - pad)..(x_max + pad)
    };
    let tx = move |x: f64| if log_x { x.log2() } else { x };
    let mut chart = builder.build_cartesian_2d(x_range, 0.0..y_max).map_err(e)?;
    // On a log scale, label whole powers of two only.
    let x_labels = if log_x {
        (x_max.log2().floor() - x_min.log2().ceil()) as usize + 1
    } else {
        10
    };
    chart
        .configure_mesh()
        .x_labels(x_labels)
        .x_desc(if log_x {
            format!("{} (log scale)", result.x_label)
        } else {
            result.x_label.clone()
        })
        .y_desc(result.y_label.clone())
        .x_label_formatter(&|v| {
            let x = if log_x { 2f64.powf(*v) } else { *v };
            if x.abs() >= 1e5 {
                format!("{x:.2e}")
            } else if x != 0.0 && x.abs() < 0.1 {
                // Small axes (arrival rates per second) keep two significant digits.
                format!("{x:.1e}")
            } else if x.fract().abs() > 1e-9 && x.abs() < 10.0 {
                format!("{x:.2}")
            } else {
                format!("{x:.0}")
            }
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    for (i, (series, points)) in result.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let series = series.clone();
        let line: Vec<(f64, f64)> = points.iter().map(|p| (tx(p.x), p.y)).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(series)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                line.iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )
            .map_err(e)?;
        chart
            .draw_series(
                points
                    .iter()
                    .filter(|p| p.ci_half_width.is_finite())
                    .map(|p| {
                        ErrorBar::new_vertical(
                            tx(p.x),
                            p.y - p.ci_half_width,
                            p.y,
                            p.y + p.ci_half_width,
                            color.stroke_width(1),
                            8,
                        )
                    }),
            )
            .map_err(e)?;
    }
    for (i, r) in reference.iter().enumerate() {
        let color = COLORS[(i + 4) % COLORS.len()];
        let pts: Vec<(f64, f64)> = r
            .x_values
            .iter()
            .zip(&r.y_values)
            .map(|(&x, &y)| (tx(x), y))
            .collect();
        chart
            .draw_series(DashedLineSeries::new(
                pts.clone(),
                6,
                4,
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(format!("paper: {}", r.label))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| TriangleMarker::new((x, y), 5, color.filled())),
            )
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
