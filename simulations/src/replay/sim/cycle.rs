//! One scheduling cycle: the kept specs brought up to date, a snapshot of the waiting jobs
//! (folded) or of the whole cluster, the daemon's scheduling, and whether a folded cycle's plan
//! stands (see the module docs of `sim`).

use super::*;

impl Simulator<'_> {
    /// Brings the kept specs up to date with what changed since the last cycle: each builder
    /// gets the pods and groups of the jobs it shows (the quick one: waiting jobs and pinned
    /// pods; the whole one: every live job), without rebuilding the rest.
    fn refresh(&mut self) {
        for j in std::mem::take(&mut self.dirty_jobs) {
            let live = matches!(
                self.records[j as usize].status,
                Status::Pending | Status::Running
            );
            let waits = self.active.contains(&j);
            let specs = (live || waits).then(|| self.job_specs(j as usize));
            let builders = [(&mut self.quick, waits), (&mut self.whole, live)];
            for (builder, shown) in builders {
                let Some(b) = builder else { continue };
                match (&specs, shown) {
                    (Some(specs), true) => {
                        b.set_group(specs.group.clone());
                        for pod in &specs.pods {
                            b.set_pod(pod.clone());
                        }
                    }
                    _ => {
                        if b.remove_group(NS, &format!("{j:08}")).is_some() {
                            for k in 0..self.prepared[j as usize].requests.len() {
                                b.remove_pod(NS, &format!("{j:08}-{k}"));
                            }
                        }
                    }
                }
            }
        }
        let Some(quick) = &mut self.quick else { return };
        for key in std::mem::take(&mut self.dirty_pinned) {
            match self.pinned.get(&key) {
                Some(pinned) => {
                    let queue_name = &self.workload.queues[key.queue as usize].name;
                    let node_name = &self.nodes[key.node as usize].name;
                    quick.set_pod(pinned_pod(key, queue_name, node_name, pinned));
                }
                None => {
                    quick.remove_pod(HOLDER_NS, &holder_name(key));
                }
            }
        }
    }

    pub(super) fn cycle(&mut self) -> anyhow::Result<()> {
        if self.active.is_empty() {
            return Ok(());
        }
        self.cycles += 1;
        let now = self.now;
        let failed = |e: basalt_engine::SnapshotError| anyhow::anyhow!("cycle at {now} ms: {e}");
        if self.opts.full_rebuild {
            let t0 = std::time::Instant::now();
            let snapshot = Snapshot::build(self.spec()).map_err(failed)?;
            let plan = (self.stats).schedule(&mut self.framework, self.config, &snapshot, t0);
            return self.apply(plan);
        }
        self.refresh();
        let skip = self.whole.is_some() && self.quick_skip > 0;
        self.quick_skip = self.quick_skip.saturating_sub(1);
        if let Some(quick) = self.quick.as_mut().filter(|_| !skip) {
            let t0 = std::time::Instant::now();
            let snapshot = quick.build(now, &self.queues).map_err(failed)?;
            let with_dra = self.dra.as_mut().map(|d| d.attach(snapshot));
            let snapshot = with_dra.as_ref().unwrap_or(snapshot);
            let plan = (self.stats).schedule(&mut self.framework, self.config, snapshot, t0);
            if self.whole.is_none() || quick_plan_stands(&self.framework, snapshot, &plan) {
                self.quick_backoff = 0;
                return self.apply(plan);
            }
            self.redone += 1;
            self.quick_backoff = (self.quick_backoff * 2).clamp(1, 64);
            self.quick_skip = self.quick_backoff;
        }
        let Some(whole) = &mut self.whole else {
            anyhow::bail!("cycle at {now} ms: no builder for the whole cluster");
        };
        let t0 = std::time::Instant::now();
        let snapshot = whole.build(now, &self.queues).map_err(failed)?;
        let with_dra = self.dra.as_mut().map(|d| d.attach(snapshot));
        let snapshot = with_dra.as_ref().unwrap_or(snapshot);
        let plan = (self.stats).schedule(&mut self.framework, self.config, snapshot, t0);
        self.apply(plan)
    }
}

/// Wall-clock time spent building snapshots and scheduling them, and their sizes.
#[derive(Default)]
pub(super) struct CycleStats {
    pub(super) snapshot_s: f64,
    pub(super) schedule_s: f64,
    pub(super) tasks: u64,
    pub(super) jobs: u64,
}

impl CycleStats {
    /// The daemon's `basalt_plugins::schedule` on a snapshot built since `t0`, with the
    /// framework kept while the resource names stay and without what a replay does not read
    /// (the queue report, the per-node reasons, settled groups).
    fn schedule(
        &mut self,
        framework: &mut Option<(basalt_engine::ResourceNames, basalt_engine::Framework)>,
        config: &Config,
        snapshot: &Snapshot,
        t0: std::time::Instant,
    ) -> basalt_engine::Plan {
        let t1 = std::time::Instant::now();
        if (framework.as_ref()).is_some_and(|(names, _)| *names != snapshot.resources) {
            *framework = None;
        }
        let (_, fw) = framework.get_or_insert_with(|| {
            let mut fw = basalt_plugins::framework(config, &snapshot.resources);
            fw.report_queues = false;
            fw.explain_failures = false;
            fw.report_settled_groups = false;
            (snapshot.resources.clone(), fw)
        });
        let plan = basalt_engine::schedule(snapshot, fw);
        self.snapshot_s += (t1 - t0).as_secs_f64();
        self.schedule_s += t1.elapsed().as_secs_f64();
        self.tasks += snapshot.tasks.len() as u64;
        self.jobs += snapshot.jobs.len() as u64;
        plan
    }
}

/// Whether the plan of a quick snapshot is the plan of the whole cluster (see the module
/// docs): no gang has waited long enough to reserve nodes, every pending pod is placed,
/// nothing is evicted or nominated.
fn quick_plan_stands(
    framework: &Option<(basalt_engine::ResourceNames, basalt_engine::Framework)>,
    snapshot: &Snapshot,
    plan: &basalt_engine::Plan,
) -> bool {
    let reserving = (framework.as_ref()).is_some_and(|(_, fw)| {
        (snapshot.jobs.iter()).any(|j| fw.waited_to_reserve(j, snapshot.now_ms))
    });
    let pending = (snapshot.tasks.iter())
        .filter(|t| t.state == basalt_engine::TaskState::Pending)
        .count();
    !reserving
        && plan.evictions.is_empty()
        && plan.nominations.is_empty()
        && plan.bindings.len() == pending
}
