//! Refusals word as the strings messages, PodGroup conditions and Events have always carried,
//! and say whether preemption could lift them.

use super::*;
use crate::model::{Taint, TaintEffect};
use crate::resources::{CPU, GPU, MEMORY};
use crate::snapshot::{ClusterSpec, NodeSpec, QueueSpec};

/// Two nodes with the same taint, and a queue `research`.
fn snapshot() -> Snapshot {
    let node = |name: &str| NodeSpec {
        name: name.into(),
        taints: vec![
            Taint {
                key: "soft".into(),
                value: String::new(),
                effect: TaintEffect::PreferNoSchedule,
            },
            Taint {
                key: "gpu".into(),
                value: "h100".into(),
                effect: TaintEffect::NoSchedule,
            },
        ],
        allocatable: [("cpu".to_string(), 8000)].into(),
        ..Default::default()
    };
    Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![node("n0"), node("n1")],
        queues: vec![QueueSpec::new("research")],
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn refusals_word_as_kube_scheduler_does() {
    let snap = snapshot();
    let research = (snap.queues.iter()).find(|q| q.name == "research").unwrap();
    let taint = |node| Refusal::UntoleratedTaint {
        node: NodeId(node),
        taint: 1,
    };
    let cases = [
        (Refusal::Unschedulable, "were unschedulable"),
        (taint(0), "had untolerated taint {gpu: h100}"),
        (taint(1), "had untolerated taint {gpu: h100}"),
        (Refusal::NodeSelector, "didn't match node selector"),
        (Refusal::NodeAffinity, "didn't match node affinity"),
        (
            Refusal::VolumeNodeAffinity,
            "had volume node affinity conflict",
        ),
        (
            Refusal::UnboundVolume,
            "didn't find available persistent volumes to bind",
        ),
        (Refusal::Insufficient(GPU), "insufficient nvidia.com/gpu"),
        (Refusal::Insufficient(MEMORY), "insufficient memory"),
        (
            Refusal::Devices(DeviceShort::TooFewFree),
            "had too few free GPUs",
        ),
        (
            Refusal::Devices(DeviceShort::MpsOneReplica),
            "share GPUs through MPS, one replica per pod",
        ),
        (
            Refusal::Devices(DeviceShort::NodeInsufficientDevice),
            "had no HAMi GPU for the pod's shares (NodeInsufficientDevice)",
        ),
        (
            Refusal::Devices(DeviceShort::CardNotHealth),
            "had no GPU that fits the pod (CardNotHealth)",
        ),
        (
            Refusal::Devices(DeviceShort::CardTypeMismatch),
            "had no GPU that fits the pod (CardTypeMismatch)",
        ),
        (
            Refusal::Devices(DeviceShort::CardUuidMismatch),
            "had no GPU that fits the pod (CardUuidMismatch)",
        ),
        (
            Refusal::Devices(DeviceShort::CardTimeSlicingExhausted),
            "had no GPU that fits the pod (CardTimeSlicingExhausted)",
        ),
        (
            Refusal::Devices(DeviceShort::CardInsufficientMemory),
            "had no GPU that fits the pod (CardInsufficientMemory)",
        ),
        (
            Refusal::Devices(DeviceShort::CardInsufficientCore),
            "had no GPU that fits the pod (CardInsufficientCore)",
        ),
        (
            Refusal::Devices(DeviceShort::ExclusiveDeviceAllocateConflict),
            "had no GPU that fits the pod (ExclusiveDeviceAllocateConflict)",
        ),
        (
            Refusal::Devices(DeviceShort::CardComputeUnitsExhausted),
            "had no GPU that fits the pod (CardComputeUnitsExhausted)",
        ),
        (
            Refusal::Devices(DeviceShort::AllocatedCardsInsufficientRequest),
            "had no GPU that fits the pod (AllocatedCardsInsufficientRequest)",
        ),
        (
            Refusal::HostPorts,
            "didn't have free ports for the requested pod ports",
        ),
        (Refusal::DiskConflict, "had no available disk"),
        (Refusal::PodAffinity, "didn't match pod affinity rules"),
        (
            Refusal::PodAntiAffinity,
            "didn't match pod anti-affinity rules",
        ),
        (
            Refusal::ExistingPodsAntiAffinity,
            "didn't satisfy existing pods anti-affinity rules",
        ),
        (
            Refusal::TopologySpread,
            "didn't match pod topology spread constraints",
        ),
        (
            Refusal::TopologySpreadMissingLabel,
            "didn't match pod topology spread constraints (missing required label)",
        ),
        (Refusal::Reserved, "were reserved for a starving gang"),
        (
            Refusal::OverCapability {
                queue: research.id,
                resource: CPU,
                capability: 4000,
                would_hold: 4500,
            },
            "queue research would hold 4500m cpu over its capability of 4",
        ),
        (
            Refusal::Guaranteed {
                resource: MEMORY,
                unmet: 64 << 30,
            },
            "64Gi memory of the free capacity is guaranteed to other queues that have not used it",
        ),
    ];
    for (refusal, wording) in cases {
        assert_eq!(refusal.describe(&snap), wording, "{refusal:?}");
    }
}

#[test]
fn preemption_lifts_only_what_evictions_can_change() {
    let unresolvable = [
        Refusal::Unschedulable,
        Refusal::UntoleratedTaint {
            node: NodeId(0),
            taint: 1,
        },
        Refusal::NodeSelector,
        Refusal::NodeAffinity,
        Refusal::VolumeNodeAffinity,
        Refusal::UnboundVolume,
        Refusal::Devices(DeviceShort::CardNotHealth),
        Refusal::Devices(DeviceShort::CardTypeMismatch),
        Refusal::Devices(DeviceShort::CardUuidMismatch),
        Refusal::Devices(DeviceShort::NodeInsufficientDevice),
        Refusal::Devices(DeviceShort::MpsOneReplica),
        Refusal::PodAffinity,
        Refusal::TopologySpreadMissingLabel,
        Refusal::Reserved,
    ];
    for r in unresolvable {
        assert!(!r.resolvable_by_preemption(), "{r:?}");
    }
    let resolvable = [
        Refusal::Insufficient(GPU),
        Refusal::Devices(DeviceShort::TooFewFree),
        Refusal::Devices(DeviceShort::CardInsufficientMemory),
        Refusal::HostPorts,
        Refusal::DiskConflict,
        Refusal::PodAntiAffinity,
        Refusal::ExistingPodsAntiAffinity,
        Refusal::TopologySpread,
        Refusal::OverCapability {
            queue: crate::model::QueueId(0),
            resource: GPU,
            capability: 8,
            would_hold: 10,
        },
        Refusal::Guaranteed {
            resource: GPU,
            unmet: 2,
        },
    ];
    for r in resolvable {
        assert!(r.resolvable_by_preemption(), "{r:?}");
    }
    use crate::dra::{ClaimRefusal, ClaimShort};
    let claim = |why| Refusal::Claim {
        rules: RulesId(0),
        refusal: ClaimRefusal { claim: 0, why },
    };
    assert!(claim(ClaimShort::TooFewFreeDevices).resolvable_by_preemption());
    assert!(!claim(ClaimShort::AllocatedElsewhere).resolvable_by_preemption());
    assert!(!claim(ClaimShort::SharedElsewhere).resolvable_by_preemption());
    assert!(!claim(ClaimShort::NoDeviceMatches { request: 0 }).resolvable_by_preemption());
}

#[test]
fn a_refusal_is_a_small_plain_value() {
    // Counted per node on the hot path: no heap, and no bigger than a few words.
    fn copy<T: Copy + Ord + std::hash::Hash>() {}
    copy::<Refusal>();
    assert!(std::mem::size_of::<Refusal>() <= 32);
}

#[test]
fn nodes_are_counted_per_refusal_and_worded_once_per_message() {
    let snap = snapshot();
    let mut counts: BTreeMap<Refusal, usize> = BTreeMap::new();
    let refusals = [
        Refusal::Insufficient(GPU),
        Refusal::UntoleratedTaint {
            node: NodeId(0),
            taint: 1,
        },
        Refusal::Insufficient(GPU),
        Refusal::PodAntiAffinity,
        Refusal::UntoleratedTaint {
            node: NodeId(1),
            taint: 1,
        },
        Refusal::Insufficient(CPU),
    ];
    for r in refusals {
        *counts.entry(r).or_default() += 1;
    }
    assert_eq!(counts[&Refusal::Insufficient(GPU)], 2);
    // The same taint on two nodes: two refusals, one part of the message.
    assert_eq!(
        nodes_available(&snap, &counts),
        "0/2 nodes are available: 2 had untolerated taint {gpu: h100}, \
         2 insufficient nvidia.com/gpu, 1 didn't match pod anti-affinity rules, \
         1 insufficient cpu."
    );
    assert_eq!(
        nodes_available(&snap, &BTreeMap::new()),
        "0/2 nodes are available."
    );
}

#[test]
fn closed_devices_are_worded_with_their_node_s_reason_and_merge_when_alike() {
    let closed = |name: &str, why: &str| NodeSpec {
        name: name.into(),
        allocatable: [
            ("cpu".to_string(), 8000),
            ("nvidia.com/gpu".to_string(), 40),
        ]
        .into(),
        devices_closed: Some(why.into()),
        ..Default::default()
    };
    let snap = Snapshot::build(ClusterSpec {
        device_resource: "nvidia.com/gpu".into(),
        nodes: vec![
            closed("a", "register: devices 0 and 1 are both GPU-x"),
            closed("b", "register: devices 0 and 1 are both GPU-x"),
            closed("c", "register: malformed JSON"),
        ],
        ..Default::default()
    })
    .unwrap();
    // Closed: no device listed, the count read 0; the CPUs stay.
    let n = snap.node(NodeId(0));
    assert!(n.gpus.is_empty());
    assert_eq!(n.allocatable.get(GPU), 0);
    assert_eq!(n.allocatable.get(CPU), 8000);
    let mut counts: BTreeMap<Refusal, usize> = BTreeMap::new();
    for node in 0..3 {
        *counts
            .entry(Refusal::DevicesClosed { node: NodeId(node) })
            .or_default() += 1;
    }
    assert_eq!(
        nodes_available(&snap, &counts),
        "0/3 nodes are available: 2 had their GPUs closed (register: devices 0 and 1 are both \
         GPU-x), 1 had their GPUs closed (register: malformed JSON)."
    );
    assert!(!Refusal::DevicesClosed { node: NodeId(0) }.resolvable_by_preemption());
}
