//! Discovery on every fixture: islands, cliques, link levels.

use std::path::PathBuf;

use basalt_nodeagent::backend::GpuBackend;
use basalt_nodeagent::discover::{discover, Discovery};
use basalt_nodeagent::fake::{parse_fixture, FakeBackend};

fn fixture(name: &str) -> Discovery {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let backend = FakeBackend::from_file(&path).unwrap();
    discover(&backend.report().unwrap()).unwrap()
}

fn row(d: &Discovery, a: usize) -> Vec<String> {
    d.matrix_smi()[a].clone()
}

#[test]
fn h100_hgx_is_one_nvswitch_island() {
    let d = fixture("h100-hgx.yaml");
    assert_eq!(d.gpus.len(), 8);
    assert_eq!(d.islands, vec![(0..8).collect::<Vec<u32>>()]);
    for a in 0..8 {
        for b in 0..8 {
            let want = if a == b { "X" } else { "NV18" };
            assert_eq!(d.matrix_smi()[a][b], want, "{a},{b}");
        }
    }
    assert_eq!(d.clique_id, None);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let g = &d.gpus[4];
    assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:9a:00.0"));
    assert_eq!(g.numa_node, Some(1));
    assert_eq!(g.nvlinks, Some(18));
    assert_eq!(g.memory_mib, Some(81559));
    assert_eq!(g.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert!(!g.mig.as_ref().unwrap().enabled);
}

#[test]
fn a100_mig_reports_instances_and_busy_ones() {
    let d = fixture("a100-mig.yaml");
    assert_eq!(d.islands, vec![(0..8).collect::<Vec<u32>>()]);
    assert_eq!(row(&d, 0)[7], "NV12");
    let m0 = d.gpus[0].mig.as_ref().unwrap();
    assert!(m0.enabled);
    let devs: Vec<(&str, u32, bool)> = m0
        .devices
        .iter()
        .map(|x| (x.profile.as_str(), x.start, x.busy))
        .collect();
    assert_eq!(devs, vec![("3g.20gb", 0, false), ("3g.20gb", 4, true)]);
    assert_eq!(d.gpus[1].mig.as_ref().unwrap().devices.len(), 7);
    // Sorted by placement, whatever order NVML listed them in.
    let g2: Vec<u32> = d.gpus[2]
        .mig
        .as_ref()
        .unwrap()
        .devices
        .iter()
        .map(|x| x.start)
        .collect();
    assert_eq!(g2, vec![0, 4, 6]);
    assert!(d.gpus[3].mig.as_ref().unwrap().devices.is_empty());
    assert!(!d.gpus[5].mig.as_ref().unwrap().enabled);
}

#[test]
fn pcie_pairs_are_two_islands_of_two() {
    let d = fixture("pcie-nvlink-pairs.yaml");
    assert_eq!(d.islands, vec![vec![0, 1], vec![2, 3]]);
    assert_eq!(row(&d, 0), vec!["X", "NV12", "SYS", "SYS"]);
    assert_eq!(row(&d, 2), vec!["SYS", "SYS", "X", "NV12"]);
    assert_eq!(d.gpus[2].numa_node, Some(1));
}

#[test]
fn dgx1_hybrid_cube_mesh_is_non_uniform() {
    let d = fixture("dgx1-v100.yaml");
    // Connected through the mesh: one island, but not all-to-all.
    assert_eq!(d.islands, vec![(0..8).collect::<Vec<u32>>()]);
    assert_eq!(
        row(&d, 0),
        vec!["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    );
    assert_eq!(
        row(&d, 5),
        vec!["SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"]
    );
    // A pair without NVLink in the same socket falls back to its PCIe level.
    assert_eq!(row(&d, 4)[0], "NV2");
    assert_eq!(row(&d, 1)[4], "SYS");
    for g in &d.gpus {
        assert_eq!(g.nvlinks, Some(6));
        assert!(g.mig.is_none());
    }
    // Legacy 4-digit remote domains are matched to the GPUs' 8-digit bus ids.
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn gb200_tray_is_one_fabric_clique() {
    let d = fixture("gb200-nvl72-tray.yaml");
    assert_eq!(d.islands, vec![vec![0, 1, 2, 3]]);
    assert_eq!(
        d.clique_id.as_deref(),
        Some("c9d4b6a2-3f1e-4b8a-9d2c-7e5f1a0b3c4d.32766")
    );
    assert_eq!(
        d.fabric_cluster_uuid.as_deref(),
        Some("c9d4b6a2-3f1e-4b8a-9d2c-7e5f1a0b3c4d")
    );
    assert_eq!(row(&d, 0), vec!["X", "NV18", "NV18", "NV18"]);
    assert_eq!(d.gpus[3].fabric_clique_id, Some(32766));
    assert_eq!(d.gpus[3].pci_bus_id.as_deref(), Some("00000019:01:00.0"));
    let t = d.node_topology("tray-7", None);
    assert_eq!(t.spec.clique_id, d.clique_id);
}

#[test]
fn no_gpu_node_is_empty() {
    let d = fixture("no-gpu.yaml");
    assert!(d.gpus.is_empty() && d.islands.is_empty() && d.clique_id.is_none());
    let t = d.node_topology("cpu-1", None);
    assert_eq!(t.spec, Default::default());
}

#[test]
fn gpus_without_nvlink_are_islands_of_one() {
    let raw = parse_fixture(
        "t",
        r#"
gpus:
- {index: 1, uuid: b, name: NVIDIA L4, memoryMiB: 23034, pciBusId: "0000:02:00.0"}
- {index: 0, uuid: a, name: NVIDIA L4, memoryMiB: 23034, pciBusId: "0000:01:00.0"}
pcieTopology: [[self, single], [single, self]]
"#,
    )
    .unwrap();
    let d = discover(&raw).unwrap();
    assert_eq!(d.islands, vec![vec![0], vec![1]]);
    assert_eq!(d.matrix_smi(), vec![vec!["X", "PIX"], vec!["PIX", "X"]]);
    assert_eq!(d.gpus[0].uuid.as_deref(), Some("a"));
}

#[test]
fn published_topology_reads_back_through_the_crds_converter() {
    // The scheduler's reader (basalt-crds) must accept what the agent publishes.
    for name in [
        "h100-hgx.yaml",
        "a100-mig.yaml",
        "pcie-nvlink-pairs.yaml",
        "dgx1-v100.yaml",
        "gb200-nvl72-tray.yaml",
        "no-gpu.yaml",
    ] {
        let t = fixture(name).node_topology("n1", Some(4));
        let text = serde_yaml::to_string(&t).unwrap();
        let loaded = basalt_crds::read_objects(name, &text).unwrap();
        assert_eq!(loaded.objects.len(), 1, "{name}");
        let basalt_crds::Object::NodeTopology(back) = &loaded.objects[0].1 else {
            panic!("{name}: not a NodeTopology");
        };
        assert_eq!(**back, t, "{name}");
    }
}

fn bad(text: &str) -> String {
    match parse_fixture("bad.yaml", text) {
        Err(e) => e.to_string(),
        Ok(raw) => discover(&raw).unwrap_err().to_string(),
    }
}

#[test]
fn malformed_fixtures_say_where() {
    let e =
        bad("gpus:\n- {index: 0, uuid: a, name: x, memoryMiB: lots, pciBusId: \"0000:01:00.0\"}\n");
    assert!(e.starts_with("bad.yaml: gpus[0].memoryMiB:"), "{e}");
    let e = bad("gpus:\n- {index: 0, uuid: a, name: x, memoryMiB: 1, pciBusId: \"0000:01:00.0\", color: red}\n");
    assert!(e.contains("unknown field `color`"), "{e}");
    let e = bad("gpus:\n- {index: 0, uuid: a, name: x, memoryMiB: 1, pciBusId: nowhere}\n");
    assert_eq!(
        e,
        "gpus[0].pciBusId: \"nowhere\" is not a PCI bus id (domain:bus:device.function)"
    );
    let e =
        bad("gpus:\n- {index: 1, uuid: a, name: x, memoryMiB: 1, pciBusId: \"0000:01:00.0\"}\n");
    assert_eq!(
        e,
        "gpus[0].index: GPU index 1 out of range: indices must be 0..1"
    );
    let two = "gpus:\n- {index: 0, uuid: a, name: x, memoryMiB: 1, pciBusId: \"0000:01:00.0\"}\n- {index: 1, uuid: b, name: x, memoryMiB: 1, pciBusId: \"0000:02:00.0\"}\n";
    let e = bad(&format!("{two}pcieTopology: [[self, node]]\n"));
    assert_eq!(e, "pcieTopology: 1 rows for 2 GPUs");
    let e = bad(&format!(
        "{two}pcieTopology: [[self, node], [node, sideways]]\n"
    ));
    assert!(
        e.starts_with("bad.yaml: pcieTopology[1][1]: unknown variant `sideways`"),
        "{e}"
    );
    let e = bad(&format!(
        "{two}pcieTopology: [[node, node], [node, self]]\n"
    ));
    assert_eq!(e, "pcieTopology[0][0]: the diagonal must be self, got Node");
    let e = bad("gpus:\n- {index: 0, uuid: a, name: x, memoryMiB: 1, pciBusId: \"0000:01:00.0\", nvlinks: [{link: 0, remotePciBusId: \"0000:01:00.0\"}]}\n");
    assert_eq!(
        e,
        "gpus[0].nvlinks[0].remotePciBusId: an NVLink to the GPU itself"
    );
    let e = bad("gpus: 3\n");
    assert!(e.starts_with("bad.yaml: gpus: invalid type"), "{e}");
    let e = bad(": : :\n");
    assert!(e.starts_with("bad.yaml: "), "{e}");
}

#[test]
fn asymmetric_reports_warn_and_use_the_larger() {
    let raw = parse_fixture(
        "t",
        r#"
gpus:
- {index: 0, uuid: a, name: x, memoryMiB: 1, pciBusId: "0000:01:00.0", nvlinks: [{link: 0, remotePciBusId: "0000:02:00.0"}, {link: 1, remotePciBusId: "0000:02:00.0"}]}
- {index: 1, uuid: b, name: x, memoryMiB: 1, pciBusId: "0000:02:00.0", nvlinks: [{link: 0, remotePciBusId: "0000:01:00.0"}]}
"#,
    )
    .unwrap();
    let d = discover(&raw).unwrap();
    assert_eq!(d.matrix_smi()[0][1], "NV2");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("GPU 0 reports 2 NVLinks to GPU 1, GPU 1 reports 1")),
        "{:?}",
        d.warnings
    );
    assert!(
        d.warnings.iter().any(|w| w.contains("no PCIe topology")),
        "{:?}",
        d.warnings
    );
}

/// Recorded on a real H200 machine (see the fixture's header): one GPU, its own island, the
/// memory NVML reports, and a MIG plan for its model.
#[test]
fn recorded_h200_is_one_gpu_island() {
    let d = fixture("h200-single.yaml");
    assert_eq!(d.gpus.len(), 1);
    assert_eq!(d.islands, vec![vec![0]]);
    assert_eq!(d.matrix_smi()[0][0], "X");
    let g = &d.gpus[0];
    assert_eq!(g.model.as_deref(), Some("NVIDIA H200"));
    assert_eq!(g.memory_mib, Some(143771));
    assert!(!g.mig.as_ref().unwrap().enabled);
    assert_eq!(d.clique_id, None);
}
