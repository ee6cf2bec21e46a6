//! `basalt-sim fgd`: the FGD paper's fragmentation experiment on openb node and pod lists.

use std::path::PathBuf;

use super::Output;
use crate::fgd;

#[derive(clap::Args)]
pub struct FgdArgs {
    /// Node list CSV (sn, cpu_milli, memory_mib, gpu, model).
    #[arg(long, value_name = "NODE_CSV", requires = "pods")]
    nodes: Option<PathBuf>,
    /// Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]).
    #[arg(long, value_name = "POD_CSV", requires = "nodes")]
    pods: Option<PathBuf>,
    /// bestfit, dotprod, clustering, packing, random, fgd, basalt; `all` or a comma list
    /// runs several (JSON is then an array with one object per policy); `none` with `--bound`
    /// runs only the limit.
    #[arg(long, default_value = "all")]
    policy: String,
    /// Also report the limit: `bound`, unallocated GPU % no placement of the same arrivals can
    /// beat (an LP relaxation), and `achievable`, the best placement found offline (see
    /// `fgd::bound`).
    #[arg(long)]
    bound: bool,
    /// Seeds: a range `42-51`, a list `42,43`, or both.
    #[arg(long, default_value = "42-51")]
    seeds: String,
    /// Runs in parallel (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// The curves as text or JSON; per-policy run times go to stderr.
pub fn run(args: FgdArgs) -> anyhow::Result<String> {
    let FgdArgs {
        nodes,
        pods,
        policy,
        bound,
        seeds,
        jobs,
        output,
    } = args;
    let policies = match policy.trim() {
        "none" if bound => Vec::new(),
        "none" => anyhow::bail!("--policy none runs nothing without --bound"),
        list => fgd::Policy::parse_list(list)?,
    };
    let seeds = fgd::parse_seeds(&seeds)?;
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| fgd::FgdError::Io {
            file: path.display().to_string(),
            source,
        })
    };
    let (node_list, pod_list, label) = match (&nodes, &pods) {
        (Some(n), Some(p)) => (
            crate::openb::read_nodes(&n.display().to_string(), read(n)?.as_bytes())?,
            crate::openb::read_pods(&p.display().to_string(), read(p)?.as_bytes())?,
            format!("{} and {}", n.display(), p.display()),
        ),
        _ => {
            eprintln!(
                "basalt-sim: no --nodes/--pods given; running the bundled sample ({}, {})",
                fgd::SAMPLE_NODES_LABEL,
                fgd::SAMPLE_PODS_LABEL
            );
            (
                crate::openb::read_nodes(fgd::SAMPLE_NODES_LABEL, fgd::SAMPLE_NODES.as_bytes())?,
                crate::openb::read_pods(fgd::SAMPLE_PODS_LABEL, fgd::SAMPLE_PODS.as_bytes())?,
                "the bundled openb sample".to_string(),
            )
        }
    };
    let exp = fgd::Experiment::new(&node_list, &pod_list)?;
    let threads = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    anyhow::ensure!(threads >= 1, "--jobs: must be at least 1");
    let outcome =
        fgd::run(&exp, &policies, &seeds, threads).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
    let mut curves = outcome.curves.clone();
    for s in &outcome.stats {
        let secs: Vec<f64> = s.elapsed.iter().map(|d| d.as_secs_f64()).collect();
        let total: f64 = secs.iter().sum();
        let arrivals: usize = s.arrivals.iter().sum();
        eprintln!(
            "basalt-sim: {:<10} {} seed(s), {:.0} arrivals/seed, {:.1} ms/seed (max {:.1} ms), \
             {:.0} arrivals/s",
            s.policy.name(),
            secs.len(),
            arrivals as f64 / secs.len() as f64,
            1000.0 * total / secs.len() as f64,
            1000.0 * secs.iter().cloned().fold(0.0, f64::max),
            arrivals as f64 / total.max(1e-9),
        );
        if s.carried > 0 {
            eprintln!(
                "basalt-sim: {}: {} of {} points (all seeds) had no arrival in their bin and take \
                 the allocation as the load passed them (few pods per percent of load)",
                s.policy.name(),
                s.carried,
                secs.len() * fgd::measure::POINTS.len(),
            );
        }
    }
    if bound {
        let workloads =
            fgd::workloads(&exp, &seeds).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
        let policy_runs: Vec<Vec<Vec<f64>>> = (0..seeds.len())
            .map(|s| {
                outcome
                    .stats
                    .iter()
                    .map(|p| p.per_seed[s].clone())
                    .collect()
            })
            .collect();
        let limit = fgd::bound::run(&exp, &workloads, &policy_runs, threads);
        report_limit(&limit, &seeds);
        curves.push(limit.bound);
        curves.push(limit.achievable);
    }
    Ok(match output {
        Output::Json => fgd::render_json(&curves)?,
        Output::Text => {
            let header = format!(
                "FGD fragmentation experiment on {label}: {} nodes, {} GPUs, {} trace pods, \
                 {} typical shapes; seeds {}",
                exp.nodes.len(),
                exp.capacity_milli / 1000,
                exp.pods.len(),
                exp.frag.len(),
                seeds
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            fgd::render_text(&curves, &header)
        }
    })
}

/// The limit's cost and any LP the solver failed on, on stderr.
fn report_limit(limit: &fgd::bound::Limit, seeds: &[u64]) {
    let secs: Vec<f64> = limit.elapsed.iter().map(|d| d.as_secs_f64()).collect();
    let lps: usize = limit.seeds.iter().map(|s| s.lps).sum();
    eprintln!(
        "basalt-sim: {:<10} {} seed(s), {:.1} ms/seed (max {:.1} ms), {} LP(s) solved",
        "bound",
        secs.len(),
        1000.0 * secs.iter().sum::<f64>() / secs.len().max(1) as f64,
        1000.0 * secs.iter().cloned().fold(0.0, f64::max),
        lps,
    );
    for (seed, limit) in seeds.iter().zip(&limit.seeds) {
        for why in &limit.failed {
            eprintln!(
                "basalt-sim: bound: seed {seed}: LP failed ({why}); that point's bound is the \
                 arrived GPU"
            );
        }
    }
}
