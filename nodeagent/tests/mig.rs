//! The MIG applier on the fake backend: wanted layouts from mig-parted configs, busy instances
//! that must survive, dry runs, and failures mid-way.

use std::path::PathBuf;

use basalt_nodeagent::backend::GpuBackend;
use basalt_nodeagent::fake::FakeBackend;
use basalt_nodeagent::mig::applier::{apply, plan_steps, AppliedStep, Outcome, Step};
use basalt_nodeagent::mig::config;
use basalt_nodeagent::raw::RawNode;

const LAYOUTS: &str = r#"
version: v1
mig-configs:
  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
  all-3g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  all-disabled:
    - devices: all
      mig-enabled: false
  reuse:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.5gb": 3, "2g.10gb": 2}
    - devices: [2]
      mig-enabled: true
      mig-devices: {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}
"#;

fn a100() -> FakeBackend {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/a100-mig.yaml");
    FakeBackend::from_file(&path).unwrap()
}

fn run(backend: &FakeBackend, layout: &str, dry_run: bool) -> Vec<AppliedStep> {
    let raw = backend.report().unwrap();
    let cfg = config::parse("layouts", LAYOUTS).unwrap();
    let wants = config::wanted_for_gpus("layouts", &cfg, layout, &raw.gpus).unwrap();
    let steps = plan_steps(&raw.gpus, &wants);
    apply(backend, &raw.gpus, steps, dry_run)
}

fn layout(raw: &RawNode, gpu: usize) -> Vec<(String, u32, u32)> {
    raw.gpus[gpu]
        .mig
        .as_ref()
        .map(|m| {
            m.instances
                .iter()
                .map(|i| (i.profile.clone(), i.start, i.id))
                .collect()
        })
        .unwrap_or_default()
}

fn on(steps: &[AppliedStep], gpu: u32) -> Vec<String> {
    steps
        .iter()
        .filter(|s| s.step.gpu() == gpu)
        .map(|s| format!("{} {:?}", s.step, s.outcome))
        .collect()
}

#[test]
fn busy_instance_survives_a_layout_that_does_not_want_it() {
    let b = a100();
    let steps = run(&b, "all-1g.5gb", false);
    let after = b.report().unwrap();
    // GPU 0: the busy 3g.20gb at 4 stays, so seven 1g.5gb cannot fit: nothing is destroyed.
    assert_eq!(
        on(&steps, 0),
        vec![
            "GPU 0: blocked: GPU instance 2 (3g.20gb at 4) has 3 running process(es); kept although the layout does not want it NotApplied".to_string(),
            "GPU 0: blocked: no MIG layout on A100-40GB gives 1g.5gb=7: needs 10 compute slices (including 3g.20gb at 4:4 that must stay), A100-40GB has 7; nothing changed on this GPU NotApplied".to_string(),
        ]
    );
    assert_eq!(
        layout(&after, 0),
        vec![("3g.20gb".into(), 0, 1), ("3g.20gb".into(), 4, 2)]
    );
    // GPU 1 already has seven 1g.5gb: all kept.
    assert!(
        on(&steps, 1).iter().all(|s| s.contains("keep")),
        "{:?}",
        on(&steps, 1)
    );
    // GPU 3: seven created.
    assert_eq!(layout(&after, 3).len(), 7);
    // GPU 4: MIG off; the agent does not reset GPUs.
    assert!(
        on(&steps, 4)[0].contains("MIG mode is off"),
        "{:?}",
        on(&steps, 4)
    );
}

#[test]
fn reconfigures_idle_gpus_and_keeps_what_fits() {
    let b = a100();
    let steps = run(&b, "all-3g.20gb", false);
    let after = b.report().unwrap();
    // GPU 0 already matches.
    assert_eq!(
        on(&steps, 0),
        vec![
            "GPU 0: keep 3g.20gb at 4 (GPU instance 2) NotApplied",
            "GPU 0: keep 3g.20gb at 0 (GPU instance 1) NotApplied"
        ]
    );
    // GPU 1: seven idle 1g.5gb destroyed, then two 3g.20gb created.
    let g1 = on(&steps, 1);
    assert_eq!(
        g1.iter()
            .filter(|s| s.contains("destroy") && s.ends_with("Done"))
            .count(),
        7
    );
    assert_eq!(
        &g1[7..],
        [
            "GPU 1: create 3g.20gb at 0 Done",
            "GPU 1: create 3g.20gb at 4 Done"
        ]
    );
    assert_eq!(
        layout(&after, 1)
            .iter()
            .map(|(p, s, _)| (p.as_str(), *s))
            .collect::<Vec<_>>(),
        vec![("3g.20gb", 0), ("3g.20gb", 4)]
    );
    // GPU 2: the busy 2g.10gb at 4 blocks a second 3g.20gb; its other instances stay too.
    let g2 = on(&steps, 2);
    assert!(
        g2.iter()
            .any(|s| s.contains("busy") || s.contains("running process")),
        "{g2:?}"
    );
    assert!(g2.iter().all(|s| !s.contains("destroy")), "{g2:?}");
    assert_eq!(layout(&after, 2).len(), 3);
    // Applying again changes nothing.
    let again = run(&b, "all-3g.20gb", false);
    assert!(
        again
            .iter()
            .all(|s| matches!(s.step, Step::Keep { .. } | Step::Blocked { .. })),
        "{again:?}"
    );
}

#[test]
fn reuses_idle_instances_where_the_layout_allows() {
    let b = a100();
    let steps = run(&b, "reuse", false);
    let count = |gpu, kind: &str| {
        steps
            .iter()
            .filter(|s| s.step.gpu() == gpu && s.step.kind() == kind)
            .count()
    };
    // GPU 1: two 2g.10gb take four of the seven 1g.5gb slices; the other three are kept.
    assert_eq!(
        (count(1, "keep"), count(1, "destroy"), count(1, "create")),
        (3, 4, 2)
    );
    // GPU 2 already has exactly this.
    assert_eq!(
        (count(2, "keep"), count(2, "destroy"), count(2, "create")),
        (3, 0, 0)
    );
    assert!(steps.iter().all(|s| s.outcome != Outcome::Skipped));
    let after = b.report().unwrap();
    let mut g1: Vec<_> = layout(&after, 1)
        .into_iter()
        .map(|(p, s, _)| (p, s))
        .collect();
    g1.sort_by_key(|x| x.1);
    assert_eq!(g1.len(), 5);
    assert_eq!(g1.iter().filter(|(p, _)| p == "2g.10gb").count(), 2);
}

#[test]
fn dry_run_changes_nothing() {
    let b = a100();
    let before = b.report().unwrap();
    let steps = run(&b, "all-3g.20gb", true);
    assert!(steps.iter().any(|s| s.step.kind() == "create"));
    assert!(steps.iter().all(|s| s.outcome == Outcome::NotApplied));
    assert_eq!(b.report().unwrap(), before);
}

#[test]
fn disabling_destroys_idle_instances_only() {
    let b = a100();
    let steps = run(&b, "all-disabled", false);
    let after = b.report().unwrap();
    assert_eq!(layout(&after, 0), vec![("3g.20gb".into(), 4, 2)]);
    assert!(layout(&after, 1).is_empty());
    assert_eq!(
        layout(&after, 2).iter().map(|x| x.1).collect::<Vec<_>>(),
        vec![4]
    );
    assert!(on(&steps, 3)
        .iter()
        .any(|s| s.contains("needs a GPU reset")));
    // MIG mode itself is never switched.
    assert!(after.gpus[1].mig.as_ref().unwrap().enabled);
}

#[test]
fn an_instance_that_turns_busy_before_destroy_survives_and_stops_the_gpu() {
    let b = a100();
    let raw = b.report().unwrap();
    let cfg = config::parse("layouts", LAYOUTS).unwrap();
    let wants = config::wanted_for_gpus("layouts", &cfg, "all-3g.20gb", &raw.gpus).unwrap();
    let steps = plan_steps(&raw.gpus, &wants);
    // A workload starts on GPU 1's first 1g.5gb between planning and applying.
    assert!(b.set_processes(1, 7, 1));
    let applied = apply(&b, &raw.gpus, steps, false);
    let g1 = on(&applied, 1);
    assert!(
        g1[0].contains("destroy 1g.5gb at 0") && g1[0].contains("in use by running processes"),
        "{g1:?}"
    );
    assert!(g1[1..].iter().all(|s| s.ends_with("Skipped")), "{g1:?}");
    let after = b.report().unwrap();
    assert_eq!(layout(&after, 1).len(), 7);
}

#[test]
fn a_huge_instance_count_is_refused_by_the_layout_reader() {
    // 4294967295 sized a 32 GB allocation before the count was checked.
    let text = "mig-configs:\n  huge:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 1, \"3g.20gb\": 4294967295}\n";
    let cfg = config::parse("cm", text).unwrap();
    let raw = a100().report().unwrap();
    let e = config::wanted_for_gpus("cm", &cfg, "huge", &raw.gpus).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cm: mig-configs.huge[0].mig-devices.\"3g.20gb\": 4294967295 instances; no GPU holds more than 7 of one profile"
    );
    // Other layouts of the same config still resolve.
    let fine = "  fine:\n    - devices: all\n      mig-enabled: false\n";
    let cfg = config::parse("cm", &format!("{text}{fine}")).unwrap();
    assert!(config::wanted_for_gpus("cm", &cfg, "fine", &raw.gpus).is_ok());
}

#[test]
fn the_planner_checks_counts_before_sizing_anything_by_them() {
    use basalt_nodeagent::mig::planner::{plan_around, Placement, Wanted};
    use basalt_nodeagent::mig::profiles::A100_40GB;
    // Built directly, past the readers: u32::MAX wanted besides one kept (the sum wraps in u32).
    let kept = [Placement {
        profile: A100_40GB.profile("1g.5gb").unwrap(),
        start: 0,
    }];
    let wanted = Wanted([("1g.5gb".to_string(), u32::MAX)].into());
    let e = plan_around(&A100_40GB, &wanted, &kept, |_, _| 0).unwrap_err();
    assert!(e.is_impossible(), "{e}");
    assert!(
        e.to_string().contains(
            "A100-40GB allows at most 7 1g.5gb instance(s), 4294967295 wanted besides 1 that must stay"
        ),
        "{e}"
    );
}
