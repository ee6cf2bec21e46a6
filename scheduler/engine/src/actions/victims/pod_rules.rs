//! The preemptor's inter-pod rules in the victim search, as kube-scheduler's DefaultPreemption
//! sees them: pods the preemptor conflicts with on a node are victims just as pods holding what
//! it lacks are, and a set of victims suffices only when the rules let it onto the node once
//! the set is gone.
//!
//! - A pod that alone refuses it there (its required anti-affinity selects the pod, the pod's
//!   own required anti-affinity repels it, the pod holds a host port or an in-tree disk it
//!   needs) must go: it is taken before any other victim, and a node where one of them may not
//!   be taken (a higher priority, another queue, the preemptor's own gang) is no candidate.
//! - A pod one of its `DoNotSchedule` spread constraints counts may go: it is a candidate in
//!   the policy's order, kept when the skew is within `maxSkew` without taking it.
//! - Evictions never bring pods: a node its required pod affinity finds no pod for stays out,
//!   and a set that takes away the pods its affinity needs does not suffice.
//!
//! A preemptor with no such rule (and selected by no pod's required anti-affinity) has none
//! here: the search is the resources' alone.

use crate::interpod::{Check, Conflict};
use crate::model::{NodeId, TaskId};
use crate::session::{Session, TaskStatus};

/// The preemptor's rules on one node of the search.
pub(super) struct NodeRules<'c, 'a> {
    check: &'c Check<'a>,
    node: NodeId,
    /// Bound pods on the node each of which alone refuses the preemptor there.
    pub(super) blocking: Vec<TaskId>,
    /// Bound pods on the node its spread constraints count.
    counted: Vec<TaskId>,
}

impl<'c, 'a> NodeRules<'c, 'a> {
    pub(super) fn new(session: &Session, check: &'c Check<'a>, node: NodeId) -> Self {
        let mut rules = NodeRules {
            check,
            node,
            blocking: Vec::new(),
            counted: Vec::new(),
        };
        for &v in session.node_tasks(node) {
            if !matches!(session.task_status(v), TaskStatus::Bound(_)) {
                continue;
            }
            match check.conflict(session.snapshot, node, v) {
                Some(Conflict::Blocks) => rules.blocking.push(v),
                Some(Conflict::Counted) => rules.counted.push(v),
                None => {}
            }
        }
        rules
    }

    /// Whether taking the pod away may lift a refusal of the rules, though it need not.
    pub(super) fn may_help(&self, task: TaskId) -> bool {
        self.counted.contains(&task)
    }

    /// Whether the rules let the preemptor onto the node once `gone` (bound pods, here or on
    /// other nodes: a gang's mates) are away.
    pub(super) fn allow(&self, session: &Session, gone: &[TaskId]) -> bool {
        let gone: Vec<(TaskId, NodeId)> = (gone.iter())
            .filter_map(|&g| Some((g, session.task_status(g).node()?)))
            .collect();
        (self.check)
            .check_without(session.snapshot, self.node, &gone)
            .is_ok()
    }
}
