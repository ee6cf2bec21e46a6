//! A session's DRA state: the devices in use, and the claims its placements allocated. A
//! placement allocates its pod's pending claims inside the statement, so a gang that is undone
//! gives its devices back with its nodes: no gang holds devices while it cannot start.

use std::collections::HashMap;

use super::{Op, Session};
use crate::dra::{
    self, ClaimAsk, ClaimNeed, ClaimPick, ClaimRefusal, ClaimState, DeviceSet, DraTable, Reach,
};
use crate::hash::Map;
use crate::model::{NodeId, RulesId, TaskId};
use crate::plan::{ClaimAllocation, ClaimResult};
use crate::refusal::Refusal;

#[derive(Default)]
pub(crate) struct Claims {
    /// Devices in use: allocated before the cycle, or by a placement of this session.
    used: DeviceSet,
    /// What the devices in use take of the shared counters (partitionable devices).
    counters: Vec<i64>,
    /// Per placed task, per claim: what its placement allocated (`None`: allocated before, or
    /// by another pod of this cycle that shares the claim).
    placed: Map<TaskId, Vec<Option<ClaimPick>>>,
    /// Claims shared by several pods allocated this cycle: their devices and how many placed
    /// pods use them.
    shared: HashMap<String, (Vec<u32>, u32)>,
}

impl Claims {
    pub(crate) fn new(table: &DraTable) -> Claims {
        Claims {
            used: table.allocated.clone(),
            counters: table.counters_held(table.allocated.iter()),
            ..Claims::default()
        }
    }

    fn hold(&mut self, table: &DraTable, d: u32) {
        self.used.insert(d);
        table.charge(&mut self.counters, d, 1);
    }

    fn release(&mut self, table: &DraTable, d: u32) {
        self.used.remove(d);
        table.charge(&mut self.counters, d, -1);
    }

    /// Holds the devices a task's placement picked for its claims (`need`).
    pub(super) fn take(
        &mut self,
        table: &DraTable,
        need: &ClaimNeed,
        task: TaskId,
        picks: Vec<Option<ClaimPick>>,
    ) {
        for (ask, pick) in need.claims.iter().zip(&picks) {
            if let Some(key) = shared_pending(ask) {
                let entry = self.shared.entry(key.to_string()).or_default();
                if let Some(p) = pick {
                    entry.0 = p.held().collect();
                }
                entry.1 += 1;
            }
            for d in pick.iter().flat_map(|p| p.held()) {
                self.hold(table, d);
            }
        }
        self.placed.insert(task, picks);
    }

    /// Gives back what [`Self::take`] held for the task: a shared claim's devices once its
    /// last placed pod is undone.
    pub(super) fn give_back(&mut self, table: &DraTable, need: &ClaimNeed, task: TaskId) {
        let Some(picks) = self.placed.remove(&task) else {
            return;
        };
        for (ask, pick) in need.claims.iter().zip(&picks) {
            if let Some(key) = shared_pending(ask) {
                if let Some(entry) = self.shared.get_mut(key) {
                    entry.1 = entry.1.saturating_sub(1);
                    if entry.1 == 0 {
                        let devices = std::mem::take(&mut entry.0);
                        self.shared.remove(key);
                        for d in devices {
                            self.release(table, d);
                        }
                    }
                }
                continue;
            }
            for d in pick.iter().flat_map(|p| p.held()) {
                self.release(table, d);
            }
        }
    }
}

impl<'a> Session<'a> {
    /// What the task's claims ask, when it has any.
    pub(crate) fn claim_need(&self, task: TaskId) -> Option<&'a ClaimNeed> {
        let snap: &'a crate::Snapshot = self.snapshot;
        snap.rules[snap.task(task).rules.0 as usize]
            .claims
            .as_deref()
    }

    /// The static part: whether the node could hold the claims with no device in use.
    pub(crate) fn claims_could_fit(&self, rules: RulesId, node: NodeId) -> Result<(), Refusal> {
        let Some(need) = &self.snapshot.rules[rules.0 as usize].claims else {
            return Ok(());
        };
        let name = &self.snapshot.node(node).name;
        (self.snapshot.dra)
            .could_fit(need, node.index(), name)
            .map_err(|refusal| Refusal::Claim { rules, refusal })
    }

    fn search_claims(
        &self,
        need: &ClaimNeed,
        node: NodeId,
    ) -> Result<Vec<Option<ClaimPick>>, ClaimRefusal> {
        let claims = self.capacity.claims();
        let (used, shared) = (&claims.used, &claims.shared);
        dra::search(
            &self.snapshot.dra,
            need,
            node.index(),
            (&|d| !used.contains(d), &claims.counters),
            &|key| shared.get(key).map(|(devices, _)| devices.as_slice()),
        )
    }

    /// Whether the node's free devices can hold the claims now.
    pub(crate) fn claims_fit(&self, need: &ClaimNeed, node: NodeId) -> bool {
        self.search_claims(need, node).is_ok()
    }

    /// Why the node's free devices cannot hold the task's claims, if they cannot.
    pub(super) fn claims_short(&self, task: TaskId, node: NodeId) -> Result<(), Refusal> {
        let Some(need) = self.claim_need(task) else {
            return Ok(());
        };
        let rules = self.snapshot.task(task).rules;
        self.search_claims(need, node)
            .map(drop)
            .map_err(|refusal| Refusal::Claim { rules, refusal })
    }

    /// Allocates the task's pending claims on the node it is placed on.
    pub(super) fn take_claims(&mut self, task: TaskId, node: NodeId) {
        let Some(need) = self.claim_need(task) else {
            return;
        };
        let picks = match self.search_claims(need, node) {
            Ok(picks) => picks,
            Err(e) => {
                // Every caller checked the node first ([`Session::has_devices`]).
                debug_assert!(false, "claims placed where they do not fit: {e:?}");
                return;
            }
        };
        (self.capacity).take_claims(&self.snapshot.dra, need, task, picks);
    }

    /// Gives back what [`Session::take_claims`] allocated for the task.
    pub(super) fn give_back_claims(&mut self, task: TaskId) {
        // A task without claims took none.
        let Some(need) = self.claim_need(task) else {
            return;
        };
        (self.capacity).give_back_claims(&self.snapshot.dra, need, task);
    }

    /// The claims the committed placements allocated, in the order they were placed.
    pub(super) fn claim_allocations(&self) -> Vec<ClaimAllocation> {
        let snap = self.snapshot;
        let table = &snap.dra;
        let mut out = Vec::new();
        for op in &self.committed {
            let Op::Allocate {
                task,
                node,
                pipelined: false,
                ..
            } = op
            else {
                continue;
            };
            let Some(picks) = self.capacity.claims().placed.get(task) else {
                continue;
            };
            let t = snap.task(*task);
            let node = &snap.node(*node).name;
            for (name, pick) in t.claims.iter().zip(picks) {
                let Some(pick) = pick else { continue };
                let device = |d: u32| &table.devices[d as usize];
                let local = (pick.results.iter()).any(|r| device(r.1).reach != Reach::All);
                out.push(ClaimAllocation {
                    claim: name.to_string(),
                    pod: t.name.to_string(),
                    node: node.clone(),
                    node_selector: local.then(|| node.clone()),
                    results: (pick.results.iter())
                        .map(|(request, d, admin)| ClaimResult {
                            request: request.clone(),
                            driver: device(*d).driver.to_string(),
                            pool: device(*d).pool.to_string(),
                            device: device(*d).name.to_string(),
                            admin_access: *admin,
                        })
                        .collect(),
                });
            }
        }
        out
    }
}

/// The key of a claim several pods may use that is allocated this cycle, if the ask is one.
fn shared_pending(ask: &ClaimAsk) -> Option<&str> {
    match ask.state {
        ClaimState::Pending { .. } => ask.shared.as_deref(),
        _ => None,
    }
}
