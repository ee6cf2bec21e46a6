//! Queue invariants on random clusters with a queue tree, running and pending gangs, under the
//! default actions (enqueue, allocate, reclaim, preempt).

use std::collections::{BTreeMap, HashMap};

use basalt_engine::{
    ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodPhase, PodSpec, QueueSpec, ResourceList,
    Session, Snapshot,
};
use basalt_plugins::{framework, schedule, Config};
use proptest::prelude::*;

fn list(cpu: i64, gpu: i64) -> ResourceList {
    let mut l = ResourceList::from([("cpu".to_string(), cpu), ("memory".to_string(), 1 << 30)]);
    if gpu > 0 {
        l.insert("nvidia.com/gpu".into(), gpu);
    }
    l
}

#[derive(Clone, Debug)]
struct Q {
    weight: u32,
    parent: Option<usize>,
    cap_gpu: Option<i64>,
    guarantee_gpu: Option<i64>,
    reclaimable: bool,
}

#[derive(Clone, Debug)]
struct G {
    queue: usize,
    pods: usize,
    min: usize,
    gpu: i64,
    priority: i32,
    running: bool,
    protected: bool,
}

fn queues() -> impl Strategy<Value = Vec<Q>> {
    prop::collection::vec(
        (
            1..=4u32,
            prop::option::of(0..=1usize),
            prop::option::of(2..=16i64),
            prop::option::of(1..=6i64),
            any::<bool>(),
        ),
        2..=5,
    )
    .prop_map(|qs| {
        qs.into_iter()
            .enumerate()
            .map(|(i, (weight, parent, cap, guarantee, reclaimable))| Q {
                weight,
                // Queues 0 and 1 are top level; later ones may hang below them.
                parent: if i >= 2 { parent } else { None },
                cap_gpu: cap,
                guarantee_gpu: guarantee,
                reclaimable,
            })
            .collect()
    })
}

fn gangs() -> impl Strategy<Value = Vec<G>> {
    prop::collection::vec(
        (
            0..5usize,
            1..=4usize,
            1..=4usize,
            1..=4i64,
            -2..=2i32,
            any::<bool>(),
            prop::bool::weighted(0.15),
        ),
        1..=8,
    )
    .prop_map(|gs| {
        gs.into_iter()
            .map(|(queue, pods, min, gpu, priority, running, protected)| G {
                queue,
                pods,
                min: min.min(pods),
                gpu,
                priority,
                running,
                protected,
            })
            .collect()
    })
}

/// Leaf queues: those without children.
fn leaves(qs: &[Q]) -> Vec<usize> {
    (0..qs.len())
        .filter(|&i| !qs.iter().any(|q| q.parent == Some(i)))
        .collect()
}

fn cluster(nodes: usize, qs: &[Q], gs: &[G]) -> ClusterSpec {
    let mut spec = ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        now_ms: 10_000_000,
        nodes: (0..nodes)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                allocatable: list(32_000, 8),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    for (i, q) in qs.iter().enumerate() {
        spec.queues.push(QueueSpec {
            parent: q.parent.map(|p| format!("q{p}")),
            weight: q.weight,
            capability: q
                .cap_gpu
                .map(|c| ResourceList::from([("nvidia.com/gpu".to_string(), c)])),
            guarantee: q
                .guarantee_gpu
                .map(|c| ResourceList::from([("nvidia.com/gpu".to_string(), c)])),
            reclaimable: q.reclaimable,
            ..QueueSpec::new(format!("q{i}"))
        });
    }
    let leaves = leaves(qs);
    // Running gangs are placed first-fit within node capacity and their queue's capability.
    let mut free = vec![8i64; nodes];
    let mut held: HashMap<usize, i64> = HashMap::new();
    let chain = |q: usize| std::iter::successors(Some(q), |&q| qs[q].parent);
    for (g, gang) in gs.iter().enumerate() {
        let queue = leaves[gang.queue % leaves.len()];
        let name = format!("g{g}");
        spec.groups.push(GroupSpec {
            namespace: "ns".into(),
            name: name.clone(),
            queue: Some(format!("q{queue}")),
            min_member: gang.min as i64,
            min_task_member: BTreeMap::new(),
            min_resources: None,
            priority: Some(gang.priority),
            created_ms: 1 + g as i64,
            phase: if gang.running {
                JobPhase::Running
            } else {
                JobPhase::Inqueue
            },
            topology: Default::default(),
            sub_groups: Vec::new(),
            schedule_timeout_ms: None,
        });
        let mut placed: Vec<Option<usize>> = vec![None; gang.pods];
        if gang.running {
            let total = gang.gpu * gang.pods as i64;
            let room = chain(queue).all(|q| {
                qs[q]
                    .cap_gpu
                    .is_none_or(|c| held.get(&q).copied().unwrap_or(0) + total <= c)
            });
            let mut trial = free.clone();
            let mut ok = room;
            for slot in placed.iter_mut() {
                match trial.iter().position(|&f| f >= gang.gpu) {
                    Some(n) if ok => {
                        trial[n] -= gang.gpu;
                        *slot = Some(n);
                    }
                    _ => ok = false,
                }
            }
            if ok {
                free = trial;
                for q in chain(queue) {
                    *held.entry(q).or_default() += total;
                }
            } else {
                placed = vec![None; gang.pods];
            }
        }
        for (p, node) in placed.into_iter().enumerate() {
            spec.pods.push(PodSpec {
                namespace: "ns".into(),
                name: format!("{name}-{p}"),
                ours: true,
                group: Some(name.clone()),
                request: list(1000, gang.gpu),
                priority: gang.priority,
                created_ms: 1 + g as i64,
                phase: if node.is_some() {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                },
                node: node.map(|n| format!("n{n}")),
                non_preemptable: gang.protected,
                ..Default::default()
            });
        }
    }
    spec
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn queue_invariants(nodes in 1..=4usize, qs in queues(), gs in gangs()) {
        let spec = cluster(nodes, &qs, &gs);
        let snapshot = Snapshot::build(spec.clone()).unwrap();
        let config = Config::default();
        let plan = schedule(&snapshot, &config);
        let gpu = snapshot.resources.id("nvidia.com/gpu").unwrap();

        // The queue report is output only: without it (as replays run) the decisions are the same.
        let mut quiet = framework(&config, &snapshot.resources);
        quiet.report_queues = false;
        // One Warm for both runs: the second starts from the first one's node state.
        let mut warm = basalt_engine::Warm::default();
        let q = basalt_engine::schedule(&snapshot, &quiet, &mut warm);
        prop_assert!(q.queues.is_empty());
        prop_assert_eq!(
            (&q.bindings, &q.evictions, &q.nominations, &q.pod_groups),
            (&plan.bindings, &plan.evictions, &plan.nominations, &plan.pod_groups)
        );
        // So are the reasons no node fits: without them only condition messages change (and
        // `NeverFits`, which only an explanation tells from `NotEnoughResources`).
        quiet.explain_failures = false;
        let q = basalt_engine::schedule(&snapshot, &quiet, &mut warm);
        let reason = |r: &str| if r == "NeverFits" { "NotEnoughResources".to_string() } else { r.to_string() };
        let outcome = |p: &basalt_engine::Plan| p.pod_groups.iter()
            .map(|g| (g.name.clone(), g.phase, g.running, g.pending, g.conditions.iter().map(|c| reason(&c.reason)).collect::<Vec<_>>()))
            .collect::<Vec<_>>();
        prop_assert_eq!(
            (&q.bindings, &q.evictions, &q.nominations, outcome(&q)),
            (&plan.bindings, &plan.evictions, &plan.nominations, outcome(&plan))
        );
        // Without settled groups the plan lists the others as before; what it leaves out had
        // no member placed, evicted, nominated or pending and kept the snapshot's phase.
        let mut terse = framework(&config, &snapshot.resources);
        terse.report_settled_groups = false;
        let t = basalt_engine::schedule(&snapshot, &terse, &mut basalt_engine::Warm::default());
        prop_assert_eq!(
            (&t.bindings, &t.evictions, &t.nominations),
            (&plan.bindings, &plan.evictions, &plan.nominations)
        );
        let mut listed = t.pod_groups.iter().peekable();
        for g in &plan.pod_groups {
            if listed.peek() == Some(&g) {
                listed.next();
                continue;
            }
            let job = snapshot.jobs.iter().find(|j| j.name == g.name).unwrap();
            let of_job = |pod: &str| job.tasks.iter().any(|&t| *snapshot.task(t).name == *pod);
            prop_assert!(g.pending == 0 && g.phase == job.phase, "{} is not settled: {:?}", g.name, g);
            prop_assert!(
                !plan.bindings.iter().any(|b| of_job(&b.pod))
                    && !plan.evictions.iter().any(|e| of_job(&e.pod))
                    && !plan.nominations.iter().any(|n| of_job(&n.pod)),
                "{} was acted on", g.name
            );
        }
        prop_assert!(listed.next().is_none(), "the terse plan lists a group the full one does not");

        // Deserved shares never sum above what their parent (or the cluster) has.
        let fw = framework(&config, &snapshot.resources);
        let session = Session::new(&snapshot, &fw);
        let capacity = session.queue_capacity();
        // Pod slots are a per-node limit every queue may use, not a share.
        for r in snapshot.resources.ids().filter(|&r| r != basalt_engine::PODS) {
            let mut by_parent: HashMap<Option<usize>, i64> = HashMap::new();
            for q in &snapshot.queues {
                *by_parent.entry(q.parent.map(|p| p.index())).or_default() += session.deserved(q.id).get(r);
            }
            for (parent, sum) in by_parent {
                let limit = match parent {
                    None => capacity.get(r),
                    Some(p) => session.deserved(basalt_engine::QueueId(p as u32)).get(r),
                };
                prop_assert!(sum <= limit, "children of {:?} deserve {} > {} of {}", parent, sum, limit, snapshot.resources.name(r));
            }
        }

        // GPUs each queue subtree holds after the plan (bound, minus evicted, plus bound and
        // nominated by the plan).
        let pod_gpu: HashMap<String, (i64, usize)> = snapshot.tasks.iter().map(|t| {
            (t.name.to_string(), (t.request.get(gpu), snapshot.job(t.job).queue.index()))
        }).collect();
        let mut held_after = vec![0i64; snapshot.queues.len()];
        let mut held_before = vec![0i64; snapshot.queues.len()];
        let chain = |q: usize| std::iter::successors(Some(q), |&q| snapshot.queues[q].parent.map(|p| p.index()));
        for t in &snapshot.tasks {
            if let basalt_engine::TaskState::Bound(_) = t.state {
                for q in chain(snapshot.job(t.job).queue.index()) {
                    held_before[q] += t.request.get(gpu);
                    held_after[q] += t.request.get(gpu);
                }
            }
        }
        for e in &plan.evictions {
            let (g, q) = pod_gpu[&e.pod];
            for q in chain(q) { held_after[q] -= g; }
        }
        for pod in plan.bindings.iter().map(|b| &b.pod).chain(plan.nominations.iter().filter(|n| n.reason == basalt_engine::NominationReason::Evictions).map(|n| &n.pod)) {
            let (g, q) = pod_gpu[pod];
            for q in chain(q) { held_after[q] += g; }
        }
        for q in &snapshot.queues {
            // No queue above its capability.
            if let Some(cap) = q.capability.get(gpu) {
                prop_assert!(held_after[q.id.index()] <= cap, "queue {} holds {} GPUs over capability {}", q.name, held_after[q.id.index()], cap);
            }
            // No guarantee reclaimed: other queues never take a queue below it (preemption
            // inside the queue swaps the queue's own work and is not reclaim).
            if let Some(g) = q.guarantee.get(gpu) {
                // Reclaim inside the queue's own subtree (between its children) is no other
                // queue taking from it.
                let outside = |group: &str| {
                    let job = snapshot.jobs.iter().find(|j| *j.name == *group).unwrap();
                    !chain(job.queue.index()).any(|x| x == q.id.index())
                };
                let reclaimed: i64 = plan.evictions.iter().filter(|e| e.reason == "reclaim" && outside(&e.for_group)).map(|e| pod_gpu[&e.pod]).filter(|&(_, vq)| chain(vq).any(|x| x == q.id.index())).map(|(g, _)| g).sum();
                let gained: i64 = plan.bindings.iter().map(|b| &b.pod).chain(plan.nominations.iter().filter(|n| n.reason == basalt_engine::NominationReason::Evictions).map(|n| &n.pod)).map(|p| pod_gpu[p]).filter(|&(_, pq)| chain(pq).any(|x| x == q.id.index())).map(|(g, _)| g).sum();
                let after = held_before[q.id.index()] - reclaimed + gained;
                prop_assert!(after >= g.min(held_before[q.id.index()]), "queue {} reclaimed below its guarantee", q.name);
            }
        }

        // Every eviction serves a preemptor placed or nominated in the same plan, and no
        // protected pod is evicted.
        for e in &plan.evictions {
            let prefix = format!("{}-", e.for_group);
            let served = plan.bindings.iter().map(|b| &b.pod).chain(plan.nominations.iter().map(|n| &n.pod)).any(|p| p.starts_with(&prefix));
            prop_assert!(served, "eviction of {} serves nobody ({})", e.pod, e.for_group);
            let victim = snapshot.tasks.iter().find(|t| *t.name == *e.pod).unwrap();
            prop_assert!(!victim.non_preemptable, "non-preemptable {} evicted", e.pod);
        }

        // A running gang is never left below its minimum: it keeps minMember or goes whole.
        for job in &snapshot.jobs {
            let bound: Vec<&str> = job.tasks.iter().map(|&t| snapshot.task(t)).filter(|t| matches!(t.state, basalt_engine::TaskState::Bound(_))).map(|t| &*t.name).collect();
            if bound.is_empty() { continue; }
            let evicted = bound.iter().filter(|p| plan.evictions.iter().any(|e| e.pod == **p)).count();
            let prefix = format!("{}-", job.name);
            let new = plan.bindings.iter().filter(|b| b.pod.starts_with(&prefix)).count();
            // What the gang runs with after the plan: its survivors plus what the plan binds.
            let left = bound.len() - evicted + new;
            prop_assert!(left == 0 || left as u32 >= job.min_member.min(bound.len() as u32), "gang {} left with {} < {}", job.name, left, job.min_member);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A framework and Warm kept from cycle to cycle (as the daemon and a replay keep them)
    /// hand each session's node index and filter results on to the next, which re-indexes only
    /// the nodes whose usage changed; a fresh framework and Warm index every node. Their plans
    /// must agree cycle after cycle, while the plans' bindings, evictions and completions
    /// change usage.
    #[test]
    fn a_kept_node_index_decides_as_a_fresh_one(nodes in 1..=4usize, qs in queues(), gs in gangs(), done in 0..8usize) {
        let mut spec = cluster(nodes, &qs, &gs);
        // Zones, and gangs held to one, so that sessions keep filter results of several rules.
        for (i, n) in spec.nodes.iter_mut().enumerate() {
            n.labels.insert("zone".into(), ["a", "b"][i % 2].into());
        }
        for p in &mut spec.pods {
            let g: usize = p.group.as_deref().unwrap()[1..].parse().unwrap();
            if let Some(zone) = ["a", "b"].get(g % 3) {
                p.rules.node_selector.insert("zone".into(), zone.to_string());
            }
        }
        // Bound pods name their GPUs (the lowest free, in name order, as a snapshot would
        // pick them), so that the builder can patch its snapshots from cycle to cycle.
        let mut taken: BTreeMap<String, u64> = BTreeMap::new();
        spec.pods.sort_by(|a, b| a.name.cmp(&b.name));
        for p in &mut spec.pods {
            let (Some(node), Some(&want)) = (&p.node, p.request.get("nvidia.com/gpu")) else { continue };
            let used = taken.entry(node.clone()).or_default();
            p.gpu_ids = (0..64u32).filter(|i| *used & (1 << i) == 0).take(want as usize).collect();
            for &i in &p.gpu_ids {
                *used |= 1 << i;
            }
        }
        let config = Config::default();
        let mut builder = basalt_engine::SnapshotBuilder::new(&spec.device_resource, spec.nodes.clone()).unwrap();
        let mut pods: BTreeMap<String, PodSpec> = spec.pods.iter()
            .map(|p| (format!("{}/{}", p.namespace, p.name), p.clone())).collect();
        let mut groups: BTreeMap<String, GroupSpec> = spec.groups.iter()
            .map(|g| (format!("{}/{}", g.namespace, g.name), g.clone())).collect();
        let mut kept = None;
        for cycle in 0..6i64 {
            for p in pods.values() {
                builder.set_pod(p.clone());
            }
            for g in groups.values() {
                builder.set_group(g.clone());
            }
            let snapshot = builder.build(spec.now_ms + cycle * 1000, &spec.queues).unwrap();
            let (fw, warm) = kept.get_or_insert_with(|| (framework(&config, &snapshot.resources), basalt_engine::Warm::default()));
            let plan = basalt_engine::schedule(snapshot, fw, warm);
            // A snapshot of its own, scheduled from scratch.
            let fresh = schedule(&Snapshot::build(ClusterSpec {
                device_resource: "nvidia.com/gpu".into(),
                now_ms: snapshot.now_ms,
                nodes: spec.nodes.clone(),
                pods: pods.values().cloned().collect(),
                groups: groups.values().cloned().collect(),
                queues: spec.queues.clone(),
                namespaces: Vec::new(),
                dra: Default::default(),
                usage: Default::default(),
            }).unwrap(), &config);
            prop_assert_eq!(&plan, &fresh, "cycle {}", cycle);
            // The cluster carries the plan out, and one running pod ends.
            for e in &plan.evictions {
                let p = pods.get_mut(&e.pod).unwrap();
                (p.phase, p.node, p.gpu_ids) = (PodPhase::Pending, None, Vec::new());
            }
            for b in &plan.bindings {
                let p = pods.get_mut(&b.pod).unwrap();
                (p.phase, p.node, p.gpu_ids) = (PodPhase::Running, Some(b.node.clone()), b.gpus.clone());
                p.nominated_node = None;
            }
            for n in &plan.nominations {
                pods.get_mut(&n.pod).unwrap().nominated_node = Some(n.node.clone());
            }
            for s in &plan.pod_groups {
                groups.get_mut(&*s.name).unwrap().phase = s.phase;
            }
            let running: Vec<String> = pods.iter()
                .filter(|(_, p)| p.phase == PodPhase::Running)
                .map(|(k, _)| k.clone())
                .collect();
            if !running.is_empty() {
                let gone = &running[done % running.len()];
                let p = pods.get_mut(gone).unwrap();
                p.phase = PodPhase::Succeeded;
                builder.set_pod(p.clone());
            }
        }
        prop_assert!(builder.patched() > 0 || pods.values().all(|p| p.node.is_none()));
    }
}
