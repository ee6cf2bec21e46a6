//! Fuzzing the whole offline path: hostile manifests through reading (`read_objects`),
//! conversion (`build_snapshot_with_warnings`) and one scheduling cycle
//! (`basalt_plugins::schedule`).
//!
//! Properties: nothing panics; every error names a file (and document or line) or an object;
//! when a plan comes out, no binding puts a node over its allocatable in anything the pod asks
//! for, and no GPU is given twice. A fixed number of cases runs in CI (deterministic: proptest's
//! default seed); `BASALT_FUZZ_CASES=N` runs more.

use std::collections::HashMap;

use basalt_crds::{build_snapshot_with_warnings, read_objects, ConvertOptions};
use basalt_engine::{NodeId, Plan, Snapshot, TaskState};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, FileFailurePersistence};

const LABEL: &str = "fuzz.yaml";
const EXAMPLE: &str = include_str!("../../examples/cluster.yaml");

fn config(default_cases: u32) -> RunnerConfig {
    let cases = std::env::var("BASALT_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    RunnerConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..RunnerConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Structured but hostile documents
// ---------------------------------------------------------------------------------------------

/// Mostly sane quantities, often large ones (up to 2^60); when hostile, also beyond 2^60 (up
/// to 2^63-1 and past it) and garbage.
fn quantity(hostile: bool) -> impl Strategy<Value = String> {
    let sane = prop::sample::select(vec![
        "0", "1", "2", "8", "100m", "1500m", "32Gi", "512Mi", "1.5", "0.1m", "1e3",
    ]);
    // Within Basalt's limit of 2^60 (in engine units: cpu counts in milli-units)...
    let large = prop::sample::select(vec![
        "1152921504606846976",
        "1Ei",
        "576460752303423488",
        "1e18",
        "1152921504606846m",
    ]);
    // ...and beyond it.
    let huge = prop::sample::select(vec![
        "9223372036854775807",
        "9223372036854775807m",
        "4611686018427387904",
        "8Ei",
        "1e30",
        "99999999999999999999999999999999999999",
    ]);
    let h = u32::from(hostile);
    let garbage = prop::sample::select(vec!["-1", "-100m", "abc", "1Qi", "", "1.2.3", "1e18Ei"]);
    prop_oneof![
        40 => sane.prop_map(str::to_string),
        8 => large.prop_map(str::to_string),
        6 => "[0-9]{1,3}(m|Ki|Mi|Gi|k|M|G)?",
        8 * h => huge.prop_map(str::to_string),
        2 * h => (0u64..u64::MAX).prop_map(|n| n.to_string()),
        h => garbage.prop_map(str::to_string),
    ]
}

/// One of `good`; when hostile, now and then one of `bad`.
fn mostly(
    hostile: bool,
    good: Vec<&'static str>,
    bad: Vec<&'static str>,
) -> impl Strategy<Value = &'static str> {
    prop_oneof![10 => prop::sample::select(good), u32::from(hostile) => prop::sample::select(bad)]
}

fn resource() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "cpu",
        "memory",
        "pods",
        "nvidia.com/gpu",
        "example.com/fpga",
    ])
}

/// `{name: quantity, ...}` with up to three entries. Without hostility every value is one
/// Basalt takes: cpu's large values are scaled to stay within 2^60 milli-CPU.
fn resource_list(hostile: bool) -> impl Strategy<Value = String> {
    prop::collection::vec((resource(), quantity(hostile)), 0..4).prop_map(move |entries| {
        let body: Vec<String> = entries
            .iter()
            .map(|(name, q)| {
                let q = match (*name, hostile) {
                    ("cpu", false) if q.len() > 12 || q == "1e18" || q == "1Ei" => {
                        "1152921504606846".to_string()
                    }
                    _ => q.clone(),
                };
                format!("{name}: '{q}'")
            })
            .collect();
        format!("{{{}}}", body.join(", "))
    })
}

/// A node's allocatable: without hostility, at most 64 GPUs (the engine's limit per node).
fn allocatable(hostile: bool) -> impl Strategy<Value = String> {
    (resource_list(hostile), 0u32..9).prop_map(move |(list, gpus)| match hostile {
        true => list,
        false => list
            .replace("nvidia.com/gpu:", "example.com/other:")
            .replacen('{', &format!("{{nvidia.com/gpu: '{gpus}', "), 1),
    })
}

fn maybe<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.6, s)
}

fn node(i: usize, hostile: bool) -> impl Strategy<Value = String> {
    (allocatable(hostile), any::<bool>(), maybe(0usize..5)).prop_map(move |(alloc, taint, gpus)| {
        let taints = if taint {
            "spec: {taints: [{key: k, effect: NoSchedule}]}\n"
        } else {
            ""
        };
        let mut text = format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n{i}, labels: {{rack: r{}}}}}\n{taints}status: {{allocatable: {alloc}}}\n",
            i % 2
        );
        if let Some(n) = gpus {
            let list: Vec<String> = (0..n).map(|g| format!("{{index: {g}}}")).collect();
            text.push_str(&format!(
                "---\napiVersion: scheduling.basalt.dev/v1alpha1\nkind: NodeTopology\nmetadata: {{name: n{i}}}\nspec: {{gpus: [{}]}}\n",
                list.join(", ")
            ));
        }
        text
    })
}

fn annotation_value(hostile: bool) -> impl Strategy<Value = String> {
    let good = vec!["0", "0,1", "1,0", "0,0", "99", ""];
    mostly(hostile, good, vec!["x", "-1", "0,,1", "4294967296"]).prop_map(str::to_string)
}

fn container(hostile: bool) -> impl Strategy<Value = String> {
    (resource_list(hostile), maybe(resource_list(hostile))).prop_map(|(requests, limits)| {
        match limits {
            Some(l) => format!("{{name: c, resources: {{requests: {requests}, limits: {l}}}}}"),
            None => format!("{{name: c, resources: {{requests: {requests}}}}}"),
        }
    })
}

fn pod(i: usize, nodes: usize, hostile: bool) -> impl Strategy<Value = String> {
    let scheduler = prop::sample::select(vec!["basalt", "default-scheduler", "other"]);
    let phase = prop::sample::select(vec![
        "Running",
        "Pending",
        "Succeeded",
        "Unknown",
        "Exploded",
    ]);
    let rank = prop::sample::select(vec!["0", "3", "-1", "x", "99999999999"]);
    (
        scheduler,
        maybe(0..nodes.max(1)),
        phase,
        (
            maybe(annotation_value(hostile)),
            maybe(rank),
            maybe(0usize..3),
            any::<bool>(),
        ),
        prop::collection::vec(container(hostile), 0..3),
        (
            prop::collection::vec((container(hostile), any::<bool>()), 0..2),
            maybe(resource_list(hostile)),
        ),
        maybe(mostly(hostile, vec!["high", ""], vec!["missing"])),
    )
        .prop_map(
            move |(
                scheduler,
                node,
                phase,
                (gpu_ids, rank, group, protect),
                containers,
                (inits, overhead),
                class,
            )| {
                let mut meta = format!("metadata:\n  name: p{i}\n  namespace: ns\n");
                let mut labels = Vec::new();
                if let Some(r) = rank {
                    labels.push(format!("batch.kubernetes.io/job-completion-index: '{r}'"));
                }
                if let Some(g) = group {
                    labels.push(format!("scheduling.basalt.dev/pod-group: g{g}"));
                }
                if protect {
                    labels.push("scheduling.basalt.dev/preemptable: 'false'".to_string());
                }
                meta.push_str(&format!("  labels: {{{}}}\n", labels.join(", ")));
                if let Some(ids) = gpu_ids {
                    meta.push_str(&format!(
                        "  annotations: {{scheduling.basalt.dev/gpu-ids: '{ids}'}}\n"
                    ));
                }
                let mut spec = format!("spec:\n  schedulerName: {scheduler}\n");
                if let (Some(n), true) = (node, nodes > 0) {
                    spec.push_str(&format!("  nodeName: n{n}\n"));
                }
                if let Some(c) = class {
                    spec.push_str(&format!("  priorityClassName: '{c}'\n"));
                }
                spec.push_str(&format!("  containers: [{}]\n", containers.join(", ")));
                if !inits.is_empty() {
                    let list: Vec<String> = inits
                        .iter()
                        .map(|(c, sidecar)| match sidecar {
                            true => c.replacen('{', "{restartPolicy: Always, ", 1),
                            false => c.clone(),
                        })
                        .collect();
                    spec.push_str(&format!("  initContainers: [{}]\n", list.join(", ")));
                }
                if let Some(o) = overhead {
                    spec.push_str(&format!("  overhead: {o}\n"));
                }
                format!("apiVersion: v1\nkind: Pod\n{meta}{spec}status: {{phase: {phase}}}\n")
            },
        )
}

fn group(i: usize, hostile: bool) -> impl Strategy<Value = String> {
    (prop_oneof![10 => 1i32..5, u32::from(hostile) => -1i32..1], maybe(0usize..3), maybe(resource_list(hostile))).prop_map(move |(min, queue, min_res)| {
        let queue = queue.map(|q| format!(", queue: q{q}")).unwrap_or_default();
        let min_res = min_res.map(|r| format!(", minResources: {r}")).unwrap_or_default();
        format!(
            "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: g{i}, namespace: ns}}\nspec: {{minMember: {min}{queue}{min_res}}}\n"
        )
    })
}

fn queue(i: usize, hostile: bool) -> impl Strategy<Value = String> {
    (prop_oneof![10 => 1u32..4, u32::from(hostile) => Just(0u32)], maybe(0usize..3), maybe(resource_list(hostile)), maybe(resource_list(hostile))).prop_map(
        move |(weight, parent, capability, deserved)| {
            let mut spec = format!("weight: {weight}");
            // Hostile trees only: a group's queue with children, or a cycle, fails the build.
            if let Some(p) = parent.filter(|&p| hostile && p != i) {
                spec.push_str(&format!(", parent: q{p}"));
            }
            if let Some(c) = capability {
                spec.push_str(&format!(", capability: {c}"));
            }
            if let Some(d) = deserved {
                spec.push_str(&format!(", deserved: {d}"));
            }
            format!(
                "apiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: q{i}}}\nspec: {{{spec}}}\n"
            )
        },
    )
}

/// DRA objects: a class with a selector (sometimes an invalid or runtime-failing one), a slice
/// per node (sometimes of an incomplete pool, without its node, with odd attribute values or
/// capacities), and claims (sometimes asking a negative or huge count, an unknown mode, a
/// missing class) that pods name.
fn dra(nodes: usize, pods: usize, hostile: bool) -> impl Strategy<Value = Vec<String>> {
    let selector = mostly(
        hostile,
        vec![
            "device.driver == 'gpu.example.com'",
            "true",
            "device.attributes['gpu.example.com'].model.startsWith('h')",
            "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0",
        ],
        vec![
            "device.attributes['gpu.example.com'].missing",
            "1 +",
            "'not a bool'",
            "[1,2,3].all(x, [1,2,3].all(y, x / 0 == y))",
        ],
    );
    let slice = (
        1usize..5,
        mostly(hostile, vec!["1"], vec!["2", "0", "-1"]),
        mostly(hostile, vec!["'h100'", "'a100'"], vec!["7", "{bogus: 1}"]),
        quantity(hostile),
        prop::bool::weighted(0.9),
    );
    let claim = (
        mostly(hostile, vec!["1", "2", "4"], vec!["0", "-1", "99999999999"]),
        mostly(hostile, vec!["ExactCount", "All"], vec!["Bogus"]),
        mostly(
            hostile,
            vec!["gpu.example.com"],
            vec!["missing.example.com"],
        ),
        any::<bool>(),
    );
    (
        selector,
        prop::collection::vec(slice, nodes..=nodes),
        prop::collection::vec(claim, pods..=pods),
    )
        .prop_map(|(selector, slices, claims)| {
            let mut docs = vec![format!(
                "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: gpu.example.com}}\nspec: {{selectors: [{{cel: {{expression: \"{selector}\"}}}}]}}\n"
            )];
            for (n, (devices, count, model, memory, local)) in slices.into_iter().enumerate() {
                let devices: Vec<String> = (0..devices)
                    .map(|d| format!("{{name: gpu-{d}, attributes: {{model: {{string: {model}}}, root: {{int: {}}}}}, capacity: {{memory: {{value: '{memory}'}}}}}}", d / 2))
                    .collect();
                let reach = if local { format!("nodeName: n{n}") } else { "allNodes: true".into() };
                docs.push(format!(
                    "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: s{n}}}\nspec: {{driver: gpu.example.com, {reach}, pool: {{name: p{n}, generation: 1, resourceSliceCount: {count}}}, devices: [{}]}}\n",
                    devices.join(", ")
                ));
            }
            for (i, (count, mode, class, constrained)) in claims.into_iter().enumerate() {
                let constraint = if constrained {
                    ", constraints: [{matchAttribute: gpu.example.com/root}]"
                } else {
                    ""
                };
                docs.push(format!(
                    "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: c{i}, namespace: ns}}\nspec: {{devices: {{requests: [{{name: r, exactly: {{deviceClassName: {class}, allocationMode: {mode}, count: {count}}}}}]{constraint}}}}}\n"
                ));
            }
            docs
        })
}

fn manifest() -> impl Strategy<Value = String> {
    // One manifest in three is hostile throughout (garbage, values beyond 2^60 on our pods);
    // the others only where Basalt must cope (foreign pods' fields, huge but valid values).
    let shape = (1usize..5, 0usize..8, prop::bool::weighted(0.33));
    shape.prop_flat_map(|(nodes, pods, hostile)| {
        (
            (0..nodes).map(|i| node(i, hostile)).collect::<Vec<_>>(),
            (0..pods).map(|i| pod(i, nodes, hostile)).collect::<Vec<_>>(),
            (0..3).map(|i| group(i, hostile)).collect::<Vec<_>>(),
            (0..3).map(|i| queue(i, hostile)).collect::<Vec<_>>(),
            any::<i32>(),
            dra(nodes, pods, hostile),
            prop::collection::vec(any::<bool>(), pods..=pods),
        )
            .prop_map(|(nodes, pods, groups, queues, priority, dra, claiming)| {
                // Some pods name their claim (a pod document ends with its status line).
                let pods: Vec<String> = (pods.into_iter().zip(claiming).enumerate())
                    .map(|(i, (p, claims))| match claims {
                        true => p.replacen(
                            "  containers: [",
                            &format!("  resourceClaims: [{{name: r, resourceClaimName: c{i}}}]\n  containers: ["),
                            1,
                        ),
                        false => p,
                    })
                    .collect();
                let class = format!(
                    "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: high}}\nvalue: {priority}\n"
                );
                let mut docs = vec![class];
                docs.extend(nodes);
                docs.extend(pods);
                docs.extend(groups);
                docs.extend(queues);
                docs.extend(dra);
                docs.join("---\n")
            })
    })
}

// ---------------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------------

/// Reads, converts and schedules `text`; checks every property; returns what happened.
fn run(text: &str) -> Result<&'static str, TestCaseError> {
    let loaded = match read_objects(LABEL, text) {
        Ok(l) => l,
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.starts_with(&format!("{LABEL}: document ")), "{msg}");
            return Ok("read error");
        }
    };
    let options = ConvertOptions::default();
    let (snapshot, _warnings) = match build_snapshot_with_warnings(&loaded.objects, &options) {
        Ok(s) => s,
        Err(e) => {
            // An object the engine made itself (the implicit `default` queue) has no origin.
            prop_assert!(
                e.origin.as_deref().is_some_and(|o| o.starts_with(LABEL))
                    || (!e.kind.is_empty() && !e.object.is_empty()),
                "{e}"
            );
            prop_assert!(!e.field.is_empty(), "{e}");
            return Ok("conversion error");
        }
    };
    let plan = basalt_plugins::schedule(&snapshot, &basalt_plugins::Config::default());
    check_plan(&snapshot, &plan)?;
    Ok("plan")
}

/// No binding puts its node over the allocatable in anything the pod requests (counting what
/// is bound already: this plan's evictions free room for later cycles, not for its bindings),
/// and every GPU id given is a free GPU of the node, given once.
fn check_plan(snapshot: &Snapshot, plan: &Plan) -> Result<(), TestCaseError> {
    let tasks: HashMap<&str, usize> = snapshot
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (&*t.name, i))
        .collect();
    let nodes: HashMap<&str, NodeId> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.id))
        .collect();
    let width = snapshot.resources.len();
    let mut used: Vec<Vec<i128>> = snapshot
        .node_used
        .iter()
        .map(|u| {
            (0..width)
                .map(|r| i128::from(u.get(basalt_engine::ResourceId(r as u16))))
                .collect()
        })
        .collect();
    let mut gpus_used = snapshot.node_gpus_used.clone();
    for b in &plan.bindings {
        let task = &snapshot.tasks[*tasks
            .get(b.pod.as_str())
            .ok_or_else(|| TestCaseError::fail(format!("binding of unknown pod {}", b.pod)))?];
        prop_assert!(
            !matches!(task.state, TaskState::Bound(_)),
            "{} bound again",
            b.pod
        );
        let node = *nodes
            .get(b.node.as_str())
            .ok_or_else(|| TestCaseError::fail(format!("binding to unknown node {}", b.node)))?;
        let n = node.0 as usize;
        for (r, v) in task.request.iter() {
            used[n][r.0 as usize] += i128::from(v);
        }
        let allocatable = &snapshot.nodes[n].allocatable;
        for (r, v) in task.request.iter() {
            if v > 0 {
                let (have, cap) = (used[n][r.0 as usize], i128::from(allocatable.get(r)));
                prop_assert!(
                    have <= cap,
                    "{} on {}: {} used {have} of {cap}",
                    b.pod,
                    b.node,
                    snapshot.resources.name(r)
                );
            }
        }
        for &g in &b.gpus {
            prop_assert!(
                (g as usize) < snapshot.nodes[n].gpus.len(),
                "{}: GPU {g} of {}",
                b.pod,
                b.node
            );
            prop_assert!(
                gpus_used[n] & (1 << g) == 0,
                "{}: GPU {g} of {} given twice",
                b.pod,
                b.node
            );
            gpus_used[n] |= 1 << g;
        }
    }
    // No DRA device goes to two claims, nor to one allocated before; each claim's pod is bound
    // to the claim's node.
    let mut taken: std::collections::HashSet<(String, String, String)> = (snapshot.dra.allocated)
        .iter()
        .map(|d| {
            let d = &snapshot.dra.devices[d as usize];
            (d.driver.to_string(), d.pool.to_string(), d.name.to_string())
        })
        .collect();
    for c in &plan.claim_allocations {
        let bound = plan.bindings.iter().find(|b| b.pod == c.pod);
        prop_assert_eq!(bound.map(|b| b.node.as_str()), Some(c.node.as_str()));
        for r in &c.results {
            let key = (r.driver.clone(), r.pool.clone(), r.device.clone());
            prop_assert!(
                r.admin_access || taken.insert(key),
                "{}: device {} twice",
                c.claim,
                r.device
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn hostile_manifests_read_convert_and_schedule_safely(text in manifest()) {
        run(&text)?;
    }
}

/// One mutation of a manifest's bytes.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, &'static str),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ": ",
        "- ",
        "\n",
        "  ",
        "\"",
        "'",
        "#",
        "|",
        ">",
        ",",
        "---\n",
        "9223372036854775807",
        "1Ei",
        "-1",
        "\t",
        "\u{2028}",
        "\0",
        "&a ",
        "*a",
        "!!str ",
        "{a: {a: {a: {a: {a: {a: {a: {a: ",
        "[[[[[[[[[[[[[[[[",
    ]);
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), token).prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 1usize..256).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn mutate(base: &str, mutations: &[Mutation]) -> String {
    let mut bytes = base.as_bytes().to_vec();
    for m in mutations {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Flip(i, b) => {
                if !bytes.is_empty() {
                    bytes[i % len] = b;
                }
            }
            Mutation::Insert(i, t) => {
                let at = i % (bytes.len() + 1);
                bytes.splice(at..at, t.bytes());
            }
            Mutation::Delete(i, n) => {
                let at = i % len;
                let end = (at + n).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            Mutation::Duplicate(i, n) => {
                let at = i % len;
                let end = (at + n).min(bytes.len());
                let copy: Vec<u8> = bytes[at.min(end)..end].to_vec();
                bytes.splice(end..end, copy);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn mutated_example_cluster_reads_converts_and_schedules_safely(
        mutations in prop::collection::vec(mutation(), 1..8),
    ) {
        run(&mutate(EXAMPLE, &mutations))?;
    }

    /// The pre-scan of `basalt_crds::limits` never sees less nesting than the YAML parser:
    /// whatever it lets through stays under the parser's own recursion limit (128, twice the
    /// pre-scan's 64). Aliases are left out: an alias repeats a whole node, so it can nest
    /// deeper than the text does.
    #[test]
    fn the_nesting_pre_scan_never_misses_nesting(
        tokens in prop::collection::vec(prop::sample::select(vec![
            "[", "]", "{", "}", ",", ": ", ":", "- ", "-", "? ", "\n", " ", "  ", "\t", "\"", "'",
            "\\", "#", " #", "|", ">", "|-\n", ">2\n", "a", "x: ", "---\n", "...\n", "\r\n",
            "\u{2028}", "!t ", "%YAML 1.1\n", "''", "{a: ", "[[[[[[[[[[[[[[[[[[[[", "\n  ",
            "{a: {a: {a: {a: {a: {a: {a: {a: {a: {a: ",
        ]), 0..120),
    ) {
        let text: String = tokens.concat();
        if basalt_crds::limits::check("t.yaml", &text).is_ok() {
            if let Err(e) = read_objects("t.yaml", &text) {
                prop_assert!(!e.to_string().contains("recursion limit exceeded"), "{text:?}: {e}");
            }
        }
    }
}

/// The oracle itself catches what it is for: a binding over the node's allocatable.
#[test]
fn the_plan_check_catches_an_overcommitted_node() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '1', pods: '10'}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {schedulerName: basalt, containers: [{name: c, resources: {requests: {cpu: '1'}}}]}\n";
    let loaded = read_objects(LABEL, text).unwrap();
    let (snapshot, _) =
        build_snapshot_with_warnings(&loaded.objects, &ConvertOptions::default()).unwrap();
    let mut plan = basalt_plugins::schedule(&snapshot, &basalt_plugins::Config::default());
    assert_eq!(plan.bindings.len(), 1);
    check_plan(&snapshot, &plan).unwrap();
    plan.bindings.push(plan.bindings[0].clone());
    assert!(check_plan(&snapshot, &plan).is_err());
}

/// Sums over many values, each within Basalt's limit of 2^60, overflowed in the engine and the
/// queue crate before their sums saturated: nine foreign pods clamped to 2^60 bytes on one node
/// (`Resources::add` in `Snapshot::build`: in a release build the node's usage wrapped negative
/// and it looked free), and eight queues deserving 2^60 pods (the sum over children in
/// `basalt_queue::fairshare::split`).
#[test]
fn many_large_values_sum_safely() {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n0}\nstatus: {allocatable: {memory: 1Ei, pods: '110'}}\n";
    let mut pods = node.to_string();
    for i in 0..9 {
        pods.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\nspec: {{nodeName: n0, containers: [{{name: c, resources: {{requests: {{memory: 8Ei}}}}}}]}}\nstatus: {{phase: Running}}\n"
        ));
    }
    pods.push_str("---\napiVersion: v1\nkind: Pod\nmetadata: {name: mine}\nspec: {schedulerName: basalt, containers: [{name: c, resources: {requests: {memory: '1'}}}]}\n");
    let mut queues = node.to_string();
    for i in 0..8 {
        queues.push_str(&format!(
            "---\napiVersion: scheduling.basalt.dev/v1alpha1\nkind: Queue\nmetadata: {{name: q{i}}}\nspec: {{weight: 1, deserved: {{pods: 1Ei}}}}\n"
        ));
    }
    for text in [pods, queues] {
        assert!(run(&text).is_ok(), "{text}");
    }
}
