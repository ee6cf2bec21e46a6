//! Synthetic clusters and backlogs for `basalt-sim bench` and `cargo bench`: identical GPU
//! nodes in racks of 32, an optional three-level queue tree, some gangs already running and a
//! backlog of pending gangs of identical pods.

use std::collections::BTreeMap;

use std::sync::Arc;

use basalt_engine::devices::Sharing;
use basalt_engine::{
    ClusterSpec, Gpu, GroupSpec, InclusionPolicy, JobPhase, LabelSelector, NodeSpec,
    PodAffinityRules, PodAffinityTerm, PodConstraints, PodPhase, PodSpec, QueueSpec, ResourceList,
    SubGroupSpec, TopologySpec, TopologySpreadConstraint, WeightedPodAffinityTerm,
    WhenUnsatisfiable,
};

/// What to build.
#[derive(Clone, Debug)]
pub struct Synthetic {
    pub nodes: usize,
    /// Pending pods in the backlog.
    pub pods: usize,
    pub gang_size: usize,
    pub gpus_per_node: u32,
    pub gpus_per_pod: u32,
    /// Leaf queues of a three-level tree (0: every job in `default`).
    pub queues: usize,
    /// Pods already running (in gangs of `gang_size`, packed onto the first nodes).
    pub running: usize,
    /// A fabric instead of plain racks: spines of 25 racks of 20 nodes, every fourth rack one
    /// NVL72-style NVLink clique, and a mixed topology-constrained backlog (see
    /// [`Synthetic::fabric_backlog`]).
    pub fabric: bool,
    /// Nodes in ten zones (whole racks of 32, dealt in turn), and a backlog whose jobs state
    /// pod constraints (see
    /// [`Synthetic::constraints`]).
    pub constrained: bool,
    /// HAMi nodes and a backlog of single pods sharing GPUs (see [`Synthetic::share`]).
    pub sharing: bool,
    /// DRA ResourceSlices and a backlog of pods with claims (see [`crate::dra_backlog`]).
    pub dra: bool,
}

impl Synthetic {
    pub fn new(nodes: usize, pods: usize) -> Self {
        Synthetic {
            nodes,
            pods,
            gang_size: 8,
            gpus_per_node: 8,
            gpus_per_pod: 1,
            queues: 0,
            running: 0,
            fabric: false,
            constrained: false,
            sharing: false,
            dra: false,
        }
    }
}

const GI: i64 = 1 << 30;
/// HAMi's default split count.
const SPLIT: i64 = 10;
/// Every synthetic job was created this long before the snapshot (under the default
/// reservation threshold, so the backlog is not starving).
const NOW_MS: i64 = 1_000_000_000;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

impl Synthetic {
    fn labels(&self, i: usize) -> BTreeMap<String, String> {
        let mut labels =
            BTreeMap::from([("kubernetes.io/hostname".to_string(), format!("node-{i:05}"))]);
        let mut put = |k: &str, v: String| labels.insert(k.to_string(), v);
        if self.fabric {
            let rack = i / FABRIC_RACK;
            put(SPINE, format!("spine-{:02}", rack / FABRIC_SPINE));
            put(RACK, format!("rack-{rack:03}"));
            if rack.is_multiple_of(4) {
                put(CLIQUE, format!("clique-{rack:03}"));
            }
        } else {
            put(RACK, format!("rack-{:03}", i / 32));
        }
        if self.constrained {
            // Whole racks, dealt to the zones in turn (node names do not follow zones).
            put(ZONE, format!("zone-{}", (i / 32) % ZONES));
        }
        labels
    }

    pub fn cluster(&self) -> ClusterSpec {
        let nodes: Vec<NodeSpec> = (0..self.nodes)
            .map(|i| NodeSpec {
                name: format!("node-{i:05}"),
                labels: self.labels(i),
                allocatable: list(&[
                    ("cpu", 128_000),
                    ("memory", 2048 * GI),
                    ("pods", 110),
                    ("nvidia.com/gpu", self.gpus_per_node as i64 * self.split()),
                ]),
                gpus: self.sharing.then(|| {
                    (0..self.gpus_per_node)
                        .map(|d| Gpu {
                            uuid: Some(format!("GPU-{i:05}-{d}")),
                            memory_mib: Some(81_920),
                            slots: SPLIT as u32,
                            ..Gpu::new(d)
                        })
                        .collect()
                }),
                shares: Some(basalt_crds::convert::device_names::share_vocabulary()),
                sharing: match self.sharing {
                    true => Sharing::Hami,
                    false => Sharing::Exclusive,
                },
                ..Default::default()
            })
            .collect();
        let (queues, leaves) = queue_tree(self.queues);
        let mut spec = ClusterSpec {
            now_ms: NOW_MS,
            nodes,
            queues,
            device_resource: basalt_crds::convert::device_names::GPU_NAME.to_string(),
            ..Default::default()
        };
        // Running gangs first, packed onto nodes in order; then the pending backlog.
        let gang = if self.sharing {
            1
        } else {
            self.gang_size.max(1)
        };
        let per_node = (self.gpus_per_node / self.gpus_per_pod.max(1)).max(1) as usize;
        let mut slot = 0usize;
        let mut job = 0usize;
        let backlog = if self.fabric { 0 } else { self.pods };
        for (count, running) in [(self.running, true), (backlog, false)] {
            let gangs = count.div_ceil(gang);
            for g in 0..gangs {
                let members = gang.min(count - g * gang);
                let name = format!("job-{job:06}");
                let queue = (!leaves.is_empty()).then(|| leaves[job % leaves.len()].clone());
                // Running work is low priority; the backlog mixes three levels.
                let priority = if running { 0 } else { (job % 3) as i32 };
                spec.groups.push(GroupSpec {
                    namespace: "bench".into(),
                    name: name.clone(),
                    queue,
                    min_member: members as i64,
                    min_task_member: BTreeMap::new(),
                    min_resources: None,
                    priority: Some(priority),
                    created_ms: NOW_MS - 60_000 + job as i64,
                    phase: if running {
                        JobPhase::Running
                    } else {
                        JobPhase::Inqueue
                    },
                    topology: Default::default(),
                    sub_groups: Vec::new(),
                    schedule_timeout_ms: None,
                });
                let (labels, constraints) = match running {
                    false => self.constraints(job, &name),
                    true => (BTreeMap::new(), None),
                };
                for m in 0..members {
                    let node = running.then(|| {
                        let n = slot / per_node;
                        slot += 1;
                        format!("node-{n:05}")
                    });
                    let request = match self.sharing {
                        true => Self::share(job),
                        false => list(&[
                            ("cpu", 8_000),
                            ("memory", 64 * GI),
                            ("nvidia.com/gpu", self.gpus_per_pod as i64),
                        ]),
                    };
                    spec.pods.push(PodSpec {
                        namespace: "bench".into(),
                        name: format!("{name}-{m}"),
                        ours: true,
                        group: Some(name.clone()),
                        devices: basalt_crds::device_ask(&request),
                        request,
                        priority,
                        created_ms: NOW_MS - 60_000 + job as i64,
                        phase: if running {
                            PodPhase::Running
                        } else {
                            PodPhase::Pending
                        },
                        node,
                        labels: labels.clone(),
                        constraints: constraints.clone(),
                        ..Default::default()
                    });
                }
                job += 1;
            }
        }
        if self.fabric {
            self.fabric_backlog(&mut spec, job);
        }
        spec
    }

    /// Slots per device: HAMi's split count on sharing nodes.
    fn split(&self) -> i64 {
        if self.sharing {
            SPLIT
        } else {
            1
        }
    }

    /// With `sharing`, job `job`'s request, in an openb-like mix (per 20 pods: 7 whole GPUs,
    /// 4 half, 4 quarter, 3 small shares, a 2-GPU and a 4-GPU share).
    fn share(job: usize) -> ResourceList {
        // One core per pod: 128 per node outlast the 80 device slots, so devices bind first.
        let base = [("cpu", 1_000), ("memory", 16 * GI)];
        let share: &[(&str, i64)] = match job % 20 {
            0..=6 => &[("nvidia.com/gpu", 1)],
            7..=10 => &[
                ("nvidia.com/gpu", 1),
                ("nvidia.com/gpumem-percentage", 50),
                ("nvidia.com/gpucores", 50),
            ],
            11..=14 => &[
                ("nvidia.com/gpu", 1),
                ("nvidia.com/gpumem-percentage", 25),
                ("nvidia.com/gpucores", 25),
            ],
            15..=17 => &[
                ("nvidia.com/gpu", 1),
                ("nvidia.com/gpumem", 8_192),
                ("nvidia.com/gpucores", 20),
            ],
            18 => &[("nvidia.com/gpu", 2), ("nvidia.com/gpumem", 30_720)],
            _ => &[("nvidia.com/gpu", 4), ("nvidia.com/gpumem", 30_720)],
        };
        list(&[&base[..], share].concat())
    }

    /// With `constrained`, what a pending job's pods state, by job number in tens: two jobs in
    /// ten keep one member per node (required hostname anti-affinity on the job's label), two
    /// spread over zones with `maxSkew: 1`, one prefers its members' zone (preferred pod
    /// affinity); the rest state nothing. Every pending pod carries its job's label.
    fn constraints(
        &self,
        job: usize,
        name: &str,
    ) -> (BTreeMap<String, String>, Option<Arc<PodConstraints>>) {
        if !self.constrained {
            return (BTreeMap::new(), None);
        }
        let labels = BTreeMap::from([(JOB_LABEL.to_string(), name.to_string())]);
        let own = Some(LabelSelector::from_labels([(JOB_LABEL, name)]));
        let term = |topology_key: &str| PodAffinityTerm {
            selector: own.clone(),
            topology_key: topology_key.to_string(),
            ..Default::default()
        };
        let constraints = match job % 10 {
            0 | 1 => PodConstraints {
                anti_affinity: PodAffinityRules {
                    required: vec![term("kubernetes.io/hostname")],
                    preferred: vec![],
                },
                ..Default::default()
            },
            2 | 3 => PodConstraints {
                spread: vec![TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: ZONE.to_string(),
                    when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                    selector: own.clone(),
                    min_domains: None,
                    node_affinity_policy: InclusionPolicy::Honor,
                    node_taints_policy: InclusionPolicy::Ignore,
                }],
                ..Default::default()
            },
            4 => PodConstraints {
                affinity: PodAffinityRules {
                    required: vec![],
                    preferred: vec![WeightedPodAffinityTerm {
                        weight: 100,
                        term: term(ZONE),
                    }],
                },
                ..Default::default()
            },
            _ => return (labels, None),
        };
        (labels, Some(Arc::new(constraints)))
    }

    /// A mixed backlog of `pods` pods, cycling through four kinds of job: a 512-GPU gang (64
    /// pods of 8 GPUs, required spine), a 32-GPU gang in tensor-parallel groups of eight 1-GPU
    /// pods (required rack, each group on one NVLink domain), a single TP=8 group (required
    /// nvlink) and a 1-GPU pod.
    fn fabric_backlog(&self, spec: &mut ClusterSpec, mut job: usize) {
        let topo = |required: &str| TopologySpec {
            required: Some(required.to_string()),
            preferred: None,
        };
        let mut left = self.pods;
        let mut kind = 0;
        while left > 0 {
            let (pods, gpus, gang_topo, tp) = match kind % 4 {
                0 => (64, 8, topo("spine"), None),
                1 => (32, 1, topo("rack"), Some(8)),
                2 => (8, 1, topo("nvlink"), None),
                _ => (1, 1, TopologySpec::default(), None),
            };
            kind += 1;
            let pods = pods.min(left);
            left -= pods;
            let name = format!("job-{job:06}");
            let created = NOW_MS - 60_000 + job as i64;
            spec.groups.push(GroupSpec {
                namespace: "bench".into(),
                name: name.clone(),
                queue: None,
                min_member: pods as i64,
                min_task_member: BTreeMap::new(),
                min_resources: None,
                priority: Some((job % 3) as i32),
                created_ms: created,
                phase: JobPhase::Inqueue,
                topology: gang_topo,
                sub_groups: tp
                    .map(|size| SubGroupSpec {
                        name: "tp".into(),
                        size,
                        match_label_keys: Vec::new(),
                        topology: topo("nvlink"),
                        ..SubGroupSpec::default()
                    })
                    .into_iter()
                    .collect(),
                schedule_timeout_ms: None,
            });
            for m in 0..pods {
                spec.pods.push(PodSpec {
                    namespace: "bench".into(),
                    name: format!("{name}-{m:03}"),
                    ours: true,
                    group: Some(name.clone()),
                    request: list(&[
                        ("cpu", 8_000),
                        ("memory", 64 * GI),
                        ("nvidia.com/gpu", gpus),
                    ]),
                    priority: (job % 3) as i32,
                    created_ms: created,
                    rank: Some(m as u32),
                    ..Default::default()
                });
            }
            job += 1;
        }
    }
}

const SPINE: &str = "topology.basalt.dev/spine";
const RACK: &str = "topology.basalt.dev/rack";
const CLIQUE: &str = "nvidia.com/gpu.clique";
/// The zone label of `constrained` clusters, and their number of zones.
const ZONE: &str = "topology.kubernetes.io/zone";
const ZONES: usize = 10;
/// The label every pending pod of a `constrained` backlog carries: its job's name.
const JOB_LABEL: &str = "bench.basalt.dev/job";

/// Nodes per rack and racks per spine of the fabric.
const FABRIC_RACK: usize = 20;
const FABRIC_SPINE: usize = 25;

/// A three-level tree with `leaves` leaf queues: four organisations, six departments each, the
/// teams spread over the departments. Returns the queues and the leaf names.
fn queue_tree(leaves: usize) -> (Vec<QueueSpec>, Vec<String>) {
    if leaves == 0 {
        return (Vec::new(), Vec::new());
    }
    let mut queues = Vec::new();
    let orgs = 4;
    let depts = 6;
    for o in 0..orgs {
        queues.push(QueueSpec {
            weight: 1 + o as u32,
            ..QueueSpec::new(format!("org-{o}"))
        });
        for d in 0..depts {
            queues.push(QueueSpec {
                parent: Some(format!("org-{o}")),
                weight: 1 + (d % 3) as u32,
                ..QueueSpec::new(format!("org-{o}-dept-{d}"))
            });
        }
    }
    let mut names = Vec::with_capacity(leaves);
    for t in 0..leaves {
        let dept = t % (orgs * depts);
        let name = format!("team-{t:03}");
        queues.push(QueueSpec {
            parent: Some(format!("org-{}-dept-{}", dept / depts, dept % depts)),
            weight: 1 + (t % 4) as u32,
            ..QueueSpec::new(name.clone())
        });
        names.push(name);
    }
    (queues, names)
}
