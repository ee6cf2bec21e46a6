//! scheduler-plugins' PodGroups read as Basalt's (`types::scheduler_plugins`).

use basalt_crds::{read_objects, Object};

#[test]
fn read_as_basalt_groups_with_the_plugin_s_defaults() {
    let text = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n\
                metadata: {name: a, namespace: t}\n\
                spec: {minMember: 4, minResources: {cpu: \"8\"}, scheduleTimeoutSeconds: 30}\n\
                ---\napiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n\
                metadata: {name: b, namespace: t}\n";
    let loaded = read_objects("f", text).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let groups: Vec<_> = (loaded.objects.iter())
        .map(|(_, o)| match o {
            Object::PodGroup(g) => (
                g.spec.min_member,
                g.spec.min_resources.len(),
                g.spec.schedule_timeout_seconds,
            ),
            other => panic!("{}", other.kind()),
        })
        .collect();
    assert_eq!(
        groups,
        [(4, 1, Some(30)), (0, 0, None)],
        "minMember defaults to 0"
    );
}

#[test]
fn a_negative_minimum_names_the_object_and_field() {
    let text = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n\
                metadata: {name: a, namespace: t}\nspec: {minMember: -1}\n";
    let e = read_objects("f", text).unwrap_err().to_string();
    assert!(
        e.contains("PodGroup t/a") && e.contains("spec.minMember"),
        "{e}"
    );
}
