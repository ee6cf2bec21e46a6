//! Explanations of waiting jobs (issue 33): one cycle of the default config over small
//! clusters written as manifests, and what the plan says of each waiting job.

use basalt_crds::{build_snapshot, read_objects, ConvertOptions};
use basalt_engine::{Explanation, NeverFits, Plan, PodGroupStatus, Unblock, Verdict};

/// `n` nodes `g-<i>` of 8 GPUs, racks of `per_rack`.
fn nodes(n: usize, per_rack: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "- {{apiVersion: v1, kind: Node, metadata: {{name: g-{i}, labels: \
                 {{topology.basalt.dev/rack: r{}}}}}, status: {{allocatable: {{cpu: \"64\", \
                 memory: 512Gi, pods: \"110\", nvidia.com/gpu: \"8\"}}}}}}\n",
                i / per_rack
            )
        })
        .collect()
}

/// A gang `name` of `pods` members of `gpus` GPUs each in queue `queue`; `on` binds them to
/// nodes (running).
fn gang(name: &str, queue: &str, pods: usize, gpus: u32, on: &[&str], extra: &str) -> String {
    let mut out = format!(
        "- {{apiVersion: scheduling.basalt.dev/v1alpha1, kind: PodGroup, metadata: {{name: {name}, \
         namespace: ml}}, spec: {{minMember: {pods}, queue: {queue}{extra}}}}}\n"
    );
    for i in 0..pods {
        let node = on
            .get(i)
            .map(|n| format!(", nodeName: {n}"))
            .unwrap_or_default();
        let phase = if on.get(i).is_some() {
            ", status: {phase: Running}"
        } else {
            ""
        };
        out.push_str(&format!(
            "- {{apiVersion: v1, kind: Pod, metadata: {{name: {name}-{i}, namespace: ml, labels: \
             {{scheduling.basalt.dev/pod-group: {name}}}}}, spec: {{schedulerName: basalt{node}, \
             containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: \
             \"{gpus}\"}}}}}}]}}{phase}}}\n"
        ));
    }
    out
}

fn queue(name: &str, spec: &str) -> String {
    format!(
        "- {{apiVersion: scheduling.basalt.dev/v1alpha1, kind: Queue, metadata: {{name: {name}}}, \
         spec: {{weight: 1{spec}}}}}\n"
    )
}

fn plan(items: &str) -> Plan {
    let text = format!("apiVersion: v1\nkind: List\nitems:\n{items}");
    let loaded = read_objects("test", &text).unwrap();
    let snapshot = build_snapshot(&loaded.objects, &ConvertOptions::default()).unwrap();
    basalt_plugins::schedule(&snapshot, &basalt_plugins::Config::default())
}

fn group<'p>(plan: &'p Plan, name: &str) -> &'p PodGroupStatus {
    (plan.pod_groups.iter())
        .find(|g| &*g.name == name)
        .unwrap_or_else(|| panic!("no group {name} in {plan:#?}"))
}

fn explanation<'p>(plan: &'p Plan, name: &str) -> &'p Explanation {
    (group(plan, name).explanation.as_deref())
        .unwrap_or_else(|| panic!("{name} has no explanation: {:#?}", group(plan, name)))
}

fn unschedulable(plan: &Plan, name: &str) -> (String, String) {
    let c = (group(plan, name).conditions.iter())
        .find(|c| c.kind == "Unschedulable")
        .unwrap_or_else(|| panic!("{name} has no Unschedulable condition"));
    (c.reason.clone(), c.message.clone())
}

#[test]
fn a_gang_larger_than_the_cluster_never_fits_and_one_that_waits_says_so() {
    // 4 nodes of 8 GPUs: a gang of 5 × 8 never fits; a gang of 3 × 8 waits for `big`, which
    // holds 2 nodes.
    let items = nodes(4, 4)
        + &queue("q", "")
        + &gang("big", "q", 2, 8, &["g-0", "g-1"], "")
        + &gang("huge", "q", 5, 8, &[], "")
        + &gang("wide", "q", 3, 8, &[], "");
    let plan = plan(&items);
    let huge = explanation(&plan, "ml/huge");
    assert_eq!(huge.verdict, Verdict::NeverFits);
    assert_eq!(
        huge.never_fits,
        Some(NeverFits::Cluster {
            resource: "nvidia.com/gpu".into(),
            asked: "40".into(),
            allocatable: "32".into()
        })
    );
    let (reason, message) = unschedulable(&plan, "ml/huge");
    assert_eq!(reason, "NeverFits");
    assert!(
        message.contains("it asks 40 nvidia.com/gpu, more than the 32"),
        "{message}"
    );

    let wide = explanation(&plan, "ml/wide");
    assert_eq!(wide.verdict, Verdict::Waiting);
    assert_eq!(unschedulable(&plan, "ml/wide").0, "NotEnoughResources");
    // Counted on the cluster as the cycle leaves it, not with the gang's own dry run: the two
    // free nodes take a member each.
    assert_eq!((wide.nodes.available, wide.nodes.total), (2, 4));
    assert_eq!((wide.fit_now, wide.need), (2, 3));
    let message = unschedulable(&plan, "ml/wide").1;
    assert!(
        message.starts_with(
            "0/3 members of the gang could be placed: 2/4 nodes are available: 2 insufficient \
             nvidia.com/gpu."
        ),
        "{message}"
    );
    // Who holds the GPUs, and whose end lets it start.
    assert_eq!(wide.held_resource.as_deref(), Some("nvidia.com/gpu"));
    assert_eq!(wide.held_by.len(), 1);
    assert_eq!(&*wide.held_by[0].name, "ml/big");
    assert_eq!(wide.held_by[0].amount, "16");
    assert_eq!(&*wide.held_by_queues[0].name, "q");
    assert_eq!(
        wide.unblock,
        Some(Unblock::JobsEnd {
            jobs: vec!["ml/big".into()]
        })
    );
    // Its place in line: `huge` and `wide` wait in q, by job order (creation, then name).
    assert_eq!(wide.position.queue, "q");
    assert_eq!(wide.position.queue_length, 2);
    assert_eq!(huge.position.in_queue + wide.position.in_queue, 3);
    assert!(wide.position.in_cycle.is_some());
}

#[test]
fn the_fewest_running_jobs_whose_end_frees_room_are_named() {
    // 3 nodes: a (8 GPUs on g-0), b and c (4 GPUs each on g-1), d (2 GPUs on g-2). A gang of
    // 2 × 8 needs two whole nodes: the end of `a` and of one more job freeing g-1 or g-2.
    let items = nodes(3, 3)
        + &queue("q", "")
        + &gang("a", "q", 1, 8, &["g-0"], "")
        + &gang("b", "q", 1, 4, &["g-1"], "")
        + &gang("c", "q", 1, 4, &["g-1"], "")
        + &gang("d", "q", 1, 2, &["g-2"], "")
        + &gang("pair", "q", 2, 8, &[], "");
    let plan = plan(&items);
    let pair = explanation(&plan, "ml/pair");
    assert_eq!(pair.verdict, Verdict::Waiting);
    let Some(Unblock::JobsEnd { jobs }) = &pair.unblock else {
        panic!("{pair:#?}");
    };
    let jobs: Vec<&str> = jobs.iter().map(|j| &**j).collect();
    // `a` is the largest holder; g-2 then frees with `d` alone (g-1 needs b and c).
    assert_eq!(jobs, ["ml/a", "ml/d"]);
}

#[test]
fn jobs_to_end_come_from_one_job_nodes_then_the_first_of_the_longer_options() {
    // 4 full nodes: g-0 held by x1 and x2, g-1 by y1 and y2 (4 GPUs each), g-2 by z, g-3 by
    // the waiting gang's own running member. It needs two more whole nodes: z's end frees
    // g-2; its own node frees nothing for it; of the two-job nodes the first in node order.
    let items = nodes(4, 4)
        + &queue("q", "")
        + &gang("x1", "q", 1, 4, &["g-0"], "")
        + &gang("x2", "q", 1, 4, &["g-0"], "")
        + &gang("y1", "q", 1, 4, &["g-1"], "")
        + &gang("y2", "q", 1, 4, &["g-1"], "")
        + &gang("z", "q", 1, 8, &["g-2"], "")
        + &gang("trio", "q", 3, 8, &["g-3"], "");
    let plan = plan(&items);
    let trio = explanation(&plan, "ml/trio");
    assert_eq!((trio.holding, trio.need), (1, 2), "{trio:#?}");
    let Some(Unblock::JobsEnd { jobs }) = &trio.unblock else {
        panic!("{trio:#?}");
    };
    let jobs: Vec<&str> = jobs.iter().map(|j| &**j).collect();
    assert_eq!(jobs, ["ml/z", "ml/x1", "ml/x2"]);
    // Its condition is its summary, word for word.
    let (reason, message) = unschedulable(&plan, "ml/trio");
    assert_eq!(
        (reason.as_str(), message),
        ("NotEnoughResources", trio.summary())
    );
}

#[test]
fn alike_waiting_gangs_get_alike_conditions_and_the_head_of_the_queue_its_own() {
    // One full node; five alike gangs wait. The first three of the queue have the dear part
    // (the jobs to end) in their conditions; the last two word alike, each its own summary.
    let names = ["ml/w1", "ml/w2", "ml/w3", "ml/w4", "ml/w5"];
    let mut items = nodes(1, 1) + &queue("q", "") + &gang("run", "q", 1, 8, &["g-0"], "");
    for name in names {
        items += &gang(&name[3..], "q", 2, 4, &[], "");
    }
    let plan = plan(&items);
    let messages: Vec<String> = (names.iter())
        .map(|name| {
            let (reason, message) = unschedulable(&plan, name);
            assert_eq!(reason, "NotEnoughResources");
            assert_eq!(message, explanation(&plan, name).summary(), "{name}");
            message
        })
        .collect();
    for message in &messages[..3] {
        assert!(
            message.ends_with(" Starts when ml/run end."),
            "{messages:#?}"
        );
    }
    assert!(!messages[3].contains("Starts when"), "{messages:#?}");
    assert_eq!(messages[3], messages[4]);
}

#[test]
fn a_queue_capability_blocks_or_never_fits() {
    let items = nodes(4, 4)
        + &queue("capped", ", capability: {nvidia.com/gpu: \"16\"}")
        + &gang("held", "capped", 1, 8, &["g-0"], "")
        + &gang("second", "capped", 2, 8, &[], "")
        + &gang("never", "capped", 3, 8, &[], "");
    let plan = plan(&items);
    let second = explanation(&plan, "ml/second");
    assert_eq!(second.verdict, Verdict::Waiting);
    assert!(
        matches!(&second.unblock, Some(Unblock::Quota { queue: Some(q), .. }) if q == "capped"),
        "{second:#?}"
    );
    let message = unschedulable(&plan, "ml/second").1;
    assert!(
        message.contains("queue capped would hold 24 nvidia.com/gpu over its capability of 16"),
        "{message}"
    );
    let never = explanation(&plan, "ml/never");
    assert_eq!(never.verdict, Verdict::NeverFits);
    assert!(
        matches!(&never.never_fits, Some(NeverFits::Capability { queue, .. }) if queue == "capped"),
        "{never:#?}"
    );
}

#[test]
fn a_required_tier_no_domain_can_hold_never_fits() {
    // Racks of 2 nodes (16 GPUs): 24 GPUs in one rack never fit; 16 in one rack wait for
    // the best rack, named with its free GPUs.
    let items = nodes(4, 2)
        + &queue("q", "")
        + &gang("busy", "q", 1, 8, &["g-0"], "")
        + &gang("busy2", "q", 1, 8, &["g-2"], "")
        + &gang("rack3", "q", 3, 8, &[], ", topology: {required: rack}")
        + &gang("rack2", "q", 2, 8, &[], ", topology: {required: rack}");
    let plan = plan(&items);
    let rack3 = explanation(&plan, "ml/rack3");
    assert_eq!(
        rack3.never_fits,
        Some(NeverFits::Tier {
            tier: "rack".into(),
            gpus: 24,
            largest: 16
        })
    );
    let rack2 = explanation(&plan, "ml/rack2");
    assert_eq!(rack2.verdict, Verdict::Waiting);
    let d = rack2.domain.as_ref().expect("the best rack");
    assert_eq!((d.tier.as_str(), d.free, d.need), ("rack", 8, 16));
    let message = unschedulable(&plan, "ml/rack2").1;
    assert!(
        message.contains("Needs 16 GPUs in one rack; the best"),
        "{message}"
    );
}

#[test]
fn jobs_deep_in_a_queue_skip_the_dear_part() {
    // Five alike waiting gangs: the first three (the default detail) name holders, the
    // others only their place in line.
    let mut items = nodes(2, 2) + &queue("q", "") + &gang("run", "q", 2, 8, &["g-0", "g-1"], "");
    for i in 0..5 {
        items += &gang(&format!("w{i}"), "q", 1, 8, &[], "");
    }
    let plan = plan(&items);
    for i in 0..5 {
        let e = explanation(&plan, &format!("ml/w{i}"));
        assert_eq!(e.position.in_queue, i + 1);
        assert_eq!(e.position.queue_length, 5);
        assert_eq!(e.held_by.is_empty(), i >= 3, "w{i}: {e:#?}");
    }
}

#[test]
fn a_preempting_gang_names_its_victims_and_their_nodes() {
    // One node, held by a low-priority job; a high-priority job of the same queue preempts it.
    let classes =
        "- {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: low}, \
                   value: 10}\n- {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, \
                   metadata: {name: high}, value: 1000}\n";
    let items = nodes(1, 1)
        + classes
        + &queue("q", "")
        + &gang("old", "q", 1, 8, &["g-0"], ", priorityClassName: low")
        + &gang("urgent", "q", 1, 8, &[], ", priorityClassName: high");
    let plan = plan(&items);
    assert_eq!(plan.evictions.len(), 1, "{plan:#?}");
    let ev = &plan.evictions[0];
    assert_eq!((ev.pod.as_str(), ev.node.as_str()), ("ml/old-0", "g-0"));
    let urgent = explanation(&plan, "ml/urgent");
    assert_eq!(
        urgent.unblock,
        Some(Unblock::Preempting {
            victims: vec!["ml/old".into()],
            nodes: vec!["g-0".into()]
        })
    );
}

#[test]
fn alike_jobs_deep_in_a_queue_share_an_explanation_and_one_differing_gets_its_own() {
    // One full node; behind the head of the queue, alike gangs share one explanation (each
    // its own position), while a gang asking less per member and one of more members, as
    // deep in the queue, are explained on their own. Debug builds also check each shared
    // explanation against the job's own.
    let mut items = nodes(1, 1) + &queue("q", "") + &gang("run", "q", 1, 8, &["g-0"], "");
    for i in 1..=6 {
        items += &gang(&format!("a{i}"), "q", 2, 4, &[], "");
    }
    items += &gang("b-ask", "q", 2, 2, &[], "");
    items += &gang("c-count", "q", 3, 4, &[], "");
    let plan = plan(&items);
    let alike = |name: &str| {
        let mut e = explanation(&plan, name).clone();
        (e.position.in_queue, e.position.in_cycle) = (0, None);
        e
    };
    for i in 5..=6 {
        assert_eq!(alike(&format!("ml/a{i}")), alike("ml/a4"), "a{i}");
        assert_eq!(explanation(&plan, &format!("ml/a{i}")).position.in_queue, i);
    }
    let a = explanation(&plan, "ml/a4");
    let gpus = |e: &Explanation| {
        (e.resources.iter())
            .find(|r| r.name == "nvidia.com/gpu")
            .map(|r| r.asked.clone())
    };
    assert_eq!((a.need, gpus(a).as_deref()), (2, Some("8")));
    let ask = explanation(&plan, "ml/b-ask");
    assert_eq!((ask.need, gpus(ask).as_deref()), (2, Some("4")), "{ask:#?}");
    assert_eq!(ask.position.in_queue, 7);
    let count = explanation(&plan, "ml/c-count");
    assert_eq!(
        (count.need, gpus(count).as_deref()),
        (3, Some("12")),
        "{count:#?}"
    );
    assert_eq!(
        unschedulable(&plan, "ml/b-ask").1,
        ask.summary(),
        "the condition is worded from the job's own explanation"
    );
    assert_ne!(unschedulable(&plan, "ml/b-ask").1, a.summary());
}
