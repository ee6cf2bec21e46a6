use super::claim_gpus;

#[test]
fn a_bound_pod_keeps_the_gpus_it_names_when_they_are_valid() {
    let mut used = 0b0001;
    assert_eq!(claim_gpus(&mut used, 8, &[2, 3], 2), (0b1100, true));
    assert_eq!(used, 0b1101);
    // Taken, out of range, named twice or the wrong count: the lowest free ones instead.
    for named in [&[0, 4][..], &[4, 9], &[4, 4], &[4]] {
        let mut used = 0b0001;
        assert_eq!(
            claim_gpus(&mut used, 8, named, 2),
            (0b0110, false),
            "{named:?}"
        );
        assert_eq!(used, 0b0111);
    }
    // Fewer free GPUs than wanted: as many as there are.
    let mut used = 0b1110;
    assert_eq!(claim_gpus(&mut used, 4, &[], 3), (0b0001, false));
    // A pod that wants none claims none, whatever it names.
    assert_eq!(claim_gpus(&mut used, 4, &[1], 0), (0, true));
}

/// A pod of ours must find its job: the group it names, and no group of its own name when it
/// names none. Worded by the one check a full build and a patch share (`check_member`).
#[test]
fn a_pod_that_names_a_missing_group_or_shares_a_group_s_name_is_an_error() {
    use super::*;
    let pod = |name: &str, group: Option<&str>| PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        ours: true,
        group: group.map(str::to_string),
        ..Default::default()
    };
    let group = GroupSpec {
        namespace: "ns".into(),
        name: "g".into(),
        queue: None,
        min_member: 1,
        min_task_member: BTreeMap::new(),
        min_resources: None,
        priority: None,
        created_ms: 0,
        phase: JobPhase::Pending,
        topology: TopologySpec::default(),
        sub_groups: Vec::new(),
        schedule_timeout_ms: None,
    };
    let build = |pods: Vec<PodSpec>, groups: Vec<GroupSpec>| {
        let spec = ClusterSpec {
            pods,
            groups,
            ..Default::default()
        };
        Snapshot::build(spec).map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(
        build(vec![pod("p", Some("g"))], vec![group.clone()]),
        Ok(())
    );
    assert_eq!(
        build(vec![pod("p", Some("h"))], vec![group.clone()]),
        Err("Pod ns/p: metadata.labels/annotations (pod group): names PodGroup ns/h, which does not exist".into())
    );
    assert_eq!(
        build(vec![pod("g", None)], vec![group]),
        Err("Pod ns/g: metadata.name: has no PodGroup but a PodGroup named ns/g exists; name the group explicitly".into())
    );
}
