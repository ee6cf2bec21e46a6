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
        let cluster_allocatable = snapshot.allocatable_total.clone();
        let node_used_sum = snapshot.used_total.clone();
        let zeros = vec![Resources::zero(dims); snapshot.queues.len()];
        let mut queue_allocated = zeros.clone();
        let mut queue_pending = zeros.clone();
        let mut start_counts = vec![StartCounts::default(); snapshot.jobs.len()];
        // Bound tasks per node, as one list cut at `node_task_start` (counted, then placed).
        let mut node_task_start = vec![0u32; n + 1];
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
                    node_task_start[node.index() + 1] += 1;
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
        // Members holding capacity: the bound ones, to begin with.
        let holding: Vec<u32> = start_counts.iter().map(|c| c.bound).collect();
        let mut lowest_bound_priority: Vec<Option<i32>> = vec![None; snapshot.queues.len()];
        for job in snapshot.jobs.iter().filter(|j| holding[j.id.index()] > 0) {
            let lowest = &mut lowest_bound_priority[job.queue.index()];
            *lowest = Some(lowest.map_or(job.priority, |p| p.min(job.priority)));
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
        for i in 0..n {
            node_task_start[i + 1] += node_task_start[i];
        }
        let mut node_tasks = vec![TaskId(0); node_task_start[n] as usize];
        let mut node_task_kinds = vec![(JobId(0), ShapeId(0)); node_tasks.len()];
        let mut next = node_task_start.clone();
        for (t, status) in snapshot.tasks.iter().zip(&status) {
            if let TaskStatus::Bound(node) = status {
                let at = next[node.index()] as usize;
                (node_tasks[at], node_task_kinds[at]) = (t.id, (t.job, t.shape));
                next[node.index()] += 1;
            }
        }
        let mut queue_nodes: Vec<Vec<NodeId>> = vec![Vec::new(); snapshot.queues.len()];
        for node in 0..n {
            let (from, to) = (node_task_start[node], node_task_start[node + 1]);
            for &t in &node_tasks[from as usize..to as usize] {
                let list = &mut queue_nodes[task_queue[t.index()].index()];
                if list.last() != Some(&NodeId(node as u32)) {
                    list.push(NodeId(node as u32));
                }
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
                    if holding[job.id.index()] == 0
                        && fw.timed_out(job, false, snapshot.now_ms).is_none() =>
                {
                    to_reserve.push(job.id)
                }
                _ => {}
            }
            constrained |= !job.topology.is_empty() || !job.sub_groups.is_empty();
        }
        let with_pending = (start_counts.iter().enumerate())
            .filter(|(_, c)| c.pending > 0)
            .map(|(j, _)| JobId(j as u32))
            .collect();
        let kept = warm
            .as_deref_mut()
            .and_then(|w| w.take_node_state(snapshot));
        let topology = match warm.as_deref_mut() {
            Some(w) => w.topology(snapshot, &fw.tiers, constrained),
            None => snapshot.topology(&fw.tiers, constrained).map(Arc::new),
        };
        let mut session = Session {
            snapshot,
            fw,
            warm,
            used: Vec::new(),
            cluster_used: Resources::zero(dims),
            gpus_used: Vec::new(),
            device_use: snapshot.device_use.clone(),
            slice_used: snapshot.slice_used.clone(),
            placed_slices: Map::default(),
            placed_takes: Map::default(),
            claims: dra::Claims::new(&snapshot.dra),
            status,
            phase,
            unadmitted,
            with_pending,
            placed: vec![0; holding.len()],
            start_counts,
            lowest_bound_priority,
            holding,
            conditions: vec![Vec::new(); snapshot.jobs.len()],
            queue_allocated,
            queue_pending,
            deserved: Vec::new(),
            usage: Vec::new(),
            usage_weights: None,
            inqueue_reserved: Resources::zero(dims),
            queue_reserved: zeros,
            cluster_allocatable,
            queue_capacity: Resources::zero(dims),
            guaranteed: snapshot.queues.iter().any(|q| !q.guarantee.is_empty()),
            node_tasks,
            node_task_kinds,
            node_task_start,
            queue_nodes,
            reserved_for: vec![None; n],
            reservations: Vec::new(),
            holds: Map::default(),
            released_holds: Map::default(),
            any_reserved: false,
            index: FreeIndex {
                class: Vec::new(),
                key: Vec::new(),
                buckets: BTreeMap::new(),
            },
            statics: Map::default(),
            kept_statics: Map::default(),
            released: 0,
            failures: Map::default(),
            room_misses: Map::default(),
            explanations: Map::default(),
            gang_explanations: Map::default(),
            scans: Map::default(),
            quiet: false,
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
            served: vec![0; snapshot.jobs.len()],
            served_count: 0,
            short: vec![false; snapshot.jobs.len()],
            waiting: vec![None; snapshot.jobs.len()],
        };
        let kept_topo = session.start_nodes(kept);
        session.domain_index =
            domains::DomainIndex::new(session.pods.coarse_keys(snapshot.nodes.len()));
        session.topo = topology.map(|t| session.topo_state(t, kept_topo));
        session.cluster_used.add(&node_used_sum);
        for job in to_reserve {
            session.reserve_admission(job, true);
        }
        session.queue_capacity = {
            let mut foreign = node_used_sum;
            foreign.take_back(&ours_bound);
            let mut capacity = session.cluster_allocatable.clone();
            capacity.sub(&foreign);
            capacity
        };
        session.usage = session.usage_now();
        session.usage_weights = (fw.fair_share.as_ref()).and_then(|p| p.weights(&session));
        session.deserved = match &fw.fair_share {
            Some(policy) => policy.deserved(&session),
            // Without a fair-share policy every queue may use the whole cluster.
            None => vec![session.queue_capacity.clone(); snapshot.queues.len()],
        };
        session.prepare_scoring();
        session
    }
}
