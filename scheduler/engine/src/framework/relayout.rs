//! The [`MigRelayout`] extension point: new MIG layouts for idle GPUs, chosen from the MIG
//! demand a cycle could not place.

use crate::model::{NodeId, TaskId};
use crate::session::SessionView;

/// Proposes new MIG layouts for idle GPUs when pending pods ask for MIG profiles (NVIDIA's
/// mixed strategy, `nvidia.com/mig-<profile>`) that no free instance serves. Asked once per
/// cycle, after the actions, on the state they leave: every pod still pending there found no
/// node.
///
/// The contract, which the engine enforces (a proposal breaking it is dropped, never applied
/// half): a proposal names a GPU of the node by its index; the GPU is healthy, on a node whose
/// devices are open, not reconfiguring ([`crate::Node::mig_reconfiguring`]) and not cordoned;
/// it is idle: a whole device no pod holds, or a GPU in MIG mode none of whose instances is
/// held (by a bound pod or one this cycle placed); each GPU at most once; and `waiting` names
/// pending pods only, each in one proposal. The layout itself (profiles valid for the GPU's
/// model, placements that do not overlap) is the policy's to get right: the engine does not
/// know the models' tables, and the node agent validates again before it touches the GPU.
///
/// The engine writes each proposal into the plan's `migLayouts` and reports the jobs of the
/// `waiting` pods with the condition reason [`MIG_RELAYOUT`] instead of "not enough resources"
/// (their reservations for other nodes are dropped: they wait for this GPU). The policy is pure
/// like the rest of the engine: a function of the session.
pub trait MigRelayout: Send + Sync {
    fn name(&self) -> &str;
    fn propose(&self, session: &SessionView) -> Vec<RelayoutProposal>;
}

/// One GPU to re-lay, and the pending pods that wait for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayoutProposal {
    pub node: NodeId,
    /// The GPU's index on the node ([`crate::Gpu::index`]).
    pub gpu: u32,
    /// The instances wanted, by profile name (`3g.40gb`) and first memory slice.
    pub layout: Vec<(String, u32)>,
    /// Pending pods an instance of the new layout is meant for.
    pub waiting: Vec<TaskId>,
}

/// The PodGroup condition reason of a gang whose pending members wait for a MIG re-layout.
pub const MIG_RELAYOUT: &str = "MigRelayout";
