//! Opening a session: its working state from the snapshot (or from what `Warm` carries), the
//! holds of nominated pods, the free-node index and the topology's free capacity.

use super::*;

impl<'a> Session<'a> {
    /// A session that starts afresh and hands nothing on.
    pub fn new(snapshot: &'a Snapshot, fw: &'a Framework) -> Self {
        Self::open(snapshot, fw, None)
    }

    /// A session that starts from what `warm` carries, when it fits `snapshot`, and leaves its
    /// own node state there when it ends ([`Session::into_plan`]). Decides exactly as
    /// [`Session::new`] does.
    pub fn with_warm(snapshot: &'a Snapshot, fw: &'a Framework, warm: &'a mut Warm) -> Self {
        Self::open(snapshot, fw, Some(warm))
    }

    pub(super) fn open(
        snapshot: &'a Snapshot,
        fw: &'a Framework,
        mut warm: Option<&'a mut Warm>,
    ) -> Self {
        let n = snapshot.nodes.len();
        let dims = snapshot.resources.len();
        let zeros = vec![Resources::zero(dims); snapshot.queues.len()];
        let mut queue_allocated = zeros.clone();
        let mut queue_pending = zeros;
        let mut start_counts = vec![jobs::StartCounts::default(); snapshot.jobs.len()];
        let mut status = Vec::with_capacity(snapshot.tasks.len());
        // Per task, its job's (leaf) queue: tasks mostly follow their job, so look it up once
        // per run of a job's tasks.
        let mut task_queue: Vec<QueueId> = Vec::with_capacity(snapshot.tasks.len());
        let mut last_job: Option<(JobId, QueueId)> = None;
        // Requests are summed per leaf queue here and into the leaves' ancestors below.
        for t in &snapshot.tasks {
            let queue = match last_job {
                Some((job, queue)) if job == t.job => queue,
                _ => snapshot.job(t.job).queue,
            };
            last_job = Some((t.job, queue));
            task_queue.push(queue);
            let counts = &mut start_counts[t.job.index()];
            status.push(match t.state {
                TaskState::Pending => {
                    // A held pod is no demand its queue could use this cycle.
                    if t.hold.is_none() {
                        queue_pending[queue.index()].add(&t.request);
                    }
                    counts.pending += 1;
                    TaskStatus::Pending
                }
                TaskState::Bound(node) => {
                    queue_allocated[queue.index()].add(&t.request);
                    counts.bound += 1;
                    TaskStatus::Bound(node)
                }
                TaskState::Succeeded => {
                    counts.succeeded += 1;
                    TaskStatus::Succeeded
                }
                TaskState::Failed => {
                    counts.failed += 1;
                    TaskStatus::Failed
                }
            });
        }
        for (held, pinned) in queue_allocated.iter_mut().zip(&snapshot.queue_pinned) {
            held.add(pinned);
        }
        // Bound requests of our pods (the rest of the nodes' usage is other schedulers').
        let mut ours_bound = Resources::zero(dims);
        for q in &snapshot.queues {
            ours_bound.add(&queue_allocated[q.id.index()]);
        }
        // Only leaves hold jobs: what each leaf holds goes up to every ancestor.
        let (own_pending, own_allocated) = (queue_pending.clone(), queue_allocated.clone());
        for q in &snapshot.queues {
            for a in ancestors(snapshot, q.id).skip(1) {
                queue_pending[a.index()].add(&own_pending[q.id.index()]);
                queue_allocated[a.index()].add(&own_allocated[q.id.index()]);
            }
        }
        // One pass over the jobs for what the session keeps of them.
        let mut phase = Vec::with_capacity(snapshot.jobs.len());
        let (mut unadmitted, mut to_reserve) = (Vec::new(), Vec::new());
        let mut constrained = false;
        for job in &snapshot.jobs {
            phase.push(job.phase);
            match job.phase {
                JobPhase::Pending => unadmitted.push(job.id),
                // A gang backing off after its schedule timeout reserves nothing.
                JobPhase::Inqueue
                    if start_counts[job.id.index()].bound == 0
                        && fw.timed_out(job, false, snapshot.now_ms).is_none() =>
                {
                    to_reserve.push(job.id)
                }
                _ => {}
            }
            constrained |= !job.topology.is_empty() || !job.sub_groups.is_empty();
        }
        let kept = warm
            .as_deref_mut()
            .and_then(|w| w.take_node_state(snapshot));
        let topology = match warm.as_deref_mut() {
            Some(w) => w.topology(snapshot, &fw.tiers, constrained),
            None => snapshot.topology(&fw.tiers, constrained).map(Arc::new),
        };
        let bound = bound::Bound::new(snapshot, &status, &task_queue, |j| {
            start_counts[j.index()].bound
        });
        let mut session = Session {
            snapshot,
            fw,
            warm,
            capacity: capacity::Capacity::new(snapshot),
            queues: queues::Queues::new(snapshot, queue_allocated, queue_pending, &ours_bound),
            jobs: jobs::Jobs::new(status, start_counts, phase, unadmitted),
            bound,
            refusals: refusals::Refusals::default(),
            notes: wait_notes::WaitNotes::new(snapshot.jobs.len()),
            reservations: reservations::Reservations::new(n),
            index: FreeIndex {
                class: Vec::new(),
                key: Vec::new(),
                buckets: BTreeMap::new(),
            },
            statics: Map::default(),
            kept_statics: Map::default(),
            committed: Vec::new(),
            changes: changes::Changes::default(),
            topo: None,
            pods: InterPod::new(snapshot),
            domain_index: domains::DomainIndex::default(),
            preference_cache: prefer::PreferenceCache::default(),
            charges: 0,
            able: None,
            scorers: Vec::new(),
            chooser: None,
            scored_tasks: 0,
            classes: None,
        };
        let kept_topo = session.start_nodes(kept);
        session.domain_index =
            domains::DomainIndex::new(session.pods.coarse_keys(snapshot.nodes.len()));
        session.topo = topology.map(|t| session.topo_state(t, kept_topo));
        session.capacity.count_in_cluster(&snapshot.used_total);
        for job in to_reserve {
            session.reserve_admission(job, true);
        }
        let usage = session.usage_now();
        session.queues.set_usage(usage);
        let weights = (fw.fair_share.as_ref()).and_then(|p| p.weights(&session.view()));
        session.queues.set_weights(weights);
        let deserved = match &fw.fair_share {
            Some(policy) => policy.deserved(&session.view()),
            // Without a fair-share policy every queue may use the whole cluster.
            None => vec![session.queue_capacity(); snapshot.queues.len()],
        };
        session.queues.set_deserved(deserved);
        session.prepare_scoring();
        session
    }
}
