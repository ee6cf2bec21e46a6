//! `basalt-sim plan --explain NS/JOB`'s forecast: when the job starts, from the same engine call
//! the daemon's forecast task makes (`basalt_engine::forecast`), with each pod's end read from
//! the dump as the daemon reads it (`basalt_crds::ends`: activeDeadlineSeconds, the
//! expected-runtime annotation, run times of finished pods of the same owner and queue).

use std::collections::HashMap;
use std::fmt::Write;

use basalt_crds::ends::{ends, Learned};
use basalt_crds::{ConvertOptions, Object};
use basalt_engine::forecast::{self, Limits, Method};
use basalt_plugins::Config;

/// The dump's objects, read as `plan` reads them (the built-in example without files; an
/// object that does not read is left out, as `plan` leaves it out and reports it).
pub fn objects(files: &[std::path::PathBuf]) -> anyhow::Result<Vec<(String, Object)>> {
    if files.is_empty() {
        let label = crate::plan::EXAMPLE_LABEL;
        return Ok(basalt_crds::read_objects(label, crate::plan::EXAMPLE_CLUSTER)?.objects);
    }
    let mut objects = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let label = path.display().to_string();
        objects.extend(basalt_crds::read_objects_lenient(&label, &text)?.objects);
    }
    Ok(objects)
}

/// Per job asked for, a `Forecast:` line: its start and how it is known, or why it has none.
pub fn forecast_lines(
    objects: &[(String, Object)],
    options: &ConvertOptions,
    config: &Config,
    jobs: &[String],
) -> String {
    let spec = match basalt_crds::convert::cluster_spec(objects, options) {
        Ok(spec) => spec,
        Err(e) => return format!("\nFORECAST\nnone: the dump does not convert as a whole ({e})\n"),
    };
    // Learned as the daemon learns: keyed by each pod's queue, its own or its group's.
    let groups: HashMap<String, Option<&String>> = (spec.groups.iter())
        .map(|g| (format!("{}/{}", g.namespace, g.name), g.queue.as_ref()))
        .collect();
    let queue_of: HashMap<String, Option<String>> = (spec.pods.iter())
        .map(|p| {
            let group =
                (p.group.as_ref()).and_then(|g| groups.get(&format!("{}/{g}", p.namespace)));
            let queue = (p.queue.clone()).or_else(|| group.copied().flatten().cloned());
            (format!("{}/{}", p.namespace, p.name), queue)
        })
        .collect();
    let pods: Vec<_> = (objects.iter())
        .filter_map(|(_, o)| match o {
            Object::Pod(p) => Some(&**p),
            _ => None,
        })
        .collect();
    let mut learned = Learned::default();
    learned.learn(&pods, |p| {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        let name = p.metadata.name.as_deref().unwrap_or_default();
        queue_of.get(&format!("{ns}/{name}")).cloned().flatten()
    });
    let (ends, bad) = ends(objects, &spec, &learned);
    let mut out = String::from("\nFORECAST\n");
    for b in &bad {
        let _ = writeln!(
            out,
            "{} {}/{}: {} (taken as absent)",
            b.kind, b.namespace, b.name, b.message
        );
    }
    // The daemon's default period (1 s) between cycles.
    let limits = Limits::default();
    let framework = |names: &_| basalt_plugins::framework(config, names);
    let f = match forecast::forecast(spec, framework, &ends, limits) {
        Ok(f) => f,
        Err(e) => return out + &format!("none: the snapshot does not build ({e})\n"),
    };
    for name in jobs {
        let line = match f.job(name) {
            None => "not waiting: no forecast".to_string(),
            Some(j) => match (j.start_ms, j.method) {
                (Some(ms), method) if method != Method::Unknown => {
                    let at = jiff::Timestamp::from_millisecond(ms)
                        .map_or_else(|_| format!("{ms} ms"), |t| t.to_string());
                    format!("starts {at} ({})", method.as_str())
                }
                _ => format!(
                    "unknown: does not start within {} cycles or {} days of the ends known",
                    limits.max_cycles,
                    limits.horizon_ms / 86_400_000
                ),
            },
        };
        let _ = writeln!(out, "{name}: {line}");
    }
    out
}
