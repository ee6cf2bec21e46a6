//! A pod's DRA claims to what it asks of the engine: claims by name or through their
//! template's status, each request's matching devices (CEL, once per distinct class, selectors
//! and tolerations), and the devices it holds or asks per driver for queue accounting.

use std::collections::BTreeMap;

use basalt_cel::DeviceView;
use basalt_engine::dra::{
    Alternative, ClaimAsk, ClaimNeed, ClaimState, ConstraintAsk, Count, DeviceSet, DraDevice,
    Reach, RequestAsk,
};
use basalt_engine::Wait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceRequest, DeviceSelector, DeviceTaint, DeviceToleration, ExactDeviceRequest, ResourceClaim,
};

use super::{lock, selects, Dra};

impl Dra {
    /// The devices a bound pod holds through its own claims (made from templates), per
    /// driver, as counted on nodes ([`Dra::node_counts`]): node-local devices of its claims'
    /// allocations, admin access excepted. Claims named by `resourceClaimName`, which pods may
    /// share, count nothing.
    pub(crate) fn held_counts(&self, pod: &Pod, namespace: &str) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        for e in entries.into_iter().flatten() {
            if e.resource_claim_template_name.is_none() {
                continue;
            }
            let made = (statuses.into_iter().flatten())
                .find(|s| s.name == e.name)
                .and_then(|s| s.resource_claim_name.as_deref());
            let Some(claim) = made.and_then(|n| self.claims.get(&format!("{namespace}/{n}")))
            else {
                continue;
            };
            let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
            let results = allocation
                .into_iter()
                .flat_map(|a| a.devices.iter().flat_map(|d| d.results.iter().flatten()));
            for r in results.filter(|r| r.admin_access != Some(true)) {
                let key = (r.driver.clone(), r.pool.clone(), r.device.clone());
                let local = (self.index.get(&key))
                    .is_some_and(|&d| matches!(self.devices[d as usize].reach, Reach::Node(_)));
                if local {
                    *out.entry(r.driver.clone()).or_default() += 1;
                }
            }
        }
        out
    }

    /// What a pending pod's own unallocated claims ask, per driver, as counted on nodes: per
    /// request the least of its alternatives (one for `All`), when each may take only one
    /// driver's node-local devices. Shared claims and admin access count nothing.
    pub(crate) fn asked_counts(&self, need: &ClaimNeed) -> BTreeMap<String, i64> {
        let m = lock(&self.matching);
        let mut out = BTreeMap::new();
        for c in need.claims.iter().filter(|c| c.shared.is_none()) {
            let ClaimState::Pending { requests, .. } = &c.state else {
                continue;
            };
            for r in requests {
                let counted = (r.alternatives.iter())
                    .map(|a| {
                        let driver = m.drivers.get(a.eligible as usize).cloned().flatten();
                        let n = match a.count {
                            Count::Exactly(n) => n as i64,
                            Count::All => 1,
                        };
                        driver.filter(|_| !a.admin_access).map(|d| (d, n))
                    })
                    .collect::<Option<Vec<_>>>();
                let Some(counted) = counted else { continue };
                let one_driver = counted.windows(2).all(|w| w[0].0 == w[1].0);
                if let (true, Some(n)) = (one_driver, counted.iter().map(|c| c.1).min()) {
                    *out.entry(counted[0].0.clone()).or_default() += n;
                }
            }
        }
        out
    }

    /// A pending pod's claims: what they ask, with their `ns/name`s, or why the pod waits.
    pub(crate) fn pod_claims(
        &self,
        pod: &Pod,
        namespace: &str,
    ) -> Result<Option<(ClaimNeed, Vec<String>)>, Vec<Wait>> {
        let Some(entries) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()) else {
            return Ok(None);
        };
        if entries.is_empty() {
            return Ok(None);
        }
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        let mut need = ClaimNeed::default();
        let mut names = Vec::new();
        let mut waits = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let (name, shared) = if let Some(n) = &e.resource_claim_name {
                (n.clone(), true)
            } else if let Some(t) = &e.resource_claim_template_name {
                let made = (statuses.into_iter().flatten())
                    .find(|s| s.name == e.name)
                    .and_then(|s| s.resource_claim_name.clone());
                match made {
                    Some(n) => (n, false),
                    None => {
                        let template = format!("{namespace}/{t}");
                        // Only a dump that has templates can tell a missing one.
                        let known = self.templates.is_empty() || self.templates.contains(&template);
                        let why = if known {
                            "is not made yet"
                        } else {
                            "is not made yet, and the template does not exist"
                        };
                        waits.push(Wait::Claim(format!(
                            "spec.resourceClaims[{i}]: the claim of template {template} {why}"
                        )));
                        continue;
                    }
                }
            } else {
                waits.push(Wait::Claim(format!(
                    "spec.resourceClaims[{i}]: names neither a claim nor a template"
                )));
                continue;
            };
            let key = format!("{namespace}/{name}");
            let Some(claim) = self.claims.get(&key) else {
                waits.push(Wait::Claim(format!("claim {key} does not exist")));
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                waits.push(Wait::Claim(format!("claim {key} is being deleted")));
                continue;
            }
            // A template's claim must be the pod's own (kube-scheduler's IsForPod); checked
            // where the pod has a uid, as every pod read from a cluster has.
            let uid = pod.metadata.uid.as_deref();
            let owned = |uid: &str| {
                (claim.metadata.owner_references.iter().flatten())
                    .any(|o| o.controller == Some(true) && o.uid == uid)
            };
            if !shared && uid.is_some_and(|u| !owned(u)) {
                waits.push(Wait::Claim(format!(
                    "claim {key} was not made for this pod (the pod is not its controller)"
                )));
                continue;
            }
            let label = if shared { key.clone() } else { e.name.clone() };
            let state = match claim.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                Some(a) => ClaimState::Allocated {
                    nodes: a.node_selector.as_ref().map(|sel| {
                        (self.nodes.iter())
                            .filter(|(n, labels)| selects(sel, n, labels))
                            .map(|(n, _)| n.clone())
                            .collect()
                    }),
                },
                None => self.pending(claim),
            };
            need.claims.push(ClaimAsk {
                label,
                shared: shared.then(|| key.clone()),
                state,
            });
            names.push(key);
        }
        if !waits.is_empty() {
            return Err(waits);
        }
        Ok(Some((need, names)))
    }

    /// What an unallocated claim asks, or why it cannot be allocated anywhere.
    fn pending(&self, claim: &ResourceClaim) -> ClaimState {
        let devices = &claim.spec.devices;
        let mut requests = Vec::new();
        for (i, r) in devices
            .iter()
            .flat_map(|d| d.requests.iter().flatten())
            .enumerate()
        {
            match self.request(r) {
                Ok(ask) => requests.push(ask),
                Err(why) => {
                    return ClaimState::Refused(format!("spec.devices.requests[{i}]: {why}"))
                }
            }
        }
        let constraints = (devices.iter().flat_map(|d| d.constraints.iter().flatten()))
            .filter_map(|c| {
                let (attribute, distinct) = match (&c.match_attribute, &c.distinct_attribute) {
                    (Some(a), _) => (a.clone(), false),
                    (None, Some(a)) => (a.clone(), true),
                    (None, None) => return None,
                };
                Some(ConstraintAsk {
                    requests: c.requests.clone().unwrap_or_default(),
                    attribute,
                    distinct,
                })
            })
            .collect();
        ClaimState::Pending {
            requests,
            constraints,
        }
    }

    fn request(&self, r: &DeviceRequest) -> Result<RequestAsk, String> {
        let mut alternatives = Vec::new();
        if let Some(x) = &r.exactly {
            alternatives.push(self.alternative(r.name.clone(), x)?);
        }
        for (j, sub) in r.first_available.iter().flatten().enumerate() {
            let as_exact = ExactDeviceRequest {
                device_class_name: sub.device_class_name.clone(),
                selectors: sub.selectors.clone(),
                allocation_mode: sub.allocation_mode.clone(),
                count: sub.count,
                capacity: sub.capacity.clone(),
                tolerations: sub.tolerations.clone(),
                admin_access: None,
            };
            let name = format!("{}/{}", r.name, sub.name);
            alternatives.push(
                (self.alternative(name, &as_exact))
                    .map_err(|e| format!("firstAvailable[{j}]: {e}"))?,
            );
        }
        if alternatives.is_empty() {
            return Err(format!(
                "request {} states neither exactly nor firstAvailable",
                r.name
            ));
        }
        Ok(RequestAsk {
            name: r.name.clone(),
            alternatives,
        })
    }

    fn alternative(&self, name: String, x: &ExactDeviceRequest) -> Result<Alternative, String> {
        if x.capacity.is_some() {
            return Err("capacity requests (consumable capacity) are not supported".into());
        }
        let count = match x.allocation_mode.as_deref().unwrap_or("ExactCount") {
            "ExactCount" => match x.count.unwrap_or(1) {
                n if n >= 1 && n <= u32::MAX as i64 => Count::Exactly(n as u32),
                n => return Err(format!("count {n} is not a positive number")),
            },
            "All" => Count::All,
            other => return Err(format!("unknown allocationMode {other:?}")),
        };
        let Some(class) = self.classes.get(&x.device_class_name) else {
            return Err(format!(
                "device class {} does not exist",
                x.device_class_name
            ));
        };
        let cel = |s: &DeviceSelector| s.cel.as_ref().map(|c| c.expression.clone());
        let mut expressions: Vec<String> = (class.spec.selectors.iter().flatten())
            .filter_map(cel)
            .collect();
        let of_class = expressions.len();
        expressions.extend(x.selectors.iter().flatten().filter_map(cel));
        let tolerations = x.tolerations.as_deref().unwrap_or_default();
        let eligible = self.matching(&x.device_class_name, of_class, expressions, tolerations)?;
        Ok(Alternative {
            name,
            eligible,
            count,
            admin_access: x.admin_access == Some(true),
        })
    }

    /// The set of devices every expression selects and whose taints the tolerations allow,
    /// made once per (class, expressions, tolerations).
    fn matching(
        &self,
        class: &str,
        of_class: usize,
        expressions: Vec<String>,
        tolerations: &[DeviceToleration],
    ) -> Result<u32, String> {
        let mut m = lock(&self.matching);
        let tolerations_key = (tolerations.iter())
            .map(|t| format!("{:?}", (&t.key, &t.operator, &t.value, &t.effect)))
            .collect();
        let key = (class.to_string(), expressions, tolerations_key);
        if let Some(id) = m.ids.get(&key) {
            return id.clone();
        }
        // Named only for a message.
        let name = |i: usize| selector_name(class, of_class, &key.1, i);
        let result = (|| {
            let mut selectors = Vec::new();
            for (i, e) in key.1.iter().enumerate() {
                selectors.push(m.cel.get(e).map_err(|err| format!("{}: {err}", name(i)))?);
            }
            let mut set = DeviceSet::default();
            for (d, v) in self.views.iter().enumerate() {
                if !v.taints.iter().all(|t| tolerated(t, tolerations)) {
                    continue;
                }
                let view = DeviceView {
                    driver: &v.driver,
                    attributes: &v.attributes,
                    capacity: &v.capacity,
                };
                let mut all = true;
                for (i, s) in selectors.iter().enumerate() {
                    let ok = s.matches(&view).map_err(|err| {
                        format!(
                            "{} on device {}/{}/{}: {err}",
                            name(i),
                            self.devices[d].driver,
                            self.devices[d].pool,
                            self.devices[d].name
                        )
                    })?;
                    if !ok {
                        all = false;
                        break;
                    }
                }
                if all {
                    set.insert(d as u32);
                }
            }
            let one = {
                let mut devices = set.iter().map(|d| &self.devices[d as usize]);
                let first = devices.next();
                first
                    .filter(|f| {
                        let local = |d: &DraDevice| matches!(d.reach, Reach::Node(_));
                        local(f) && devices.all(|d| d.driver == f.driver && local(d))
                    })
                    .map(|d| d.driver.to_string())
            };
            m.drivers.push(one);
            m.sets.push(set);
            Ok((m.sets.len() - 1) as u32)
        })();
        m.ids.insert(key, result.clone());
        result
    }
}

/// Selector `i` of `expressions` (the class's first) named as kube-scheduler names them, with
/// the start of the expression.
fn selector_name(class: &str, of_class: usize, expressions: &[String], i: usize) -> String {
    let e = &expressions[i];
    let mut short: String = e.chars().take(64).collect();
    if short.len() < e.len() {
        short.push('…');
    }
    match i.checked_sub(of_class) {
        None => format!("class {class} selector #{i} ({short})"),
        Some(j) => format!("selector #{j} ({short})"),
    }
}

/// Whether some toleration tolerates the taint (as a pod's tolerate a node's: an empty key with
/// `Exists` tolerates every key, an empty effect every effect).
fn tolerated(taint: &DeviceTaint, tolerations: &[DeviceToleration]) -> bool {
    tolerations.iter().any(|t| {
        let effect = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let exists = t.operator.as_deref() == Some("Exists");
        let key = match t.key.as_deref().filter(|k| !k.is_empty()) {
            None => exists,
            Some(k) => {
                k == taint.key
                    && (exists
                        || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""))
            }
        };
        effect && key
    })
}
