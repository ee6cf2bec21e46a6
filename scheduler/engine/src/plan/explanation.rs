//! Why a job waits, as the plan carries it: typed and named (the plan outlives its snapshot),
//! worded only by [`Explanation::summary`] (a condition's message) and [`Explanation::report`]
//! (everything, a line each) when a message is written. The session computes it
//! (`session/waiting.rs`).

use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Why a job with pending members has not started, computed after the cycle's actions on the
/// state they leave (so node counts never include the gang's own dry run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub verdict: Verdict,
    /// What no amount of waiting changes (set when `verdict` is `NeverFits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub never_fits: Option<NeverFits>,
    /// Members holding a node (or finished) after the cycle.
    pub holding: u32,
    pub min_member: u32,
    /// Members it still needs to start.
    pub need: u32,
    /// Of those, how many the nodes could take now, each on its own.
    pub fit_now: u32,
    /// Per resource the members it needs ask for: how much, how much is free on the nodes it
    /// may use (those passing its static filters), and their allocatable.
    #[serde(default, skip_serializing_if = "none_needed")]
    pub resources: Arc<[ResourceNeed]>,
    /// With a required tier: the domain of that tier with the most free GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<DomainRoom>,
    /// The nodes, counted per reason for one member (the most refused of its shapes).
    pub nodes: Arc<NodeCounts>,
    /// When each member fits alone but not all of them together (their rules about each
    /// other, say): how far placing them one by one got, and why the next found no node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub together: Option<Together>,
    /// Starving gangs whose reserved nodes this job may not use (it comes after them in job
    /// order), with how many nodes each keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved: Vec<Reservation>,
    /// The resource `held_by` amounts are of: the one it is shortest of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_resource: Option<String>,
    /// The jobs holding most of it where the job could go (the best domain, else the nodes it
    /// may use), most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<Holding>,
    /// The same per leaf queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by_queues: Vec<Holding>,
    /// What would let it start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unblock: Option<Unblock>,
    pub position: Position,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// More than the cluster or its quota can ever give it.
    NeverFits,
    /// It fits once capacity is free (or a quota allows it).
    Waiting,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::NeverFits => "NeverFits",
            Verdict::Waiting => "Waiting",
        }
    }
}

/// Why a job can never start, whatever ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum NeverFits {
    /// The gang asks more of `resource` than the nodes it may use have in all.
    Cluster {
        resource: String,
        asked: String,
        allocatable: String,
    },
    /// A member asks more than any node it may use has, even empty.
    Node {
        resource: String,
        asked: String,
        largest: String,
    },
    /// The gang asks more than `queue` (its own or an ancestor) may ever hold.
    Capability {
        queue: String,
        resource: String,
        asked: String,
        capability: String,
    },
    /// No domain of the required tier has as many GPUs as the gang needs.
    Tier {
        tier: String,
        gpus: i64,
        largest: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceNeed {
    pub name: String,
    pub asked: String,
    pub free: String,
    pub allocatable: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainRoom {
    pub tier: String,
    pub name: String,
    /// Free whole GPUs in it.
    pub free: i64,
    /// GPUs the gang needs in one domain of the tier.
    pub need: i64,
}

/// kube-scheduler's per-node count for one member: how many nodes could take it, and why the
/// others refuse.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    pub total: u32,
    pub available: u32,
    /// Most frequent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<NodeRefusal>,
}

/// Members placed one by one before one found no node, and that member's node counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Together {
    pub placed: u32,
    pub next: Arc<NodeCounts>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRefusal {
    pub count: u32,
    pub reason: String,
}

/// A job or queue and how much of `held_resource` it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    pub name: Arc<str>,
    pub amount: String,
}

/// A starving gang and the nodes it keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub gang: Arc<str>,
    pub nodes: u32,
}

/// What would let the job start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Unblock {
    /// Its preemption or reclaim is under way: these jobs' pods are being evicted for it.
    Preempting {
        victims: Vec<Arc<str>>,
        nodes: Vec<String>,
    },
    /// A quota stands in the way, not the nodes: a queue at its capability, or free capacity
    /// guaranteed to other queues.
    Quota {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<String>,
        reason: String,
    },
    /// The fewest running jobs found whose end lets it start (by resources and whole GPUs per
    /// node; members placed one by one).
    JobsEnd { jobs: Vec<Arc<str>> },
    /// Not even the end of the `considered` largest holders would make room.
    NotSoon { considered: u32 },
}

/// Where the job stands in line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Position {
    pub queue: String,
    /// 1-based among the queue's waiting jobs, in job order.
    pub in_queue: u32,
    pub queue_length: u32,
    /// 1-based in the order this cycle served jobs; absent when it was not served (not
    /// admitted, gated, backing off, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_cycle: Option<u32>,
    pub cycle_length: u32,
}

impl Explanation {
    /// The condition's message: the counts and what would let it start, without what changes
    /// cycle by cycle (holders, position), so the condition stays put while nothing that
    /// matters moves.
    pub fn summary(&self) -> String {
        let mut out = String::with_capacity(256);
        let _ = write!(
            out,
            "{}/{} members of the gang could be placed: ",
            self.holding, self.min_member
        );
        let quota = match &self.unblock {
            Some(Unblock::Quota { reason, .. }) => Some(reason),
            _ => None,
        };
        match (&self.never_fits, quota) {
            (Some(never), _) => {
                let _ = write!(out, "it never fits: {}. ", never_words(never));
            }
            (None, Some(reason)) => {
                let _ = write!(out, "{reason}. ");
            }
            _ => {}
        }
        self.nodes.write_words(&mut out);
        if let Some(t) = &self.together {
            let _ = write!(
                out,
                " Each member fits alone, not all together: {} of {} placed, then ",
                t.placed, self.need,
            );
            t.next.write_words(&mut out);
        }
        if !self.reserved.is_empty() {
            let nodes: u32 = self.reserved.iter().map(|r| r.nodes).sum();
            let gangs: Vec<&str> = self.reserved.iter().map(|r| &*r.gang).collect();
            let _ = write!(
                out,
                " {nodes} nodes were reserved for a starving gang ({}).",
                gangs.join(", ")
            );
        }
        if self.fit_now > 0 && self.fit_now < self.need {
            let _ = write!(
                out,
                " Room for {} of the {} members it needs.",
                self.fit_now, self.need
            );
        }
        let short = self.resources.iter().filter(|r| r.asked != "0");
        for (i, r) in short.enumerate() {
            let sep = if i == 0 { " Needs " } else { ", " };
            let (asked, name, free, of) = (&r.asked, &r.name, &r.free, &r.allocatable);
            let _ = write!(out, "{sep}{asked} {name} ({free} free of {of})");
        }
        if !asks_nothing(&self.resources) {
            out.push_str(" on the nodes it may use.");
        }
        if let Some(d) = &self.domain {
            let _ = write!(
                out,
                " Needs {} GPUs in one {}; the best, {}, has {} free.",
                d.need, d.tier, d.name, d.free
            );
        }
        match &self.unblock {
            Some(Unblock::Preempting { victims, nodes }) => {
                let _ = write!(
                    out,
                    " Preempting {} on {}.",
                    victims.join(", "),
                    nodes.join(", ")
                );
            }
            Some(Unblock::JobsEnd { jobs }) => {
                let _ = write!(out, " Starts when {} end.", jobs.join(", "));
            }
            _ => {}
        }
        out
    }

    /// Everything, a line per part (what `kubectl basalt why` and `basalt-sim plan --explain`
    /// print): verdict, members, what it asks, the best domain, node counts, reservations,
    /// who holds the capacity, what would free it and its place in line.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let mut line = |label: &str, text: String| {
            let _ = writeln!(out, "{label:<10} {text}");
        };
        line("Verdict:", self.verdict.as_str().to_string());
        if let Some(never) = &self.never_fits {
            line("Never:", never_words(never));
        }
        line(
            "Members:",
            format!(
                "{} of {} hold a node; {} more needed, room for {} now",
                self.holding, self.min_member, self.need, self.fit_now
            ),
        );
        for r in self.resources.iter() {
            line(
                "Needs:",
                format!(
                    "{} {} ({} free of {} on the nodes it may use)",
                    r.asked, r.name, r.free, r.allocatable
                ),
            );
        }
        if let Some(d) = &self.domain {
            line(
                "Domain:",
                format!(
                    "{} GPUs in one {}; the best, {}, has {} free",
                    d.need, d.tier, d.name, d.free
                ),
            );
        }
        line("Nodes:", self.nodes.words());
        if let Some(t) = &self.together {
            line(
                "Together:",
                format!(
                    "{} of {} placed one by one, then {}",
                    t.placed,
                    self.need,
                    t.next.words()
                ),
            );
        }
        for r in &self.reserved {
            line(
                "Reserved:",
                format!("{} nodes for starving gang {}", r.nodes, r.gang),
            );
        }
        if let (Some(resource), false) = (&self.held_resource, self.held_by.is_empty()) {
            line(
                "Held by:",
                format!("{} of {resource}", holdings(&self.held_by).join(", ")),
            );
            line("Queues:", holdings(&self.held_by_queues).join(", "));
        }
        let frees = match &self.unblock {
            Some(Unblock::Preempting { victims, nodes }) => Some(format!(
                "preempting {} on {}",
                victims.join(", "),
                nodes.join(", ")
            )),
            Some(Unblock::Quota { reason, .. }) => Some(format!("its quota: {reason}")),
            Some(Unblock::JobsEnd { jobs }) => Some(format!("the end of {}", jobs.join(", "))),
            Some(Unblock::NotSoon { considered }) => {
                Some(format!("not even the end of {considered} running jobs"))
            }
            None => None,
        };
        if let Some(frees) = frees {
            line("Frees it:", frees);
        }
        let p = &self.position;
        let mut at = format!(
            "{} of {} waiting in queue {}",
            p.in_queue, p.queue_length, p.queue
        );
        if let Some(c) = p.in_cycle {
            let _ = write!(at, "; served {c} of {} in the cycle", p.cycle_length);
        }
        line("Position:", at);
        out
    }
}

/// Condition messages already worded in one plan, by what they read: a backlog of alike gangs
/// shares its node counts and resource needs (one computation per shape and ask), so their
/// summaries are one wording, copied.
#[derive(Default)]
pub(crate) struct Summaries(crate::hash::Map<SummaryKey, Worded>);

/// What [`Explanation::summary`] reads of an explanation that has no part of its own beyond
/// the counts (no never-fits, quota, preemption, jobs to end, domain, reservation or
/// together part): the counts, and the shared parts by address.
#[derive(PartialEq, Eq, Hash)]
struct SummaryKey {
    holding: u32,
    min_member: u32,
    need: u32,
    fit_now: u32,
    nodes: *const NodeCounts,
    resources: *const ResourceNeed,
}

/// A summary and the parts its key points at, kept alive while the key is (so an address is
/// never another part's).
struct Worded {
    _nodes: Arc<NodeCounts>,
    _resources: Arc<[ResourceNeed]>,
    words: String,
}

impl Summaries {
    /// `e.summary()`, worded once per alike explanation.
    pub(crate) fn summary(&mut self, e: &Explanation) -> String {
        let plain = e.never_fits.is_none()
            && matches!(e.unblock, None | Some(Unblock::NotSoon { .. }))
            && e.together.is_none()
            && e.reserved.is_empty()
            && e.domain.is_none();
        if !plain {
            return e.summary();
        }
        let key = SummaryKey {
            holding: e.holding,
            min_member: e.min_member,
            need: e.need,
            fit_now: e.fit_now,
            nodes: Arc::as_ptr(&e.nodes),
            resources: e.resources.as_ptr(),
        };
        let worded = self.0.entry(key).or_insert_with(|| Worded {
            _nodes: e.nodes.clone(),
            _resources: e.resources.clone(),
            words: e.summary(),
        });
        worded.words.clone()
    }
}

/// Whether every resource need asks "0" (the summary then says nothing of needs).
fn asks_nothing(r: &[ResourceNeed]) -> bool {
    r.iter().all(|r| r.asked == "0")
}

fn none_needed(r: &Arc<[ResourceNeed]>) -> bool {
    r.is_empty()
}

fn holdings(list: &[Holding]) -> Vec<String> {
    list.iter()
        .map(|h| format!("{} ({})", h.name, h.amount))
        .collect()
}

fn never_words(never: &NeverFits) -> String {
    match never {
        NeverFits::Cluster {
            resource,
            asked,
            allocatable,
        } => format!(
            "it asks {asked} {resource}, more than the {allocatable} the nodes it may use have"
        ),
        NeverFits::Node {
            resource,
            asked,
            largest,
        } => format!(
            "a member asks {asked} {resource}, more than the largest node it may use has \
             ({largest})"
        ),
        NeverFits::Capability {
            queue,
            resource,
            asked,
            capability,
        } => format!(
            "it asks {asked} {resource}, more than the capability of queue {queue} \
             ({capability})"
        ),
        NeverFits::Tier {
            tier,
            gpus,
            largest,
        } => format!("it needs {gpus} GPUs in one {tier}; the largest {tier} has {largest}"),
    }
}

impl NodeCounts {
    /// "0/6 nodes are available: 3 insufficient nvidia.com/gpu, 2 didn't match node
    /// selector." (kube-scheduler's words for one pod).
    pub fn words(&self) -> String {
        let mut out = String::new();
        self.write_words(&mut out);
        out
    }

    /// [`NodeCounts::words`] onto `out` (a summary per waiting job: no string per part).
    fn write_words(&self, out: &mut String) {
        let _ = write!(out, "{}/{} nodes are available", self.available, self.total);
        for (i, r) in self.refused.iter().enumerate() {
            let sep = if i == 0 { ": " } else { ", " };
            let _ = write!(out, "{sep}{} {}", r.count, r.reason);
        }
        out.push('.');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(nodes: &Arc<NodeCounts>, resources: &Arc<[ResourceNeed]>) -> Explanation {
        Explanation {
            verdict: Verdict::Waiting,
            never_fits: None,
            holding: 0,
            min_member: 2,
            need: 2,
            fit_now: 0,
            resources: resources.clone(),
            domain: None,
            nodes: nodes.clone(),
            together: None,
            reserved: Vec::new(),
            held_resource: None,
            held_by: Vec::new(),
            held_by_queues: Vec::new(),
            unblock: None,
            position: Position::default(),
        }
    }

    #[test]
    fn alike_summaries_are_worded_once_and_each_reads_as_its_own() {
        let counts = |available, short| NodeCounts {
            total: 4,
            available,
            refused: vec![NodeRefusal {
                count: short,
                reason: "insufficient example.com/gpu".into(),
            }],
        };
        let needs: Arc<[ResourceNeed]> = Arc::from([ResourceNeed {
            name: "example.com/gpu".into(),
            asked: "8".into(),
            free: "2".into(),
            allocatable: "32".into(),
        }]);
        let full = Arc::new(counts(0, 4));
        let mut summaries = Summaries::default();
        let mut check = |e: &Explanation| {
            assert_eq!(summaries.summary(e), e.summary());
            summaries.0.len()
        };
        let first = waiting(&full, &needs);
        assert_eq!(check(&first), 1);
        // Alike (the same parts, another position): the same words, no new wording.
        let mut second = waiting(&full, &needs);
        second.position.in_queue = 7;
        assert_eq!(check(&second), 1);
        // Counts of its own, or parts of their own that read otherwise: words of its own.
        let mut room = waiting(&full, &needs);
        room.fit_now = 1;
        assert_eq!(check(&room), 2);
        let one_free = waiting(&Arc::new(counts(1, 3)), &needs);
        assert_eq!(check(&one_free), 3);
        assert_ne!(one_free.summary(), first.summary());
        // A part of its own (jobs to end, never fits) is worded for it alone.
        let mut ends = waiting(&full, &needs);
        ends.unblock = Some(Unblock::JobsEnd {
            jobs: vec!["ml/a".into()],
        });
        assert_eq!(check(&ends), 3);
        let mut never = waiting(&full, &needs);
        never.never_fits = Some(NeverFits::Tier {
            tier: "rack".into(),
            gpus: 16,
            largest: 8,
        });
        assert_eq!(check(&never), 3);
    }
}
