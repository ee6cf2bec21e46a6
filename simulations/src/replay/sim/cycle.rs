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
            let kept = &mut self.framework;
            let plan = (self.stats).schedule(kept, self.config, &snapshot, Source::Whole, t0);
            return self.apply(plan);
        }
        self.refresh();
        let skip = self.whole.is_some() && self.quick_skip > 0;
        self.quick_skip = self.quick_skip.saturating_sub(1);
        if let Some(quick) = self.quick.as_mut().filter(|_| !skip) {
            let t0 = std::time::Instant::now();
            quick.set_usage(self.usage.clone());
            let snapshot = quick.build(now, &self.queues).map_err(failed)?;
            let with_dra = self.dra.as_mut().map(|d| d.attach(snapshot));
            let snapshot = with_dra.as_ref().unwrap_or(snapshot);
            let kept = &mut self.framework;
            let plan = (self.stats).schedule(kept, self.config, snapshot, Source::Quick, t0);
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
        whole.set_usage(self.usage.clone());
        let snapshot = whole.build(now, &self.queues).map_err(failed)?;
        let with_dra = self.dra.as_mut().map(|d| d.attach(snapshot));
        let snapshot = with_dra.as_ref().unwrap_or(snapshot);
        let kept = &mut self.framework;
        let plan = (self.stats).schedule(kept, self.config, snapshot, Source::Whole, t0);
        self.apply(plan)
    }
}

/// The framework a replay schedules with, kept while the resource names stay the same, and
/// what its cycles carry (see `basalt_engine::Warm`): one Warm per builder, as the quick and
/// the whole cluster's builders take turns. A new framework comes with new Warms.
pub(super) struct KeptFramework {
    names: basalt_engine::ResourceNames,
    fw: basalt_engine::Framework,
    quick: basalt_engine::Warm,
    whole: basalt_engine::Warm,
}

/// Which builder a snapshot comes from (a whole build every cycle counts as the whole
/// cluster's: its Warm is cold then, as each snapshot is of nodes of its own).
#[derive(Clone, Copy)]
enum Source {
    Quick,
    Whole,
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
    /// The daemon's `basalt_plugins::schedule` on a snapshot of `source` built since `t0`,
    /// with the framework kept while the resource names stay and without what a replay does
    /// not read (the queue report, the per-node reasons, settled groups).
    fn schedule(
        &mut self,
        framework: &mut Option<KeptFramework>,
        config: &Config,
        snapshot: &Snapshot,
        source: Source,
        t0: std::time::Instant,
    ) -> basalt_engine::Plan {
        let t1 = std::time::Instant::now();
        if (framework.as_ref()).is_some_and(|kept| kept.names != snapshot.resources) {
            *framework = None;
        }
        let kept = framework.get_or_insert_with(|| {
            let mut fw = basalt_plugins::framework(config, &snapshot.resources);
            // Queue statuses only carry what the report shows of usage (with a half-life).
            fw.report_queues = fw.usage_half_life_ms > 0;
            fw.explain_failures = false;
            fw.report_settled_groups = false;
            KeptFramework {
                names: snapshot.resources.clone(),
                fw,
                quick: Default::default(),
                whole: Default::default(),
            }
        });
        let warm = match source {
            Source::Quick => &mut kept.quick,
            Source::Whole => &mut kept.whole,
        };
        let plan = basalt_engine::schedule(snapshot, &kept.fw, warm);
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
    framework: &Option<KeptFramework>,
    snapshot: &Snapshot,
    plan: &basalt_engine::Plan,
) -> bool {
    let reserving = (framework.as_ref()).is_some_and(|kept| {
        (snapshot.jobs.iter()).any(|j| kept.fw.waited_to_reserve(j, snapshot.now_ms))
    });
    let pending = (snapshot.tasks.iter())
        .filter(|t| t.state == basalt_engine::TaskState::Pending)
        .count();
    !reserving
        && plan.evictions.is_empty()
        && plan.nominations.is_empty()
        && plan.bindings.len() == pending
}
