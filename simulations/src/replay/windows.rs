//! Fairness over windows of simulated time (issue 36: fairness over time). Within each window
//! of `window_ms` (1 day in the report), every queue's held and demanded GPUs are averaged over
//! time; a queue with demand in the window is owed `min(mean demand, deserved)`. Two figures:
//! - share error: per queue, the time average over the windows it had demand in of
//!   `|mean held − owed| / total GPUs`; then the mean over those queues;
//! - Jain's index per window over `x_q = mean held / owed`, averaged over the windows.

use super::sim::Sample;

/// Figures over windows of one length.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WindowFairness {
    pub window_s: f64,
    pub windows: usize,
    pub share_error: Option<f64>,
    pub jain: Option<f64>,
}

/// Each window's per-queue mean held and demanded GPUs: (held, demand) sums weighted by time.
fn window_means(
    samples: &[Sample],
    end: i64,
    window_ms: i64,
    queues: usize,
) -> Vec<Vec<(f64, f64)>> {
    let Some(start) = samples.first().map(|s| s.t_ms) else {
        return Vec::new();
    };
    let count = ((end - start).max(0) / window_ms + 1) as usize;
    let mut sums = vec![vec![(0.0, 0.0); queues]; count];
    let mut lengths = vec![0.0; count];
    for (i, s) in samples.iter().enumerate() {
        let until = samples.get(i + 1).map_or(end, |n| n.t_ms);
        let mut t = s.t_ms;
        // One sample may span several windows: each gets its part.
        while t < until {
            let w = ((t - start) / window_ms) as usize;
            let stop = until.min(start + (w as i64 + 1) * window_ms);
            let len = (stop - t) as f64;
            lengths[w] += len;
            for (q, sum) in sums[w].iter_mut().enumerate() {
                let held = s.queue_gpus.get(q).copied().unwrap_or(0) as f64;
                let demand = s.queue_demand.get(q).copied().unwrap_or(0) as f64;
                sum.0 += held * len;
                sum.1 += demand * len;
            }
            t = stop;
        }
    }
    (sums.into_iter().zip(lengths))
        .filter(|(_, len)| *len > 0.0)
        .map(|(qs, len)| qs.into_iter().map(|(h, d)| (h / len, d / len)).collect())
        .collect()
}

pub fn fairness(
    samples: &[Sample],
    end: i64,
    window_ms: i64,
    deserved: &[f64],
    total: f64,
) -> WindowFairness {
    let means = window_means(samples, end, window_ms, deserved.len());
    let mut error = vec![(0.0, 0usize); deserved.len()];
    let mut jains = Vec::new();
    for window in &means {
        let mut xs = Vec::new();
        for (q, &(held, demand)) in window.iter().enumerate() {
            if demand <= 0.0 {
                continue;
            }
            let owed = demand.min(deserved[q]);
            error[q].0 += (held - owed).abs() / total.max(1.0);
            error[q].1 += 1;
            xs.push(if owed > 0.0 { held / owed } else { 0.0 });
        }
        let (sum, sq): (f64, f64) = (xs.iter().sum(), xs.iter().map(|x| x * x).sum());
        if sq > 0.0 {
            jains.push(sum * sum / (xs.len() as f64 * sq));
        }
    }
    let per_queue: Vec<f64> = (error.iter())
        .filter(|(_, n)| *n > 0)
        .map(|(e, n)| e / *n as f64)
        .collect();
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    WindowFairness {
        window_s: window_ms as f64 / 1000.0,
        windows: means.len(),
        share_error: mean(&per_queue),
        jain: mean(&jains),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64, held: [u32; 2], demand: [u32; 2]) -> Sample {
        Sample {
            t_ms,
            queue_gpus: held.to_vec(),
            queue_demand: demand.to_vec(),
            ..Default::default()
        }
    }

    /// Two queues owed 8 each of 16, both always wanting 16. Day 1: a holds 16 for the whole
    /// day; day 2: b does. Over each day one queue has 16 (8 over) and the other 0 (8 under):
    /// error 8/16 = 0.5 each, Jain (2)²/(2·4) = 0.5 per day. Over 2-day windows each held 8
    /// on average: no error, Jain 1.
    #[test]
    fn windows_see_alternation_as_fair_only_when_long_enough() {
        const DAY: i64 = 86_400_000;
        let samples = vec![sample(0, [16, 0], [16, 16]), sample(DAY, [0, 16], [16, 16])];
        let daily = fairness(&samples, 2 * DAY, DAY, &[8.0, 8.0], 16.0);
        assert_eq!(
            (daily.windows, daily.share_error, daily.jain),
            (2, Some(0.5), Some(0.5))
        );
        let two = fairness(&samples, 2 * DAY, 2 * DAY, &[8.0, 8.0], 16.0);
        assert_eq!(
            (two.windows, two.share_error, two.jain),
            (1, Some(0.0), Some(1.0))
        );
    }
}
