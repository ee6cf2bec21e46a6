//! Synthetic clusters and backlogs for `basalt-sim bench` and `cargo bench`: identical GPU
//! nodes in racks of 32 and a backlog of gangs of identical pods.

use std::collections::BTreeMap;

use basalt_engine::{ClusterSpec, GroupSpec, JobPhase, NodeSpec, PodSpec, ResourceList};

/// What to build.
#[derive(Clone, Debug)]
pub struct Synthetic {
    pub nodes: usize,
    pub pods: usize,
    pub gang_size: usize,
    pub gpus_per_node: u32,
    pub gpus_per_pod: u32,
}

const GI: i64 = 1 << 30;

fn list(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

impl Synthetic {
    pub fn cluster(&self) -> ClusterSpec {
        let nodes = (0..self.nodes)
            .map(|i| NodeSpec {
                name: format!("node-{i:05}"),
                labels: BTreeMap::from([
                    ("kubernetes.io/hostname".to_string(), format!("node-{i:05}")),
                    (
                        "topology.basalt.dev/rack".to_string(),
                        format!("rack-{:03}", i / 32),
                    ),
                ]),
                allocatable: list(&[
                    ("cpu", 128_000),
                    ("memory", 2048 * GI),
                    ("pods", 110),
                    ("nvidia.com/gpu", self.gpus_per_node as i64),
                ]),
                ..Default::default()
            })
            .collect();
        let gang = self.gang_size.max(1);
        let gangs = self.pods.div_ceil(gang);
        let mut groups = Vec::with_capacity(gangs);
        let mut pods = Vec::with_capacity(self.pods);
        for g in 0..gangs {
            let members = gang.min(self.pods - g * gang);
            let name = format!("job-{g:05}");
            groups.push(GroupSpec {
                namespace: "bench".into(),
                name: name.clone(),
                queue: None,
                min_member: members as i64,
                min_task_member: BTreeMap::new(),
                min_resources: None,
                priority: None,
                created_ms: g as i64 * 1000,
                phase: JobPhase::Pending,
            });
            for m in 0..members {
                pods.push(PodSpec {
                    namespace: "bench".into(),
                    name: format!("{name}-{m}"),
                    ours: true,
                    group: Some(name.clone()),
                    request: list(&[
                        ("cpu", 8_000),
                        ("memory", 64 * GI),
                        ("nvidia.com/gpu", self.gpus_per_pod as i64),
                    ]),
                    created_ms: g as i64 * 1000,
                    ..Default::default()
                });
            }
        }
        ClusterSpec {
            now_ms: gangs as i64 * 1000,
            nodes,
            pods,
            groups,
            queues: Vec::new(),
        }
    }
}
