//! What the forecast check needs of a replay: to stop before the cycle at an instant, the
//! cluster there with each pod's end, and to go on without arrivals.

use basalt_engine::forecast::{End, Method};

use super::*;

impl Simulator<'_> {
    /// Runs up to the first cycle at or after `t_ms`, leaving that cycle to run next, and
    /// says its instant (`None`: the run ended first). The forecast starts there: a cycle
    /// where the replay runs none could act on what only time changed (a back-off over).
    pub fn run_until(&mut self, t_ms: i64) -> anyhow::Result<Option<i64>> {
        while let Some(&Reverse(ev)) = self.heap.peek() {
            if ev.time >= t_ms && ev.kind == Kind::Cycle {
                self.now = ev.time;
                return Ok(Some(ev.time));
            }
            self.heap.pop();
            self.handle(ev)?;
        }
        Ok(None)
    }

    /// The whole cluster now, pod by pod, and per pod its end: a running job's at its start
    /// plus `runtime`, a waiting job's `runtime` after it starts; none when `runtime` gives
    /// none (or the job never ends).
    pub fn forecast_input(
        &self,
        runtime: impl Fn(usize) -> Option<(i64, Method)>,
    ) -> (ClusterSpec, HashMap<String, End>) {
        let mut ends = HashMap::new();
        for (j, r) in self.records.iter().enumerate() {
            let run = runtime(j).filter(|&(ms, _)| ms < FOREVER);
            let end = match (r.status, run) {
                (Status::Running, Some((ms, method))) => End::At {
                    ms: r.start_ms.unwrap_or(self.now).saturating_add(ms),
                    method,
                },
                (Status::Pending, Some((ms, method))) => End::After { ms, method },
                _ => continue,
            };
            for k in 0..self.workload.jobs[j].pods.len() {
                ends.insert(format!("{NS}/{j:08}-{k}"), end);
            }
        }
        (self.spec(), ends)
    }

    /// Jobs that have not yet started (and never did), by index.
    pub fn never_started(&self) -> Vec<usize> {
        (self.records.iter().enumerate())
            .filter(|(_, r)| r.status == Status::Pending && r.first_start_ms.is_none())
            .map(|(j, _)| j)
            .collect()
    }

    /// Jobs done by now: (index, run time).
    pub fn finished(&self) -> Vec<(usize, i64)> {
        (self.records.iter().enumerate())
            .filter(|(_, r)| r.status == Status::Done)
            .map(|(j, _)| (j, self.workload.jobs[j].duration_ms))
            .collect()
    }

    /// Forgets every arrival still to come: the cluster runs on with what it has.
    pub fn stop_arrivals(&mut self) {
        let events = std::mem::take(&mut self.heap).into_vec();
        let kept = events.into_iter().filter(|e| e.0.kind != Kind::Arrival);
        self.heap = kept.collect();
    }
}

/// The name the forecast gives job `j` (its PodGroup's `namespace/name`).
pub fn job_name(j: usize) -> String {
    format!("{NS}/{j:08}")
}
