//! A cycle's plan carried out on the simulated cluster: evictions, nominations and bindings;
//! jobs starting (with their placement's locality), settling and evicted.

use super::*;

impl Simulator<'_> {
    /// Carries a cycle's plan out: evictions, nominations, bindings, phases.
    pub(super) fn apply(&mut self, mut plan: basalt_engine::Plan) -> anyhow::Result<()> {
        let now = self.now;
        // With a half-life the plan reports each queue's usage, recorded once it is applied.
        let statuses = match plan.usage.is_empty() {
            true => None,
            false => Some(std::mem::take(&mut plan.queues)),
        };
        if !plan.usage.is_empty() {
            self.usage = plan.usage.clone();
        }
        let mut changed = false;
        for e in &plan.evictions {
            let Some((job, _)) = parse_pod(&e.pod) else {
                anyhow::bail!(
                    "cycle at {now} ms: the plan evicts {}, not a pod of a job",
                    e.pod
                );
            };
            if self.records[job as usize].status == Status::Running
                || self.state[job as usize].bound > 0
            {
                self.evict(job);
                changed = true;
            }
        }
        for n in &plan.nominations {
            if n.reason != basalt_engine::NominationReason::Evictions {
                continue;
            }
            let (Some((job, k)), Some(&node)) = (parse_pod(&n.pod), self.node_ids.get(&n.node))
            else {
                continue;
            };
            let slot = &mut self.state[job as usize].nominated[k];
            if *slot != Some(node) {
                *slot = Some(node);
                self.dirty_jobs.insert(job);
                changed = true;
            }
        }
        let mut touched = BTreeSet::new();
        let mut claimed = match &self.dra {
            Some(d) => d.allocations(&plan.claim_allocations)?,
            None => Default::default(),
        };
        for b in &plan.bindings {
            let (job, k) = parse_pod(&b.pod)
                .ok_or_else(|| anyhow::anyhow!("plan binds unknown pod {}", b.pod))?;
            let node = *self
                .node_ids
                .get(&b.node)
                .ok_or_else(|| anyhow::anyhow!("plan binds to unknown node {}", b.node))?;
            let j = job as usize;
            anyhow::ensure!(
                self.state[j].pods[k].is_none(),
                "plan binds {} twice",
                b.pod
            );
            let g = self.prepared[j].gpus[k];
            let held = match &mut self.dra {
                // The claim's devices, by GPU index (the node has no `nvidia.com/gpu`).
                Some(dra) if g > 0 => {
                    let devices = claimed.remove(&b.pod).unwrap_or_default();
                    let gpus = dra.take((job, k as u32), node, g, devices)?;
                    self.devices.held(node, &gpus, &[])
                }
                _ => self.devices.held(node, &b.gpus, &b.devices),
            };
            let in_use = self.devices.charge(node, &held, true);
            // On a node that shares its devices GPUs allocated are the devices some pod holds.
            let shares = self.devices.shares(node);
            self.take_gpus(node, if shares { in_use } else { g as i64 });
            self.queue_gpus[self.prepared[j].queue as usize] += g;
            self.milli_used += self.workload.jobs[j].pods[k].gpu_demand_milli();
            let named = !b.devices.is_empty() && b.devices.iter().all(|d| d.uuid.is_some());
            let held_devices = match shares && named {
                true => (b.devices.iter())
                    .map(|d| HeldDevice {
                        uuid: d.uuid.clone().unwrap_or_default(),
                        memory_mib: d.memory_mib.unwrap_or(0),
                        cores: d.cores.unwrap_or(0),
                    })
                    .collect(),
                false => Vec::new(),
            };
            self.state[j].pods[k] = Some(Placement {
                node,
                gpu_ids: b.gpus.clone(),
                held,
                held_devices,
            });
            self.state[j].bound += 1;
            self.state[j].nominated[k] = None;
            self.bindings += 1;
            self.dirty_jobs.insert(job);
            touched.insert(job);
            changed = true;
        }
        if let Some(pod) = claimed.keys().next() {
            anyhow::bail!(
                "cycle at {now} ms: the plan allocates claims of {pod}, which it does not bind"
            );
        }
        if let Some(dra) = self.dra.as_ref().filter(|_| cfg!(debug_assertions)) {
            let pods = |j: u32, k: u32| self.state[j as usize].pods.get(k as usize)?.as_ref();
            let gpus = |j: u32, k: u32| self.prepared[j as usize].gpus[k as usize];
            let placed_gpu_pods = (self.state.iter().enumerate())
                .flat_map(|(j, s)| (s.pods.iter().enumerate()).map(move |(k, p)| (j, k, p)))
                .filter(|&(j, k, p)| p.is_some() && gpus(j as u32, k as u32) > 0)
                .count();
            let check = dra.consistent(|j, k| pods(j, k).map(|p| p.node), gpus, placed_gpu_pods);
            if let Err(e) = check {
                anyhow::bail!("cycle at {now} ms: DRA devices: {e}");
            }
        }
        for g in &plan.pod_groups {
            let Some(rest) = g.name.strip_prefix("sim/") else {
                continue;
            };
            let Ok(job) = rest.parse::<usize>() else {
                continue;
            };
            if job < self.state.len() && self.state[job].phase != g.phase {
                self.state[job].phase = g.phase;
                self.dirty_jobs.insert(job as u32);
                changed = true;
            }
        }
        for job in touched {
            self.settle(job);
        }
        if changed && !self.active.is_empty() {
            self.want_cycle(true);
        }
        if let Some(statuses) = statuses {
            self.record_usage(&statuses);
        }
        Ok(())
    }

    /// After bindings: start a job whose gang is complete; fold a job with every pod placed.
    fn settle(&mut self, job: u32) {
        let j = job as usize;
        let bound = self.state[j].bound;
        if self.records[j].status == Status::Pending && bound >= self.prepared[j].min_member {
            self.start(job);
        }
        if bound as usize == self.state[j].pods.len() {
            self.active.remove(&job);
            if self.quick.is_some() {
                let queue = self.prepared[j].queue;
                for (k, pl) in self.state[j].pods.iter().enumerate() {
                    let pl = pl.as_ref().expect("all placed");
                    let key = self.pin_key(queue, j, k, pl.node);
                    let e = self.pinned.entry(key).or_default();
                    for (r, v) in &self.prepared[j].requests[k] {
                        *e.request.entry(r.clone()).or_default() += v;
                    }
                    for &i in &pl.gpu_ids {
                        e.mask |= 1u64 << i;
                    }
                    e.count += 1;
                    if key.pod.is_some() {
                        e.held_devices = pl.held_devices.clone();
                    }
                    self.dirty_pinned.insert(key);
                }
                self.state[j].folded = true;
            }
        }
    }

    fn start(&mut self, job: u32) {
        let j = job as usize;
        self.pending -= 1;
        self.running += 1;
        self.state[j].phase = JobPhase::Running;
        self.dirty_jobs.insert(job);
        let locality = self.locality(j);
        let r = &mut self.records[j];
        r.status = Status::Running;
        r.start_ms = Some(self.now);
        r.first_start_ms.get_or_insert(self.now);
        (r.one_rack, r.tp_groups, r.tp_in_node, r.tp_in_nvlink) = locality;
        let duration = self.workload.jobs[j].duration_ms;
        if duration < FOREVER {
            let epoch = self.state[j].epoch;
            self.push(
                self.now.saturating_add(duration),
                Kind::Completion,
                job,
                epoch,
            );
        }
    }

    fn locality(&self, j: usize) -> (Option<bool>, u32, u32, u32) {
        let placed: Vec<(u32, u32)> = self.state[j]
            .pods
            .iter()
            .enumerate()
            .filter_map(|(k, p)| p.as_ref().map(|p| (p.node, self.prepared[j].gpus[k])))
            .collect();
        let one_rack =
            (placed.len() > 1 && self.node_rack.iter().any(Option::is_some)).then(|| {
                let first = self.node_rack[placed[0].0 as usize];
                first.is_some()
                    && placed
                        .iter()
                        .all(|&(n, _)| self.node_rack[n as usize] == first)
            });
        let tp = self.workload.jobs[j].tp_size;
        let (mut groups, mut in_node, mut in_nvlink) = (0, 0, 0);
        if tp > 0 {
            // The job's GPUs in pod order, chunked into TP groups.
            let gpus: Vec<u32> = placed
                .iter()
                .flat_map(|&(n, g)| std::iter::repeat_n(n, g as usize))
                .collect();
            for chunk in gpus.chunks(tp as usize) {
                groups += 1;
                if chunk.iter().all(|&n| n == chunk[0]) {
                    in_node += 1;
                    in_nvlink += 1;
                } else {
                    let c = self.node_clique[chunk[0] as usize];
                    if c.is_some() && chunk.iter().all(|&n| self.node_clique[n as usize] == c) {
                        in_nvlink += 1;
                    }
                }
            }
        }
        (one_rack, groups, in_node, in_nvlink)
    }

    /// An evicted job returns to pending and loses the work done since it started.
    fn evict(&mut self, job: u32) {
        let j = job as usize;
        let was_running = self.records[j].status == Status::Running;
        if was_running {
            let started = self.records[j].start_ms.unwrap_or(self.now);
            let r = &mut self.records[j];
            r.evictions += 1;
            r.lost_gpu_ms += self.prepared[j].total_gpus as i64 * (self.now - started);
            r.status = Status::Pending;
            r.start_ms = None;
            self.running -= 1;
            self.pending += 1;
        }
        self.release(job);
        self.state[j].nominated.iter_mut().for_each(|n| *n = None);
        self.state[j].epoch += 1;
        self.state[j].phase = JobPhase::Pending;
        self.active.insert(job);
        self.dirty_jobs.insert(job);
    }
}
