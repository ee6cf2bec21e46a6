//! The queue tree's checks before the build: a queue whose parent is missing, invalid or on a
//! cycle with it is left out, with a message that says which and why. The engine refuses all
//! of these too, but one queue at a time and naming only the first it meets; checked here,
//! every queue on a cycle is told so, and each child is told its parent is invalid rather
//! than missing.

use std::collections::HashMap;

use basalt_engine::QueueSpec;

use super::error;
use crate::convert::{ConvertError, ROOT_QUEUE};

/// Why each invalid queue is invalid, by name, briefly: the messages of what names it say so.
pub(crate) type BadQueues = HashMap<String, String>;

/// Cycles longer than this are shortened in messages (every queue on one gets the message).
const CYCLE_NAMES: usize = 6;

#[derive(Clone, Debug)]
enum Verdict {
    Unknown,
    Good,
    Missing(String),
    /// Its parent is invalid.
    BadParent(String),
    /// It is on this cycle (from itself round to itself).
    Cycle(String),
}

/// Whether each queue stays: its parent is the top, or a queue that stays. Each queue left out
/// is an error (in input order) and joins `bad`, which already holds the queues that could not
/// be converted.
pub(crate) fn judge_queues(
    queues: &[&QueueSpec],
    bad: &mut BadQueues,
    errors: &mut Vec<ConvertError>,
) -> Vec<bool> {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(queues.len());
    for (i, q) in queues.iter().enumerate() {
        index.entry(q.name.as_str()).or_insert(i);
    }
    let mut verdicts = vec![Verdict::Unknown; queues.len()];
    for start in 0..queues.len() {
        walk(queues, &index, bad, &mut verdicts, start);
    }
    let mut keep = Vec::with_capacity(queues.len());
    for (q, verdict) in queues.iter().zip(verdicts) {
        let (message, reason) = match verdict {
            Verdict::Good | Verdict::Unknown => {
                keep.push(true);
                continue;
            }
            Verdict::Missing(p) => {
                let m = format!("names queue {p}, which does not exist");
                (m.clone(), format!("spec.parent: {m}"))
            }
            Verdict::BadParent(p) => {
                let why = bad.get(&p).map(String::as_str).unwrap_or("see the Queue");
                (
                    format!("names queue {p}, which is invalid ({why})"),
                    format!("its parent queue {p} is invalid"),
                )
            }
            Verdict::Cycle(names) => {
                let m = format!("its parent chain forms a cycle: {names}");
                (m.clone(), format!("spec.parent: {m}"))
            }
        };
        keep.push(false);
        errors.push(error("Queue", &q.name, "spec.parent", message));
        bad.insert(q.name.clone(), reason);
    }
    keep
}

/// Follows the parents from `start` until the top, a queue already judged, a missing or
/// invalid parent, or a queue met before on this walk (a cycle); judges every queue on the way.
fn walk(
    queues: &[&QueueSpec],
    index: &HashMap<&str, usize>,
    bad: &BadQueues,
    verdicts: &mut [Verdict],
    start: usize,
) {
    let mut path: Vec<usize> = Vec::new();
    let mut on_path: HashMap<usize, usize> = HashMap::new();
    let mut cur = start;
    // What the last queue on the path gets; the ones before it follow from it.
    let last = loop {
        if !matches!(verdicts[cur], Verdict::Unknown) {
            break None;
        }
        on_path.insert(cur, path.len());
        path.push(cur);
        let parent = match queues[cur].parent.as_deref() {
            None | Some("") | Some(ROOT_QUEUE) => break Some(Verdict::Good),
            Some(p) => p,
        };
        if bad.contains_key(parent) {
            break Some(Verdict::BadParent(parent.to_string()));
        }
        let Some(&next) = index.get(parent) else {
            break Some(Verdict::Missing(parent.to_string()));
        };
        if let Some(&at) = on_path.get(&next) {
            let cycle = &path[at..];
            for (k, &q) in cycle.iter().enumerate() {
                verdicts[q] = Verdict::Cycle(cycle_names(queues, cycle, k));
            }
            path.truncate(at);
            break None;
        }
        cur = next;
    };
    // The queue after each one on the path is its parent (or, past the end, `cur`).
    let mut child_of_good = match last {
        Some(v) => {
            let good = matches!(v, Verdict::Good);
            verdicts[path.pop().expect("pushed")] = v;
            Some(good)
        }
        None => None,
    };
    for &q in path.iter().rev() {
        let parent = queues[q].parent.clone().unwrap_or_default();
        let good = child_of_good.unwrap_or_else(|| {
            let p = index[parent.as_str()];
            matches!(verdicts[p], Verdict::Good)
        });
        verdicts[q] = if good {
            Verdict::Good
        } else {
            Verdict::BadParent(parent)
        };
        child_of_good = Some(good);
    }
}

/// The cycle read from its `k`th queue round to it again: `b → a → b`.
fn cycle_names(queues: &[&QueueSpec], cycle: &[usize], k: usize) -> String {
    let names: Vec<&str> = (0..=cycle.len())
        .map(|i| queues[cycle[(k + i) % cycle.len()]].name.as_str())
        .collect();
    if names.len() <= CYCLE_NAMES + 1 {
        return names.join(" → ");
    }
    format!(
        "{} → … → {} ({} queues)",
        names[..CYCLE_NAMES].join(" → "),
        names[names.len() - 1],
        cycle.len()
    )
}

/// What the children of a queue that could not be converted are told: its error's field and
/// message (`None`: the engine refused it in an earlier round).
pub(crate) fn reason(e: Option<&ConvertError>) -> String {
    match e {
        Some(e) => format!("{}: {}", e.field, e.message),
        None => "see the Queue".to_string(),
    }
}
