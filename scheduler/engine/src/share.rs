//! Dominant share as an exact fraction, so queue order never depends on float rounding.

use std::cmp::Ordering;

use crate::resources::{ResourceId, Resources};

/// `allocated / deserved` in the dimension where that ratio is largest. Holding something with
/// nothing deserved is an infinite share; holding nothing is zero.
#[derive(Clone, Copy, Debug)]
pub struct Share {
    num: i64,
    den: i64,
}

impl Share {
    pub const ZERO: Share = Share { num: 0, den: 1 };

    pub fn dominant(allocated: &Resources, deserved: &Resources) -> Share {
        allocated
            .iter()
            .filter(|&(_, a)| a > 0)
            .map(|(id, a)| Share {
                num: a,
                den: deserved.get(id).max(0),
            })
            .max()
            .unwrap_or(Share::ZERO)
    }

    /// The dominant share over the resources the queue deserves some of: finite, for reports.
    /// What is held with nothing deserved is named apart (see [`Share::undeserved`]).
    pub fn of_deserved(allocated: &Resources, deserved: &Resources) -> Share {
        allocated
            .iter()
            .filter(|&(id, a)| a > 0 && deserved.get(id) > 0)
            .map(|(id, a)| Share {
                num: a,
                den: deserved.get(id),
            })
            .max()
            .unwrap_or(Share::ZERO)
    }

    /// The resources held with nothing deserved: each makes the share infinite.
    pub fn undeserved<'r>(
        allocated: &'r Resources,
        deserved: &'r Resources,
    ) -> impl Iterator<Item = ResourceId> + 'r {
        (allocated.iter())
            .filter(|&(id, a)| a > 0 && deserved.get(id) <= 0)
            .map(|(id, _)| id)
    }

    pub fn is_infinite(self) -> bool {
        self.den == 0 && self.num > 0
    }

    /// For reports only; decisions compare exactly. Finite except for an infinite share,
    /// which reports take from [`Share::of_deserved`] and [`Share::undeserved`] instead.
    pub fn as_f64(self) -> f64 {
        if self.den == 0 {
            if self.num > 0 {
                f64::INFINITY
            } else {
                0.0
            }
        } else {
            self.num as f64 / self.den as f64
        }
    }
}

impl PartialEq for Share {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Share {}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.is_infinite(), other.is_infinite()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => {
                (self.num as i128 * other.den as i128).cmp(&(other.num as i128 * self.den as i128))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CPU, GPU};

    fn r(cpu: i64, gpu: i64) -> Resources {
        let mut x = Resources::zero(4);
        x.set(CPU, cpu);
        x.set(GPU, gpu);
        x
    }

    #[test]
    fn dominant_dimension_wins() {
        let s = Share::dominant(&r(1000, 6), &r(4000, 8));
        assert_eq!(s.as_f64(), 0.75);
        assert!(Share::dominant(&r(0, 1), &r(4000, 0)).is_infinite());
        assert_eq!(Share::dominant(&r(0, 0), &r(0, 0)), Share::ZERO);
        assert!(Share::dominant(&r(1000, 0), &r(2000, 0)) < Share::dominant(&r(0, 3), &r(0, 4)));
    }

    /// Holding GPUs with none deserved is an infinite share in queue order; reports give the
    /// finite share of the rest and name the GPUs, never `inf`.
    #[test]
    fn reports_stay_finite() {
        let (held, deserved) = (r(1000, 2), r(4000, 0));
        assert!(Share::dominant(&held, &deserved).is_infinite());
        assert_eq!(Share::of_deserved(&held, &deserved).as_f64(), 0.25);
        assert_eq!(
            Share::undeserved(&held, &deserved).collect::<Vec<_>>(),
            vec![GPU]
        );
        let huge = r(i64::MAX, i64::MAX);
        assert_eq!(Share::of_deserved(&huge, &r(0, 0)).as_f64(), 0.0);
        assert!(Share::of_deserved(&huge, &r(1, 1)).as_f64().is_finite());
        assert_eq!(Share::undeserved(&r(0, 0), &r(0, 0)).count(), 0);
    }
}
