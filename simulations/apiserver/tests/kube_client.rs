//! End to end through kube-rs 5: the client, watcher and reflector against the server on loopback.

use std::time::Duration;

use basalt_apiserver::{Config, FaultRule, Faults, Handle, Verb, REFUSE_EVICTION_ANNOTATION};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

mod common;
use common::start;

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"schedulerName": "basalt", "containers": [{"name": "main", "image": "trainer:1"}]},
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}},
    }))
    .unwrap()
}

fn api_code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls a condition (no timing assertion: the bound only stops a hung test).
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test]
async fn create_get_list_replace_patch_delete() {
    let (server, client) = start(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    let a = pods
        .create(&pp, &pod("a", json!({"app": "web", "tier": "front"})))
        .await
        .unwrap();
    assert_eq!(a.metadata.generation, Some(1));
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    assert_eq!(a.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    pods.create(&pp, &pod("b", json!({"app": "db"})))
        .await
        .unwrap();
    let (code, reason) = api_code(pods.create(&pp, &pod("a", json!({}))).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    // generateName
    let mut g = pod("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("worker-".into());
    let g = pods.create(&pp, &g).await.unwrap();
    assert!(g.name_any().starts_with("worker-") && g.name_any().len() == "worker-".len() + 5);

    // selectors
    let names =
        |l: kube::core::ObjectList<Pod>| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>();
    let list = pods
        .list(&ListParams::default().labels("app in (web,db),tier!=back"))
        .await
        .unwrap();
    assert_eq!(names(list.clone()), ["a", "b"]);
    assert!(list
        .metadata
        .resource_version
        .as_deref()
        .is_some_and(|v| v.parse::<u64>().is_ok()));
    assert_eq!(
        names(
            pods.list(&ListParams::default().labels("!tier"))
                .await
                .unwrap()
        )
        .len(),
        2
    );
    assert_eq!(
        names(
            pods.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    let e = pods
        .list(&ListParams::default().labels("app in web"))
        .await
        .unwrap_err();
    assert_eq!(api_code(e).0, 400);

    // replace with a stale resourceVersion
    let mut fresh = pods.get("a").await.unwrap();
    let stale = fresh.clone();
    fresh.labels_mut().insert("x".into(), "1".into());
    let fresh = pods.replace("a", &pp, &fresh).await.unwrap();
    assert_eq!(fresh.metadata.generation, Some(1), "labels are not spec");
    let (code, reason) = api_code(pods.replace("a", &pp, &stale).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    // spec change bumps generation; status writes do not, and main writes ignore status
    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"priority": 5}, "status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Pending"));
    let st = pods
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"priority": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(st.metadata.generation, Some(2));
    assert_eq!(st.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(st.spec.unwrap().priority, Some(5));

    // JSON patch and server-side apply
    let j = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/metadata/labels/y", "value": "2"}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(j.labels().get("y").map(String::as_str), Some("2"));
    let applied = pods
        .patch("c", &PatchParams::apply("test"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c"}, "spec": {"containers": [{"name": "m", "image": "i"}]}})))
        .await
        .unwrap();
    assert_eq!(applied.name_any(), "c");

    // a merge patch carrying a stale resourceVersion is refused
    let e = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"z": "1"}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(e).0, 409);

    pods.delete("a", &DeleteParams::default()).await.unwrap();
    let (code, reason) = api_code(pods.get("a").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(server.get("v1", "Pod", "default", "a").is_none());
    assert!(server.get("v1", "Pod", "default", "b").is_some());

    // no namespace, no pods
    let nowhere: Api<Pod> = Api::namespaced(client, "nowhere");
    assert_eq!(
        api_code(nowhere.create(&pp, &pod("a", json!({}))).await.unwrap_err()).0,
        404
    );
}

#[tokio::test]
async fn binding_sets_node_name_once() {
    let (server, client) = start(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    Api::<Node>::all(client)
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p", "annotations": {"scheduling.basalt.dev/gpu-ids": "0,1"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    });
    let status: kube::core::Status = pods
        .create_subresource("binding", "p", &PostParams::default(), &binding)
        .await
        .unwrap();
    assert!(status.is_success(), "{status:?}");
    let p = pods.get("p").await.unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(
        p.annotations()
            .get("scheduling.basalt.dev/gpu-ids")
            .map(String::as_str),
        Some("0,1")
    );
    let conds = p.status.unwrap().conditions.unwrap();
    assert!(conds
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True"));

    let again = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n2"}});
    let e = pods
        .create_subresource::<_, kube::core::Status>("binding", "p", &PostParams::default(), &again)
        .await
        .unwrap_err();
    let (code, reason) = api_code(e);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        server.get("v1", "Pod", "default", "p").unwrap()["spec"]["nodeName"],
        "n1"
    );
}

/// kube-apiserver's binding REST refuses a pod that is not ready for scheduling: 409, "pod p
/// has non-empty .spec.schedulingGates"; once the gates are removed the same binding succeeds.
#[tokio::test]
async fn binding_a_gated_pod_conflicts_until_ungated() {
    let (server, client) = start(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut gated = pod("p", json!({}));
    gated.spec.as_mut().unwrap().scheduling_gates = Some(vec![serde_json::from_value(
        json!({"name": "example.com/gate"}),
    )
    .unwrap()]);
    pods.create(&PostParams::default(), &gated).await.unwrap();
    let binding = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    let e = pods
        .create_subresource::<_, kube::core::Status>(
            "binding",
            "p",
            &PostParams::default(),
            &binding,
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = e else {
        panic!("expected an API error, got {e:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on pods/binding \"p\": pod p has non-empty .spec.schedulingGates"
    );
    assert!(server.get("v1", "Pod", "default", "p").unwrap()["spec"]
        .get("nodeName")
        .is_none());

    server
        .patch(
            "v1",
            "Pod",
            "default",
            "p",
            basalt_apiserver::PatchKind::Merge,
            &json!({"spec": {"schedulingGates": null}}),
        )
        .unwrap();
    pods.create_subresource::<_, kube::core::Status>(
        "binding",
        "p",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    assert_eq!(
        server.get("v1", "Pod", "default", "p").unwrap()["spec"]["nodeName"],
        "n1"
    );
}

#[tokio::test]
async fn eviction_respects_budgets_and_the_refusal_annotation() {
    let (server, client) = start(Config {
        run_bound_pods: true,
        ..Default::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    for name in ["w0", "w1", "w2"] {
        pods.create(&pp, &pod(name, json!({"job": "train"})))
            .await
            .unwrap();
        let b = json!({"metadata": {"name": name}, "target": {"kind": "Node", "name": "n1"}});
        let _: kube::core::Status = pods
            .create_subresource("binding", name, &pp, &b)
            .await
            .unwrap();
    }
    assert_eq!(
        server.get("v1", "Pod", "default", "w0").unwrap()["status"]["phase"],
        "Running"
    );
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"job": "train"}}},
    }))
    .unwrap();
    Api::<PodDisruptionBudget>::namespaced(client.clone(), "default")
        .create(&pp, &pdb)
        .await
        .unwrap();

    // 3 healthy, 2 needed: one may go, the next may not.
    let st = pods.evict("w0", &EvictParams::default()).await.unwrap();
    assert!(st.is_success());
    assert!(server.get("v1", "Pod", "default", "w0").is_none());
    let (code, reason) = api_code(pods.evict("w1", &EvictParams::default()).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (429, "TooManyRequests"));
    assert!(server.get("v1", "Pod", "default", "w1").is_some());

    // The test annotation refuses even where no budget applies; pending pods go freely.
    let mut lone = pod("lone", json!({}));
    lone.annotations_mut()
        .insert(REFUSE_EVICTION_ANNOTATION.into(), "true".into());
    pods.create(&pp, &lone).await.unwrap();
    assert_eq!(
        api_code(
            pods.evict("lone", &EvictParams::default())
                .await
                .unwrap_err()
        )
        .0,
        429
    );
    pods.create(&pp, &pod("pending", json!({"job": "train"})))
        .await
        .unwrap();
    pods.evict("pending", &EvictParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_code(
            pods.evict("ghost", &EvictParams::default())
                .await
                .unwrap_err()
        )
        .0,
        404
    );
}

#[tokio::test]
async fn node_status_subresource() {
    let (_server, client) = start(Config::default()).await;
    let nodes: Api<Node> = Api::all(client);
    let n = nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    assert!(n.status.is_some(), "nodes keep status on create");
    let mut cordon = n.clone();
    cordon.spec.get_or_insert_default().unschedulable = Some(true);
    cordon.status = None;
    let c = nodes
        .replace("n1", &PostParams::default(), &cordon)
        .await
        .unwrap();
    assert_eq!(c.metadata.generation, Some(2));
    assert!(
        c.status.is_some(),
        "a main-resource PUT keeps the stored status"
    );
    let mut st = c.clone();
    st.status
        .as_mut()
        .unwrap()
        .allocatable
        .as_mut()
        .unwrap()
        .remove("nvidia.com/gpu");
    st.spec.as_mut().unwrap().unschedulable = Some(false);
    let s = nodes
        .replace_status("n1", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(
        s.spec.unwrap().unschedulable,
        Some(true),
        "a status PUT keeps spec"
    );
    assert!(!s
        .status
        .unwrap()
        .allocatable
        .unwrap()
        .contains_key("nvidia.com/gpu"));
}

#[tokio::test]
async fn watcher_and_reflector_follow_changes_across_dropped_watches() {
    let (server, client) = start(Config {
        bookmark_interval: Duration::from_millis(50),
        ..Default::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("before", json!({})))
        .await
        .unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(pods.clone(), watcher::Config::default()))
        .applied_objects()
        .default_backoff();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    let names = || {
        let mut n: Vec<String> = reader.state().iter().map(|p| p.name_any()).collect();
        n.sort();
        n
    };
    assert_eq!(names(), ["before"]);
    pods.create(&PostParams::default(), &pod("after", json!({})))
        .await
        .unwrap();
    eventually("reflector sees the new pod", || {
        names() == ["after", "before"]
    })
    .await;

    // Drop every watch: the watcher re-watches from its last version and misses nothing.
    eventually("the watch is open", || server.open_watches() > 0).await;
    assert!(server.drop_watches() > 0);
    pods.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("third", json!({})))
        .await
        .unwrap();
    eventually("reflector catches up after the drop", || {
        names() == ["after", "third"]
    })
    .await;

    // Watches that close after every event still converge.
    server
        .set_faults(Faults {
            drop_watches_after: Some(1),
            ..Default::default()
        })
        .unwrap();
    for i in 0..5 {
        pods.create(&PostParams::default(), &pod(&format!("x{i}"), json!({})))
            .await
            .unwrap();
    }
    eventually("reflector sees all five", || names().len() == 7).await;
    task.abort();
}

#[tokio::test]
async fn watch_resumes_from_a_version_and_expires_old_ones() {
    let (server, client) = start(Config {
        history: 20,
        ..Default::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    pods.create(&pp, &pod("a", json!({"app": "x"})))
        .await
        .unwrap();
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    pods.create(&pp, &pod("b", json!({"app": "x"})))
        .await
        .unwrap();
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    pods.delete("b", &DeleteParams::default()).await.unwrap();

    // Replayed from history, through the label filter: a leaving the selector is a DELETED.
    let wp = WatchParams::default().labels("app=x").timeout(1);
    let events: Vec<(String, String)> = pods
        .watch(&wp, &rv)
        .await
        .unwrap()
        .take(3)
        .map(|e| match e.unwrap() {
            WatchEvent::Added(p) => ("ADDED".into(), p.name_any()),
            WatchEvent::Modified(p) => ("MODIFIED".into(), p.name_any()),
            WatchEvent::Deleted(p) => ("DELETED".into(), p.name_any()),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
        .await;
    assert_eq!(
        events,
        [
            ("ADDED".to_string(), "b".to_string()),
            ("DELETED".into(), "a".into()),
            ("DELETED".into(), "b".into())
        ]
    );

    // Push the version out of the window: the watch answers with an Expired (410) event.
    for i in 0..25 {
        pods.create(&pp, &pod(&format!("f{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut s = pods
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(server.resource_version() > 25);

    // Pagination: pages carry the first page's version and a continue token.
    let page = pods.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(page.items.len(), 10);
    let token = page.metadata.continue_.clone().unwrap();
    let rest = pods
        .list(&ListParams::default().limit(100).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(page.items.len() + rest.items.len(), 26);
    assert_eq!(
        rest.metadata.resource_version,
        page.metadata.resource_version
    );
    assert!(rest.metadata.continue_.is_none());
}

#[tokio::test]
async fn streaming_list_watcher_works() {
    let (_server, client) = start(Config::default()).await;
    let nodes: Api<Node> = Api::all(client);
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let cfg = watcher::Config::default().streaming_lists();
    let (reader, writer) = reflector::store();
    let task = tokio::spawn(
        reflector(writer, watcher(nodes.clone(), cfg))
            .default_backoff()
            .for_each(|_| async {}),
    );
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 1);
    nodes
        .create(&PostParams::default(), &node("n2"))
        .await
        .unwrap();
    eventually("streaming watcher sees n2", || reader.state().len() == 2).await;
    task.abort();
}

#[tokio::test]
async fn custom_resources_basalt_volcano_and_registered_crds() {
    let (server, client) = start(Config::default()).await;
    let pgs: Api<basalt_crds::PodGroup> = Api::namespaced(client.clone(), "default");
    let pg = basalt_crds::PodGroup::new(
        "g",
        basalt_crds::PodGroupSpec {
            min_member: 4,
            ..Default::default()
        },
    );
    let mut with_status = pg.clone();
    with_status.status = Some(Default::default());
    let created = pgs
        .create(&PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(
        created.status.is_none(),
        "status is ignored on create for a status subresource"
    );
    let st = pgs
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "running": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(st.status.unwrap().running, 4);
    assert_eq!(st.metadata.generation, Some(1));
    let sp = pgs
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minMember": 5}})),
        )
        .await
        .unwrap();
    assert_eq!((sp.spec.min_member, sp.metadata.generation), (5, Some(2)));
    let e = pgs
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"minMember": 6}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_code(e).0,
        415,
        "custom resources take no strategic merge patch"
    );

    let queues: Api<basalt_crds::Queue> = Api::all(client.clone());
    queues
        .create(
            &PostParams::default(),
            &basalt_crds::Queue::new("research", Default::default()),
        )
        .await
        .unwrap();
    let topo: Api<basalt_crds::NodeTopology> = Api::all(client.clone());
    topo.create(
        &PostParams::default(),
        &basalt_crds::NodeTopology::new("n1", Default::default()),
    )
    .await
    .unwrap();
    assert_eq!(
        server
            .list("scheduling.basalt.dev/v1alpha1", "NodeTopology")
            .len(),
        1
    );

    // Volcano's kinds, untyped.
    let vgvk = GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup");
    let vpg: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&vgvk));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "vg"}, "spec": {"minMember": 2, "queue": "default"},
    }))
    .unwrap();
    vpg.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(
        vpg.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // A kind registered at run time by posting its CRD.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let wgvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&wgvk));
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "size": 3})).unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(widgets.get("w").await.unwrap().data["size"], 3);
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_code(widgets.get("w").await.unwrap_err()).0, 404);
    let bad = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Sideways", "names": {"kind": "Gadget", "plural": "gadgets"}, "versions": [{"name": "v1", "served": true, "storage": true}]},
    }))
    .unwrap();
    let (code, _) = api_code(crds.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(code, 422);
}

#[tokio::test]
async fn injected_faults_reach_the_client() {
    let (server, client) = start(Config {
        seed: 42,
        ..Default::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    pods.create(&pp, &pod("p", json!({}))).await.unwrap();
    server
        .add_fault(FaultRule::error(Verb::Create, "pods/binding", 1.0, 500).times(2))
        .unwrap();
    server
        .add_fault(FaultRule::error(Verb::Get, "pods", 1.0, 503).times(1))
        .unwrap();
    let b = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    for _ in 0..2 {
        let e = pods
            .create_subresource::<_, kube::core::Status>("binding", "p", &pp, &b)
            .await
            .unwrap_err();
        assert_eq!(api_code(e), (500, "InternalError".to_string()));
    }
    let _: kube::core::Status = pods
        .create_subresource("binding", "p", &pp, &b)
        .await
        .unwrap();
    assert_eq!(api_code(pods.get("p").await.unwrap_err()).0, 503);
    assert_eq!(
        pods.get("p")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("n1")
    );
    assert_eq!(server.injected_faults(), 3);

    // A 30% rate fails some and not all, the same ones for the same seed.
    server
        .set_faults(Faults {
            rules: vec![FaultRule::error(Verb::List, "pods", 0.3, 409)],
            ..Default::default()
        })
        .unwrap();
    let mut failed = 0;
    for _ in 0..100 {
        if pods.list(&ListParams::default()).await.is_err() {
            failed += 1;
        }
    }
    assert!((10..60).contains(&failed), "{failed} of 100 failed");
    server.clear_faults();
    pods.list(&ListParams::default()).await.unwrap();

    // The admin endpoint takes the same settings as JSON.
    let http = client.clone();
    let req = http::Request::put("/admin/faults")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(
                &json!({"rules": [{"verb": "delete", "resource": "pods", "code": 409}]}),
            )
            .unwrap(),
        )
        .unwrap();
    http.request_text(req).await.unwrap();
    assert_eq!(
        api_code(
            pods.delete("p", &DeleteParams::default())
                .await
                .unwrap_err()
        )
        .0,
        409
    );
    let bad = http::Request::put("/admin/faults")
        .body(br#"{"rules": [{"probability": 2, "code": 500}]}"#.to_vec())
        .unwrap();
    assert_eq!(api_code(http.request_text(bad).await.unwrap_err()).0, 400);
}

/// A client that names itself, with a read timeout (a stalled request then fails on time).
async fn client_as(server: &Handle, agent: &str, read_timeout: Duration) -> Client {
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    cfg.default_retry = false;
    cfg.read_timeout = Some(read_timeout);
    cfg.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(agent).unwrap(),
    ));
    Client::try_from(cfg).expect("client")
}

#[tokio::test]
async fn a_stall_holds_one_client_s_requests_until_the_faults_change_and_writes_are_logged() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (server, _) = start(Config::default()).await;
    let a = client_as(&server, "replica-a", Duration::from_millis(300)).await;
    let b = client_as(&server, "replica-b", Duration::from_secs(30)).await;
    let lease = |name: &str| -> Lease {
        serde_json::from_value(json!({"metadata": {"name": name},
                                      "spec": {"holderIdentity": "replica-a"}}))
        .unwrap()
    };
    let leases_a: Api<Lease> = Api::namespaced(a.clone(), "kube-system");
    let leases_b: Api<Lease> = Api::namespaced(b.clone(), "kube-system");
    leases_a
        .create(&PostParams::default(), &lease("l1"))
        .await
        .expect("no fault yet");
    server
        .add_fault(FaultRule::stall(None, "leases").from_client("replica-a"))
        .unwrap();
    // replica-a's lease requests hang until its own read timeout gives up on them.
    let err = leases_a.get("l1").await.unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "a stall is no answer: {err:?}"
    );
    // Another client, and replica-a's other resources, are not held.
    leases_b.get("l1").await.expect("replica-b is answered");
    Api::<Pod>::namespaced(a.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("pods are answered");
    // A stalled write goes on once the settings change, as a request stuck in the network.
    server
        .set_faults(Faults {
            rules: vec![FaultRule::stall(Some(Verb::Create), "leases")],
            ..Default::default()
        })
        .unwrap();
    let held = tokio::spawn({
        let leases = leases_b.clone();
        async move { leases.create(&PostParams::default(), &lease("l2")).await }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    server.clear_faults();
    held.await.unwrap().expect("answered once released");

    // The log has the writes, by client, in the order answered; reads are not logged.
    let log: Vec<_> = server
        .requests()
        .into_iter()
        .map(|r| (r.verb, r.resource, r.namespace, r.user_agent, r.code))
        .collect();
    let create = |agent: &str| {
        (
            Verb::Create,
            "leases".to_string(),
            Some("kube-system".to_string()),
            agent.to_string(),
            201,
        )
    };
    assert_eq!(log, vec![create("replica-a"), create("replica-b")]);
    assert!(server.requests().windows(2).all(|w| w[0].seq < w[1].seq));
    // The same over HTTP.
    let req = http::Request::get("/admin/requests").body(vec![]).unwrap();
    let text = b.request_text(req).await.unwrap();
    let served: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(served["requests"][1]["userAgent"], "replica-b");
    assert_eq!(served["requests"][1]["verb"], "create");
    assert_eq!(served["requests"][1]["code"], 201);

    // A request stalled forever does not hold the server's shutdown.
    server
        .add_fault(FaultRule::stall(Some(Verb::Get), "leases"))
        .unwrap();
    let stuck = tokio::spawn(async move { leases_b.get("l1").await });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    server.shutdown().await;
    let _ = stuck.await;
}
