//! Writes: create (names generated, defaults filled, checks per kind), update, patch (JSON,
//! merge and strategic merge, status subresources), delete with finalizers and grace, and what
//! a delete sets off (a CRD's objects, owned objects).

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;

impl Store {
    /// Creates an object; `namespace` is the request's (empty for cluster-scoped resources).
    pub fn create(
        &mut self,
        res: ResId,
        namespace: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let info = self.resources[res].info.clone();
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} create must be a JSON object",
                info.kind
            )));
        }
        check_type(&info, &obj)?;
        let m = meta_mut(&mut obj);
        let body_ns = m
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if info.namespaced {
            if namespace.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "{} is namespaced: create it under /namespaces/NAMESPACE/",
                    info.plural
                )));
            }
            if !body_ns.is_empty() && body_ns != namespace {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
                )));
            }
            m.insert("namespace".into(), json!(namespace));
        } else {
            m.remove("namespace");
        }
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let generate = m
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() && !generate.is_empty() {
            // Retry on collision, as the real server's clients would.
            for _ in 0..8 {
                let candidate = format!("{generate}{}", self.random_suffix());
                if !self.resources[res]
                    .objects
                    .contains_key(&self.key(res, namespace, &candidate))
                {
                    name = candidate;
                    break;
                }
            }
        }
        if name.is_empty() {
            return Err(ApiError::invalid(
                &info.kind,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        // Event names carry dots and timestamps; everything else must be a DNS subdomain.
        if !(is_dns_name(&name) || info.plural == "events") {
            return Err(ApiError::invalid(
                &info.kind,
                &name,
                &format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
            ));
        }
        if info.namespaced {
            let ns_res = self.find("", "namespaces").expect("built in");
            match self.resources[ns_res].objects.get(&(String::new(), namespace.to_string())) {
                None => return Err(ApiError::not_found("", "namespaces", namespace)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::new(403, "Forbidden", format!(
                        "{} {name:?} is forbidden: unable to create new content in namespace {namespace} because it is being terminated", info.plural
                    )))
                }
                Some(_) => {}
            }
        }
        let key = self.key(res, namespace, &name);
        if self.resources[res].objects.contains_key(&key) {
            return Err(ApiError::already_exists(&info.group, &info.plural, &name));
        }
        prepare_create(&info, &mut obj);
        dra::on_create(&info, &name, &mut obj)?;
        if info.is_core("pods") {
            validate_pod(&name, &obj)?;
            let bound = obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if bound && !gate_names(&obj).is_empty() {
                return Err(ApiError::invalid(
                    "Pod",
                    &name,
                    "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared",
                ));
            }
        }
        if info.group == "storage.k8s.io" && info.plural == "storageclasses" {
            validate_storage_class(&name, &obj)?;
        }
        let registered = if info.group == "apiextensions.k8s.io" {
            let row = resources::from_crd(&obj)?;
            obj["status"] = resources::crd_established_status(&row);
            Some(row)
        } else {
            None
        };
        let uid = self.next_uid();
        let rv = self.next_rv();
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(uid));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        let obj = Arc::new(obj);
        self.resources[res].objects.insert(key, obj.clone());
        self.commit(res, namespace, EventType::Added, None, obj.clone());
        if let Some(row) = registered {
            self.register(row);
        }
        Ok(obj)
    }

    /// Serves a CRD's kind (or updates the row of one already served).
    fn register(&mut self, info: ResourceInfo) {
        if let Some(i) = self
            .resources
            .iter()
            .position(|r| r.info.group == info.group && r.info.plural == info.plural)
        {
            self.resources[i].info = info;
            self.resources[i].served = true;
        } else {
            self.resources.push(Resource {
                info,
                served: true,
                objects: BTreeMap::new(),
            });
        }
    }

    /// PUT: replaces the object (or, for `Part::Status`, its status).
    pub fn update(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        new: Value,
        part: Part,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(res, namespace, name)?;
        let info = &self.resources[res].info;
        if !new.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} update must be a JSON object",
                info.kind
            )));
        }
        check_type(info, &new)?;
        let body_name = meta(&new, "name");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta(&new, "namespace");
        if info.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
            )));
        }
        let precondition = meta(&new, "resourceVersion");
        self.write(res, namespace, name, &old, new, part, &precondition)
    }

    /// PATCH in any of the four formats; `apply` creates the object when absent.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        body: &Value,
        part: Part,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let info = self.resources[res].info.clone();
        let old = match self.get(res, namespace, name) {
            Ok(o) => o,
            Err(_) if kind == PatchKind::Apply && part == Part::Main => {
                let mut obj = body.clone();
                let body_name = meta(&obj, "name");
                if !body_name.is_empty() && body_name != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )));
                }
                meta_mut(&mut obj).insert("name".into(), json!(name));
                return self.create(res, namespace, obj).map(|o| (o, true));
            }
            Err(e) => return Err(e),
        };
        let mut new = (*old).clone();
        match kind {
            PatchKind::Merge => patch::merge_patch(&mut new, body),
            PatchKind::Json => patch::json_patch(&mut new, body).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch on {} {name:?} failed: {e}", info.plural),
                )
            })?,
            PatchKind::Strategic => {
                if info.custom {
                    return Err(ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!("strategic merge patch is not supported for custom resource {}; use a merge patch", info.qualified()),
                    ));
                }
                patch::strategic_merge(&mut new, body)
            }
            PatchKind::Apply => {
                check_type(&info, body)?;
                patch::apply_merge(&mut new, body)
            }
        }
        // A resourceVersion in the patch is a precondition, as in Kubernetes.
        let precondition = body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !precondition.is_empty() && precondition != meta(&old, "resourceVersion") {
            return Err(ApiError::conflict(&info.group, &info.plural, name, "the object has been modified; please apply your changes to the latest version and try again"));
        }
        meta_mut(&mut new).insert(
            "resourceVersion".into(),
            json!(meta(&old, "resourceVersion")),
        );
        self.write(res, namespace, name, &old, new, part, "")
            .map(|o| (o, false))
    }

    /// The common tail of update and patch.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        old: &Arc<Value>,
        mut new: Value,
        part: Part,
        precondition: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let info = self.resources[res].info.clone();
        if !precondition.is_empty() && precondition != meta(old, "resourceVersion") {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut result = match part {
            Part::Status => {
                // A status write changes status only.
                let mut r = (**old).clone();
                match new.get("status") {
                    Some(s) => r["status"] = s.clone(),
                    None => {
                        if let Some(o) = r.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                r
            }
            Part::Main => {
                if info.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                // Fields the server owns.
                let om = old.get("metadata").cloned().unwrap_or_default();
                let m = meta_mut(&mut new);
                for k in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "namespace",
                    "name",
                ] {
                    match om.get(k) {
                        Some(v) => m.insert(k.into(), v.clone()),
                        None => m.remove(k),
                    };
                }
                new["apiVersion"] = old.get("apiVersion").cloned().unwrap_or_default();
                new["kind"] = json!(info.kind);
                new
            }
        };
        if info.is_core("pods") && part == Part::Main {
            validate_pod(name, &result)?;
            validate_gates_update(name, old, &result)?;
            if old.pointer("/spec/nodeName") != result.pointer("/spec/nodeName")
                && old
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty())
            {
                return Err(ApiError::invalid("Pod", name, "spec.nodeName: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`"));
            }
        }
        dra::on_write(&info, name, old, &mut result, part)?;
        if comparable(&result) == comparable(old) {
            // A no-op write changes nothing, not even the resourceVersion.
            return Ok(old.clone());
        }
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let bumped = if spec_part(&result) != spec_part(old) {
            generation + 1
        } else {
            generation
        };
        let registered = if info.group == "apiextensions.k8s.io" && part == Part::Main {
            let row = resources::from_crd(&result)?;
            result["status"] = resources::crd_established_status(&row);
            Some(row)
        } else {
            None
        };
        let rv = self.next_rv();
        let m = meta_mut(&mut result);
        m.insert("generation".into(), json!(bumped));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.remove("managedFields");
        // The last finalizer gone from an object being deleted: it goes now.
        let finalizers_done = m.get("deletionTimestamp").is_some()
            && m.get("finalizers")
                .and_then(Value::as_array)
                .is_none_or(|f| f.is_empty());
        let result = Arc::new(result);
        let key = self.key(res, namespace, name);
        if finalizers_done {
            self.resources[res].objects.remove(&key);
            self.commit(
                res,
                namespace,
                EventType::Deleted,
                Some(old.clone()),
                result.clone(),
            );
            self.after_delete(res, &result);
        } else {
            self.resources[res].objects.insert(key, result.clone());
            self.commit(
                res,
                namespace,
                EventType::Modified,
                Some(old.clone()),
                result.clone(),
            );
        }
        if let Some(row) = registered {
            self.register(row);
        }
        Ok(result)
    }

    /// DELETE. Preconditions (uid, resourceVersion) come from DeleteOptions. An object with
    /// finalizers is only marked (deletionTimestamp) until they are removed.
    pub fn delete(
        &mut self,
        res: ResId,
        namespace: &str,
        name: &str,
        options: &Value,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(res, namespace, name)?;
        let info = self.resources[res].info.clone();
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            if let Some(want) = options
                .pointer(&format!("/preconditions/{field}"))
                .and_then(Value::as_str)
            {
                let have = meta(&old, field);
                if want != have {
                    return Err(ApiError::conflict(
                        &info.group,
                        &info.plural,
                        name,
                        &format!("Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"),
                    ));
                }
            }
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        let key = self.key(res, namespace, name);
        let rv = self.next_rv();
        let mut obj = (*old).clone();
        let m = meta_mut(&mut obj);
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        if has_finalizers {
            if m.contains_key("deletionTimestamp") {
                self.rv -= 1; // nothing changed
                return Ok(old);
            }
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            let obj = Arc::new(obj);
            self.resources[res].objects.insert(key, obj.clone());
            self.commit(res, namespace, EventType::Modified, Some(old), obj.clone());
            return Ok(obj);
        }
        let obj = Arc::new(obj);
        self.resources[res].objects.remove(&key);
        self.commit(res, namespace, EventType::Deleted, Some(old), obj.clone());
        self.after_delete(res, &obj);
        Ok(obj)
    }

    /// Cascades: a namespace takes its objects with it; a CRD its kind and objects.
    fn after_delete(&mut self, res: ResId, obj: &Value) {
        let info = self.resources[res].info.clone();
        let name = meta(obj, "name");
        if info.is_core("namespaces") {
            for r in 0..self.resources.len() {
                if !self.resources[r].info.namespaced {
                    continue;
                }
                let keys: Vec<_> = self.resources[r]
                    .objects
                    .keys()
                    .filter(|(ns, _)| *ns == name)
                    .cloned()
                    .collect();
                for (ns, n) in keys {
                    self.force_delete(r, &ns, &n);
                }
            }
        } else if info.group == "apiextensions.k8s.io" {
            let group = obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or("");
            let plural = obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or("");
            if let Some(r) = self.find(group, plural) {
                let keys: Vec<_> = self.resources[r].objects.keys().cloned().collect();
                for (ns, n) in keys {
                    self.force_delete(r, &ns, &n);
                }
                self.resources[r].served = false;
                // Watches on the kind end, as they do when a CRD goes away.
                self.watchers.retain(|w| w.res != r);
            }
        }
    }

    fn force_delete(&mut self, res: ResId, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(old) = self.resources[res].objects.remove(&key) {
            let rv = self.next_rv();
            let mut obj = (*old).clone();
            meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
            self.commit(res, namespace, EventType::Deleted, Some(old), Arc::new(obj));
        }
    }
}
