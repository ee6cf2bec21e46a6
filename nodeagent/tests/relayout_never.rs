//! The "Never" property of the scheduler's MIG re-layouts, against the fake backend: over random
//! sequences of processes and pods arriving and ending, layouts requested and agent rounds (with
//! failing calls and processes starting right between the decision and a destroy), no instance
//! is destroyed while its GPU is busy, every GPU's instances are always a valid layout, and the
//! status always tells what the GPU is.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;

use basalt_crd_types::{MigLayoutPhase, MigLayoutPlacement, MigLayoutStatus, WantedMigLayout};
use basalt_nodeagent::backend::{BackendError, GpuBackend};
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::mig::planner::{self, Placement};
use basalt_nodeagent::mig::profiles::{self, MigProfile};
use basalt_nodeagent::mig::relayout::{self, Round};
use basalt_nodeagent::raw::{RawGpu, RawNode};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

/// MIG-enabled GPUs of the fixture (A100 40GB).
const GPUS: u32 = 4;

/// Layouts asked for, one invalid (3g.20gb cannot start at 2).
const LAYOUTS: &[&[(&str, u32)]] = &[
    &[("7g.40gb", 0)],
    &[("3g.20gb", 0), ("3g.20gb", 4)],
    &[("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)],
    &[
        ("2g.10gb", 0),
        ("2g.10gb", 2),
        ("2g.10gb", 4),
        ("1g.5gb", 6),
    ],
    &[("1g.5gb", 0), ("1g.5gb", 1), ("1g.5gb", 2), ("1g.5gb", 3)],
    &[("3g.20gb", 2)],
];

#[derive(Clone, Debug)]
enum Op {
    Process {
        gpu: u32,
        slot: usize,
        on: bool,
    },
    Pod {
        gpu: u32,
        slot: usize,
        on: bool,
    },
    Request {
        gpu: u32,
        layout: usize,
    },
    Round {
        advance_s: i64,
        fail_create: Option<usize>,
        fail_destroy: Option<usize>,
        race: Option<u32>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let gpu = 0..GPUS;
    prop_oneof![
        (gpu.clone(), 0..8usize, any::<bool>()).prop_map(|(gpu, slot, on)| Op::Process {
            gpu,
            slot,
            on
        }),
        (gpu.clone(), 0..8usize, any::<bool>()).prop_map(|(gpu, slot, on)| Op::Pod {
            gpu,
            slot,
            on
        }),
        (gpu.clone(), 0..LAYOUTS.len()).prop_map(|(gpu, layout)| Op::Request { gpu, layout }),
        (
            prop_oneof![Just(0i64), Just(30), Just(700)],
            proptest::option::weighted(0.2, 0..4usize),
            proptest::option::weighted(0.2, 0..4usize),
            proptest::option::weighted(0.2, gpu),
        )
            .prop_map(|(advance_s, fail_create, fail_destroy, race)| Op::Round {
                advance_s,
                fail_create,
                fail_destroy,
                race
            }),
    ]
}

/// The fake backend, with calls that fail on cue, a process that starts on cue when the agent
/// reads the GPUs again, and a witness of every destroy.
struct Witness<'a> {
    fake: &'a FakeBackend,
    pods: &'a Mutex<BTreeSet<(u32, u32)>>,
    calls: Mutex<(usize, usize)>,
    fail_create: Option<usize>,
    fail_destroy: Option<usize>,
    race: Mutex<Option<u32>>,
    violations: Mutex<Vec<String>>,
}

impl GpuBackend for Witness<'_> {
    fn describe(&self) -> String {
        "witness".into()
    }
    fn report(&self) -> Result<RawNode, BackendError> {
        if let Some(gpu) = self.race.lock().unwrap().take() {
            if let Some(i) = instances(self.fake, gpu).first() {
                self.fake.set_processes(gpu, i.0, 1);
            }
        }
        self.fake.report()
    }
    fn create_mig_instance(
        &self,
        gpu: u32,
        p: &MigProfile,
        start: u32,
    ) -> Result<u32, BackendError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.0 += 1;
            c.0 - 1
        };
        if self.fail_create == Some(n) {
            return Err(BackendError::Gpu {
                gpu,
                message: "injected create failure".into(),
            });
        }
        self.fake.create_mig_instance(gpu, p, start)
    }
    fn destroy_mig_instance(&self, gpu: u32, id: u32) -> Result<(), BackendError> {
        let state = self.fake.report().unwrap();
        let g = state.gpus.iter().find(|g| g.index == gpu).unwrap();
        let pods = self.pods.lock().unwrap();
        for i in g.mig.iter().flat_map(|m| &m.instances) {
            if i.busy() || pods.contains(&(gpu, i.id)) {
                self.violations.lock().unwrap().push(format!(
                    "destroy of GPU {gpu} instance {id} while instance {} is busy",
                    i.id
                ));
            }
        }
        drop(pods);
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.1 += 1;
            c.1 - 1
        };
        if self.fail_destroy == Some(n) {
            return Err(BackendError::Gpu {
                gpu,
                message: "injected destroy failure".into(),
            });
        }
        self.fake.destroy_mig_instance(gpu, id)
    }
}

/// `(id, profile, start)` of GPU `gpu`'s instances.
fn instances(b: &FakeBackend, gpu: u32) -> Vec<(u32, String, u32)> {
    let raw = b.report().unwrap();
    let g = raw.gpus.iter().find(|g| g.index == gpu).unwrap();
    (g.mig.iter().flat_map(|m| &m.instances))
        .map(|i| (i.id, i.profile.clone(), i.start))
        .collect()
}

fn layout_of(g: &RawGpu) -> BTreeSet<(String, u32)> {
    (g.mig.iter().flat_map(|m| &m.instances))
        .map(|i| (i.profile.clone(), i.start))
        .collect()
}

fn check_valid(raw: &RawNode) -> Result<(), TestCaseError> {
    for g in raw.gpus.iter().filter(|g| g.index < GPUS) {
        let model = profiles::model_for_device(&g.name, g.memory_mib).unwrap();
        let placements: Vec<Placement> = (g.mig.iter().flat_map(|m| &m.instances))
            .map(|i| Placement {
                profile: model.profile(&i.profile).unwrap(),
                start: i.start,
            })
            .collect();
        prop_assert_eq!(
            planner::validate(model, &placements),
            None,
            "GPU {}",
            g.index
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn never_a_destroy_while_busy_always_valid_always_truthful(ops in proptest::collection::vec(op(), 1..40)) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/a100-mig.yaml");
        let fake = FakeBackend::from_file(&path).unwrap();
        let pods = Mutex::new(BTreeSet::new());
        let mut wants: Vec<WantedMigLayout> = Vec::new();
        let mut statuses: Vec<MigLayoutStatus> = Vec::new();
        let mut now: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        for op in ops {
            match op {
                Op::Process { gpu, slot, on } => {
                    let is = instances(&fake, gpu);
                    if !is.is_empty() {
                        fake.set_processes(gpu, is[slot % is.len()].0, u32::from(on));
                    }
                }
                Op::Pod { gpu, slot, on } => {
                    let is = instances(&fake, gpu);
                    if !is.is_empty() {
                        let key = (gpu, is[slot % is.len()].0);
                        let mut p = pods.lock().unwrap();
                        if on { p.insert(key); } else { p.remove(&key); }
                    }
                }
                Op::Request { gpu, layout } => {
                    let layout: Vec<MigLayoutPlacement> = LAYOUTS[layout].iter()
                        .map(|(p, s)| MigLayoutPlacement { profile: p.to_string(), start: *s }).collect();
                    match wants.iter_mut().find(|w| w.gpu == gpu) {
                        Some(w) if w.layout == layout => {}
                        Some(w) => { w.layout = layout; w.generation += 1; }
                        None => wants.push(WantedMigLayout { gpu, generation: 1, layout }),
                    }
                }
                Op::Round { advance_s, fail_create, fail_destroy, race } => {
                    now = now.checked_add(SignedDuration::from_secs(advance_s)).unwrap();
                    let before = fake.report().unwrap();
                    let witness = Witness {
                        fake: &fake,
                        pods: &pods,
                        calls: Mutex::new((0, 0)),
                        fail_create,
                        fail_destroy,
                        race: Mutex::new(race),
                        violations: Mutex::new(Vec::new()),
                    };
                    let held = |gpu: u32, id: u32| pods.lock().unwrap().contains(&(gpu, id)).then(|| "ns/p".to_string());
                    let round = Round { now, min_interval: SignedDuration::from_secs(600), dry_run: false, held: &held };
                    let decided = relayout::decide_all(&before.gpus, &wants, &statuses, &round);
                    let done = relayout::apply_all(&witness, &before.gpus, &wants, &statuses, decided, &round);
                    let violations = witness.violations.lock().unwrap().clone();
                    prop_assert!(violations.is_empty(), "{:?}", violations);
                    let after = fake.report().unwrap();
                    check_valid(&after)?;
                    for s in &done {
                        let want = wants.iter().find(|w| w.gpu == s.gpu).unwrap();
                        prop_assert_eq!(s.observed_generation, want.generation);
                        let g0 = before.gpus.iter().find(|g| g.index == s.gpu).unwrap();
                        let g1 = after.gpus.iter().find(|g| g.index == s.gpu).unwrap();
                        let wanted: BTreeSet<(String, u32)> = want.layout.iter().map(|p| (p.profile.clone(), p.start)).collect();
                        match s.phase {
                            MigLayoutPhase::Applied => {
                                prop_assert_eq!(layout_of(g1), wanted, "GPU {}: {:?}", s.gpu, s);
                                prop_assert_eq!(s.applied_generation, Some(want.generation));
                            }
                            MigLayoutPhase::Applying => prop_assert!(false, "applying after the round: {:?}", s),
                            MigLayoutPhase::Refused => {
                                prop_assert!(s.reason.as_deref().unwrap_or("").starts_with("busy"), "{:?}", s);
                                prop_assert_eq!(layout_of(g1), layout_of(g0), "refused but changed: {:?}", s);
                            }
                            MigLayoutPhase::Pending => prop_assert_eq!(layout_of(g1), layout_of(g0), "pending but changed: {:?}", s),
                            MigLayoutPhase::Failed => {
                                let reason = s.reason.as_deref().unwrap_or("");
                                if !reason.contains("restoring the previous layout failed") {
                                    prop_assert_eq!(layout_of(g1), layout_of(g0), "failed but not restored: {:?}", s);
                                }
                            }
                        }
                    }
                    statuses = done;
                }
            }
        }
    }
}
