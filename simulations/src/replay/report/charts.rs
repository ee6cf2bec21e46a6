//! Charts, SVG and PNG, drawn with plotters and the DejaVu Sans font shipped in
//! `assets/fonts`, and the series they plot (resampled step series, the JCT CDF).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::replay::sim::Outcome;

static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TTF shipped with the crate; a failure would only lose labels.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// A named line of (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// At most `n` points of a step series, the state at evenly spaced times.
fn resample(samples: &[(i64, f64)], end: i64, n: usize) -> Vec<(f64, f64)> {
    if samples.is_empty() {
        return vec![];
    }
    let t0 = samples[0].0;
    if samples.len() <= n || end <= t0 {
        let mut v: Vec<(f64, f64)> = samples
            .iter()
            .map(|&(t, y)| (t as f64 / 3600e3, y))
            .collect();
        if let Some(&(_, y)) = samples.last() {
            v.push((end as f64 / 3600e3, y));
        }
        return v;
    }
    let mut out = Vec::with_capacity(n + 1);
    let mut i = 0;
    for k in 0..=n {
        let t = t0 + ((end - t0) as i128 * k as i128 / n as i128) as i64;
        while i + 1 < samples.len() && samples[i + 1].0 <= t {
            i += 1;
        }
        out.push((t as f64 / 3600e3, samples[i].1));
    }
    out
}

pub fn allocation_series(o: &Outcome) -> Vec<(f64, f64)> {
    let total = o.total_gpus.max(1) as f64;
    let pts: Vec<(i64, f64)> = o
        .samples
        .iter()
        .map(|s| (s.t_ms, s.gpus_allocated as f64 / total))
        .collect();
    resample(&pts, o.end_ms, 1500)
}

pub fn queue_share_series(o: &Outcome) -> Vec<Series> {
    let total = o.total_gpus.max(1) as f64;
    o.queues
        .iter()
        .enumerate()
        .map(|(q, def)| {
            let pts: Vec<(i64, f64)> = o
                .samples
                .iter()
                .map(|s| (s.t_ms, s.queue_gpus[q] as f64 / total))
                .collect();
            (def.name.clone(), resample(&pts, o.end_ms, 1000))
        })
        .collect()
}

/// Empirical CDF of JCT in hours.
pub fn jct_cdf(o: &Outcome) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = o
        .jobs
        .iter()
        .zip(&o.job_submit_ms)
        .filter_map(|(r, &s)| r.end_ms.map(|e| (e - s) as f64 / 3600e3))
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = (n / 1500).max(1);
    let mut out: Vec<(f64, f64)> = v
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || i + 1 == n)
        .map(|(i, &x)| (x, (i + 1) as f64 / n as f64))
        .collect();
    out.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    out
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if log_x {
        x0 = x0.max(1e-3);
        x1 = x1.max(x0 * 10.0);
    } else if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 <= 0.0 {
        1.0
    } else {
        (y1 * 1.05).min(1.0).max(y1)
    };
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56);
    let palette = |i: usize| Palette99::pick(i).to_rgba();
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(e)?;
            for (i, (name, p)) in series.iter().enumerate() {
                let color = palette(i);
                let p: Vec<(f64, f64)> = if log_x {
                    p.iter().copied().filter(|&(x, _)| x >= x0).collect()
                } else {
                    p.clone()
                };
                chart
                    .draw_series(LineSeries::new(p, color.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
            }
            if series.len() > 1 {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 12))
                    .draw()
                    .map_err(e)?;
            }
        }};
    }
    if log_x {
        body!(builder
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
            .map_err(e)?);
    } else {
        body!(builder.build_cartesian_2d(x0..x1, 0.0..y1).map_err(e)?);
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `stem.svg` and `stem.png` into `dir`.
pub fn chart(
    dir: &Path,
    stem: &str,
    title: &str,
    x: &str,
    y: &str,
    series: &[Series],
    log_x: bool,
) -> anyhow::Result<()> {
    register_font();
    let svg = dir.join(format!("{stem}.svg"));
    let png = dir.join(format!("{stem}.png"));
    draw(
        SVGBackend::new(&svg, (900, 500)).into_drawing_area(),
        title,
        x,
        y,
        series,
        log_x,
    )
    .map_err(|m| anyhow::anyhow!("{}: {m}", svg.display()))?;
    draw(
        BitMapBackend::new(&png, (900, 500)).into_drawing_area(),
        title,
        x,
        y,
        series,
        log_x,
    )
    .map_err(|m| anyhow::anyhow!("{}: {m}", png.display()))?;
    Ok(())
}
