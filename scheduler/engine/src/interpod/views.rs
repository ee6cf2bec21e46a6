//! What selects a task: the counters it counts in, the held terms that select it and how it
//! matches its own terms. Derived once per distinct (rules, namespace, labels the selectors
//! read) and shared, so a gang's members cost one derivation.

use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;

use super::{Guard, InterPod, Rules};
use crate::hash::Map;
use crate::model::{PodMeta, TaskId};
use crate::snapshot::Snapshot;

/// Per task, derived once when first asked.
#[derive(Default)]
pub(super) struct TaskView {
    /// Counters that select the pod (it counts in them when placed).
    pub(super) counts_in: Vec<u32>,
    /// Held terms that select the pod.
    pub(super) selected_by: Vec<u32>,
    pub(super) guard: OnceCell<Guard>,
    pub(super) preferences: OnceCell<bool>,
    /// Whether the pod matches all its own required affinity terms (the first-pod rule).
    pub(super) self_affinity: bool,
    /// Per spread rule: whether the pod matches its selector.
    pub(super) self_spread: Vec<bool>,
}

/// Views shared between tasks alike (see [`InterPod::view`]).
#[derive(Default)]
pub(super) struct SharedViews {
    /// By rules and metadata value (pods alike share one, see `snapshot::meta`).
    by_meta: Map<(Option<*const Rules>, *const PodMeta), Rc<TaskView>>,
    /// By [`InterPod::likeness`]: the tasks whose views were derived, to compare with.
    by_likeness: Map<u64, Vec<(TaskId, Rc<TaskView>)>>,
}

impl InterPod {
    /// The counters that select a pod (a terminating pod: none of spread's).
    pub(super) fn counts_in(&self, pod: &PodMeta) -> Vec<u32> {
        let mut ids = self.counter_index.candidates(&pod.labels);
        let ns = &self.namespaces;
        ids.retain(|&c| {
            let key = &self.counter_keys[c as usize];
            !(key.spread && pod.terminating) && key.all.iter().all(|m| m.matches(pod, ns))
        });
        ids
    }

    pub(super) fn view(&self, snap: &Snapshot, task: TaskId) -> &TaskView {
        self.views[task.index()].get_or_init(|| {
            let rules = self.task_rules[task.index()].as_ref().map(Arc::as_ptr);
            let same = (rules, Arc::as_ptr(&snap.task(task).meta));
            let mut shared = self.shared_views.borrow_mut();
            if let Some(v) = shared.by_meta.get(&same) {
                return v.clone();
            }
            let alike = shared
                .by_likeness
                .entry(self.likeness(snap, task))
                .or_default();
            let view = match alike.iter().find(|(t, _)| self.alike(snap, *t, task)) {
                Some((_, v)) => v.clone(),
                None => {
                    let view = Rc::new(self.derive_view(snap, task));
                    alike.push((task, view.clone()));
                    view
                }
            };
            shared.by_meta.insert(same, view.clone());
            view
        })
    }

    /// The task's rules, namespace, whether it is terminating and the labels selectors read,
    /// hashed: what its view depends on.
    fn likeness(&self, snap: &Snapshot, task: TaskId) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let meta = &snap.task(task).meta;
        let mut h = foldhash::fast::FixedState::default().build_hasher();
        (self.task_rules[task.index()].as_ref())
            .map(Arc::as_ptr)
            .hash(&mut h);
        meta.namespace.hash(&mut h);
        meta.terminating.hash(&mut h);
        for k in &self.selector_keys {
            meta.labels.get(k).hash(&mut h);
        }
        h.finish()
    }

    fn alike(&self, snap: &Snapshot, a: TaskId, b: TaskId) -> bool {
        let (ra, rb) = (&self.task_rules[a.index()], &self.task_rules[b.index()]);
        let (ma, mb) = (&snap.task(a).meta, &snap.task(b).meta);
        let same_rules = match (ra, rb) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            (None, None) => true,
            _ => false,
        };
        same_rules
            && ma.namespace == mb.namespace
            && ma.terminating == mb.terminating
            && (self.selector_keys.iter()).all(|k| ma.labels.get(k) == mb.labels.get(k))
    }

    fn derive_view(&self, snap: &Snapshot, task: TaskId) -> TaskView {
        let meta = &snap.task(task).meta;
        let ns = &self.namespaces;
        let mut selected_by = self.held_index.candidates(&meta.labels);
        selected_by.retain(|&h| self.held_keys[h as usize].matcher.matches(meta, ns));
        let rules = self.task_rules[task.index()].as_deref();
        TaskView {
            counts_in: self.counts_in(meta),
            selected_by,
            self_affinity: (rules.and_then(|r| r.affinity.as_ref()))
                .is_some_and(|(_, all)| all.iter().all(|m| m.matches(meta, ns))),
            self_spread: (rules.into_iter().flat_map(|r| &r.spread))
                .map(|(_, m)| m.matches(meta, ns))
                .collect(),
            ..TaskView::default()
        }
    }
}
