//! From per-arrival samples to the reported curve.
//!
//! After every arrival the run records the arrived GPU demand (failed pods included) and the
//! allocated GPU, both in milli. An arrival's arrived % is `100 · arrived / capacity` rounded to
//! the nearest whole number (halves up). The value at x % is the mean allocated % over the
//! arrivals whose arrived % rounds to x; unallocated % = 100 − that.
//!
//! A bin with no arrival in it (a single large pod can jump a whole percent on a small cluster;
//! this does not happen on the full openb lists) takes the allocation as the load passed x: the
//! state after the last arrival below the bin, or nothing allocated when there is none. Such bins
//! are counted in [`Curve::carried`] so the caller can say so.

/// The reported arrived-load points: 5, 10, …, 130 %.
pub const POINTS: [u32; 26] = {
    let mut p = [0u32; 26];
    let mut i = 0;
    while i < 26 {
        p[i] = 5 * (i as u32 + 1);
        i += 1;
    }
    p
};

/// The samples of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trajectory {
    pub capacity_milli: u64,
    /// `(arrived, allocated)` in milli after each arrival, in arrival order.
    pub samples: Vec<(u64, u64)>,
}

/// Unallocated GPU % at every point of [`POINTS`] for one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    pub unallocated_pct: Vec<f64>,
    /// Points whose bin held no arrival (carried from the previous state).
    pub carried: usize,
}

/// `round(100 · a / c)` with halves up, exactly.
pub fn rounded_pct(a: u64, c: u64) -> u64 {
    ((200 * a as u128 + c as u128) / (2 * c as u128)) as u64
}

pub fn curve(t: &Trajectory) -> Curve {
    let c = t.capacity_milli.max(1);
    let mut sum = [0u128; POINTS.len()];
    let mut count = [0u64; POINTS.len()];
    // Allocation after the last arrival whose arrived % rounds below each point.
    let mut before = [0u64; POINTS.len()];
    for &(a, alloc) in &t.samples {
        let r = rounded_pct(a, c);
        for (i, &x) in POINTS.iter().enumerate() {
            if r < x as u64 {
                before[i] = alloc;
            } else if r == x as u64 {
                sum[i] += alloc as u128;
                count[i] += 1;
            }
        }
    }
    let mut carried = 0;
    let unallocated_pct = (0..POINTS.len())
        .map(|i| {
            let alloc = if count[i] > 0 {
                sum[i] as f64 / count[i] as f64
            } else {
                carried += 1;
                before[i] as f64
            };
            100.0 - 100.0 * alloc / c as f64
        })
        .collect();
    Curve {
        unallocated_pct,
        carried,
    }
}

/// The median (mean of the two middle values for an even count). `values` must not be empty.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_every_five_percent() {
        assert_eq!(POINTS[0], 5);
        assert_eq!(POINTS[19], 100);
        assert_eq!(POINTS[25], 130);
    }

    #[test]
    fn rounding_is_half_up() {
        // 1000 capacity: 4.5 % → 5, 4.4 % → 4, 5.49 % → 5, 5.5 % → 6.
        assert_eq!(rounded_pct(45, 1000), 5);
        assert_eq!(rounded_pct(44, 1000), 4);
        assert_eq!(rounded_pct(549, 10_000), 5);
        assert_eq!(rounded_pct(55, 1000), 6);
    }

    #[test]
    fn bins_average_the_arrivals_that_round_to_the_point() {
        // Capacity 1000 milli. Arrivals at 4.6 %, 5.0 %, 5.4 % (allocations 40, 46, 52) round to
        // 5: mean 46 milli = 4.6 % → unallocated 95.4. 5.5 % rounds to 6, outside every point.
        // 10 %: one arrival at 9.7 % with 60 allocated → 6 % → unallocated 94.
        let t = Trajectory {
            capacity_milli: 1000,
            samples: vec![(46, 40), (50, 46), (54, 52), (55, 55), (97, 60)],
        };
        let c = curve(&t);
        assert!((c.unallocated_pct[0] - 95.4).abs() < 1e-9);
        assert!((c.unallocated_pct[1] - 94.0).abs() < 1e-9);
        // 15 % and beyond had no arrival: carried from the last state (60 milli → 94 %).
        assert!((c.unallocated_pct[2] - 94.0).abs() < 1e-9);
        assert_eq!(c.carried, 24);
    }

    #[test]
    fn empty_bin_before_any_arrival_means_nothing_allocated() {
        let t = Trajectory {
            capacity_milli: 1000,
            samples: vec![(100, 100)],
        };
        let c = curve(&t);
        assert_eq!(c.unallocated_pct[0], 100.0);
        assert_eq!(c.unallocated_pct[1], 90.0);
    }

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
