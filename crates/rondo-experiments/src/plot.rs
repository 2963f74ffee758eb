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

/// Writes `<stem>.png` and `<stem>.svg` under `dir`.
pub fn write_plots(
    result: &ExperimentResult,
    reference: &[ReferenceLine],
    dir: &Path,
    stem: &str,
) -> Result<(), String> {
    register();
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw(
        BitMapBackend::new(&png, (960, 600)).into_drawing_area(),
        result,
        reference,
    )?;
    draw(
        SVGBackend::new(&svg, (960, 600)).into_drawing_area(),
        result,
        reference,
    )?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    result: &ExperimentResult,
    reference: &[ReferenceLine],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |err: DrawingAreaErrorKind<DB::ErrorType>| err.to_string();
    root.fill(&WHITE).map_err(e)?;
    let xs = result
        .points
        .iter()
        .map(|p| p.x)
        .chain(reference.iter().flat_map(|r| r.x_values.iter().copied()));
    let (x_min, x_max) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let ys = result
        .points
        .iter()
        .map(|p| p.metric + p.metric_ci_half_width.min(p.metric.abs()))
        .chain(reference.iter().flat_map(|r| r.y_values.iter().copied()));
    let y_max = ys.fold(0.0f64, f64::max) * 1.1 + 1e-9;
    let log_x = x_max / x_min.max(1e-9) >= 8.0 && x_min > 0.0;
    let title = if result.paper.is_empty() {
        result.name.clone()
    } else {
        format!("{} ({})", result.name, result.paper)
    };
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
            format!("{} (log scale)", result.x)
        } else {
            result.x.clone()
        })
        .y_desc(result.metric.clone())
        .x_label_formatter(&|v| {
            let x = if log_x { 2f64.powf(*v) } else { *v };
            if x.abs() >= 1e5 {
                format!("{x:.2e}")
            } else {
                format!("{x:.0}")
            }
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    for (i, (series, points)) in result.by_series().into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line: Vec<(f64, f64)> = points.iter().map(|p| (tx(p.x), p.metric)).collect();
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
                    .filter(|p| p.metric_ci_half_width.is_finite())
                    .map(|p| {
                        ErrorBar::new_vertical(
                            tx(p.x),
                            p.metric - p.metric_ci_half_width,
                            p.metric,
                            p.metric + p.metric_ci_half_width,
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
