//! `basalt-sim`: what Basalt would do on a cluster, without a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use basalt_sim::replay::{self, report};
use basalt_sim::{bench, fgd, plan, synthetic};

// A replay builds a snapshot and a session every cycle, hundreds of thousands of short-lived
// allocations per second; mimalloc serves them markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "basalt-sim",
    version,
    about = "Basalt's offline planner and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanOutput {
    Text,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scheduling cycle over cluster dumps and print the plan (what Basalt would do).
    /// Without --snapshot, plans the built-in example cluster.
    Plan {
        /// Manifest files: multi-document YAML, JSON, or `kind: List` as `kubectl get -o yaml`
        /// prints them (Nodes, Pods, PriorityClasses, PodGroups, Queues, NodeTopologies,
        /// HyperNodes, Namespaces, PersistentVolumeClaims, PersistentVolumes, StorageClasses;
        /// Jobs, Kubeflow jobs, JobSets and Volcano Jobs for the gangs of their pods).
        #[arg(long = "snapshot", value_name = "FILE")]
        snapshots: Vec<PathBuf>,
        /// Scheduler config (YAML); defaults apply to absent fields.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Pods with this schedulerName are Basalt's (repeatable; overrides the config).
        #[arg(long = "scheduler-name", value_name = "NAME")]
        scheduler_names: Vec<String>,
        #[arg(long, value_enum, default_value_t = PlanOutput::Text)]
        output: PlanOutput,
        /// The instant to plan at (RFC 3339, e.g. 2026-11-29T12:00:00Z); defaults to now. Waiting
        /// times (backfill reservations) are measured against it.
        #[arg(long, value_name = "TIME")]
        now: Option<jiff::Timestamp>,
        /// Refuse the whole dump at its first object that cannot be read or converted (exit
        /// 2), instead of leaving that object out with an error on stderr, as the scheduler
        /// does (the default).
        #[arg(long)]
        strict: bool,
        /// Explain why this job (`NAMESPACE/NAME` of its PodGroup, or of a pod without one)
        /// waits, in full: who holds what it needs, what would free it, its place in line
        /// (repeatable). The text output ends with the explanation; JSON and YAML carry it in
        /// the group's status.
        #[arg(long, value_name = "NS/JOB")]
        explain: Vec<String>,
    },
    /// Place a synthetic backlog of gangs and report pods placed per second and cycle time.
    Bench {
        #[arg(long, default_value_t = 5000)]
        nodes: usize,
        #[arg(long, default_value_t = 10000)]
        pods: usize,
        #[arg(long, default_value_t = 8)]
        gang_size: usize,
        #[arg(long, default_value_t = 8)]
        gpus_per_node: u32,
        #[arg(long, default_value_t = 1)]
        gpus_per_pod: u32,
        /// Leaf queues of a three-level queue tree (0: every job in `default`).
        #[arg(long, default_value_t = 0)]
        queues: usize,
        /// Pods already running before the cycle (low-priority gangs packed onto the first
        /// nodes), so that reclaim and preempt have work to consider.
        #[arg(long, default_value_t = 0)]
        running: usize,
        /// A fabric (spines of 25 racks of 20 nodes, NVL72-style cliques in every fourth
        /// rack) with a mixed topology-constrained backlog: 512-GPU gangs (required spine),
        /// 32-GPU gangs of TP=8 groups (required rack), TP=8 jobs (required nvlink), 1-GPU pods.
        #[arg(long)]
        fabric: bool,
        /// Nodes in ten zones (whole racks dealt in turn) and a backlog with pod constraints:
        /// of every ten jobs, two keep one member per node (required hostname anti-affinity),
        /// two spread over zones (`maxSkew: 1`), one prefers its members' zone (preferred pod
        /// affinity). The same cluster and pods without their constraints are timed alongside,
        /// and the report gives the ratio.
        #[arg(long, conflicts_with = "fabric")]
        constrained: bool,
        /// HAMi nodes (GPUs of 80 GiB split 10 ways) and a backlog of single pods sharing GPUs
        /// in an openb-like mix: per 20 pods, 7 whole GPUs, 4 half GPUs, 4 quarter GPUs, 3
        /// 8 GiB shares with 20 % compute, one 2-GPU and one 4-GPU share of 30 GiB each.
        #[arg(long, conflicts_with_all = ["fabric", "constrained"])]
        sharing: bool,
        /// GPUs published as DRA ResourceSlices (every fourth node A100s, the rest H100s) and a
        /// backlog of single pods, each with its own claim for 1 to --gpus-per-node GPUs with a
        /// productName selector; the snapshot time includes conversion and the CEL selectors.
        #[arg(long, conflicts_with_all = ["fabric", "constrained", "sharing"])]
        dra: bool,
        /// Cycles to run; the best is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Also time the cycle with explanations off (alternately), and report what explaining
        /// every waiting job costs.
        #[arg(long)]
        explain_cost: bool,
        /// Time one forecast run instead of a cycle: the --running gangs end at stated
        /// instants over an hour, the backlog waits for them.
        #[arg(long, conflicts_with_all = ["fabric", "sharing", "dra", "explain_cost"])]
        forecast: bool,
        /// Scheduler config (YAML); the default config when absent.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// The fragmentation experiment of the FGD paper (USENIX ATC'23) on the openb node and pod
    /// lists: unallocated GPU % at every 5 % of arrived GPU load, median over seeds. Without
    /// --nodes/--pods, runs the bundled sample.
    Fgd {
        /// Node list CSV (sn, cpu_milli, memory_mib, gpu, model).
        #[arg(long, value_name = "NODE_CSV", requires = "pods")]
        nodes: Option<PathBuf>,
        /// Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]).
        #[arg(long, value_name = "POD_CSV", requires = "nodes")]
        pods: Option<PathBuf>,
        /// bestfit, dotprod, clustering, packing, random, fgd, basalt; `all` or a comma list
        /// runs several (JSON is then an array with one object per policy).
        #[arg(long, default_value = "all")]
        policy: String,
        /// Seeds: a range `42-51`, a list `42,43`, or both.
        #[arg(long, default_value = "42-51")]
        seeds: String,
        /// Runs in parallel (default: the machine's cores).
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// A synthetic MIG workload (1g/2g/3g/7g pods arriving and leaving) replayed with each
    /// static layout and with layouts chosen from demand: pending time, unallocated compute,
    /// re-layouts (`simulations/src/mig`).
    Mig {
        #[command(flatten)]
        args: basalt_sim::mig::MigArgs,
        /// Scheduler config (YAML); the default config when absent.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Serve an in-memory Kubernetes API server (for kubectl, kube-rs clients and the
    /// scheduler) until interrupted. Nothing is persisted.
    Apiserver {
        /// Address to listen on; port 0 picks a free port (printed, and written to the kubeconfig).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Write a kubeconfig for this server here (current context, namespace default).
        #[arg(long, value_name = "FILE")]
        write_kubeconfig: Option<PathBuf>,
        /// Fault settings to start with (JSON or YAML: latencyMs, rules, dropWatchesAfter);
        /// change them at run time with PUT /admin/faults.
        #[arg(long, value_name = "FILE")]
        faults: Option<PathBuf>,
        /// Seed of fault draws and generated names.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Changes kept for watch resumption (older resourceVersions get 410 Gone).
        #[arg(long, default_value_t = 10_000)]
        history: usize,
        /// Bound pods become Running and Ready at once, as if a kubelet started them.
        #[arg(long)]
        run_bound_pods: bool,
        /// Leave out Dynamic Resource Allocation (resource.k8s.io/v1): a cluster that does not
        /// serve it (absent from discovery, 404).
        #[arg(long)]
        no_dra: bool,
    },
    /// Replay a workload trace through Basalt's scheduler (simulated time) and write a report:
    /// summary.json, CSV time series, charts and report.md. Without --trace, replays the
    /// bundled Philly sample.
    Replay {
        #[command(flatten)]
        trace: replay::TraceArgs,
        /// Scheduler config (YAML, as for `plan --config`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Report folder (replaced).
        #[arg(long, default_value = "basalt-report")]
        out: PathBuf,
        /// What to print: a text table or summary.json.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Check the forecast against the replay: replay to --at, forecast every waiting gang's
    /// start from the replay's cluster with arrivals stopped, replay on without arrivals and
    /// compare (exact run times: equal for every gang; learned: the error's median and p90).
    Forecast {
        #[command(flatten)]
        trace: replay::TraceArgs,
        /// Scheduler config (YAML, as for `plan --config`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The forecast instants, in simulated seconds (repeatable).
        #[arg(long = "at", value_name = "SECONDS", required = true)]
        at: Vec<f64>,
        #[arg(long, value_enum, default_value_t = replay::forecast::Runtimes::Exact)]
        runtimes: replay::forecast::Runtimes,
    },
    /// Replay the same trace under several configs and print one side-by-side table; writes a
    /// report with combined charts.
    Compare {
        #[command(flatten)]
        trace: replay::TraceArgs,
        /// Scheduler configs (repeat; each is one column). `default` names the built-in defaults.
        #[arg(long = "config", value_name = "FILE", required = true)]
        configs: Vec<PathBuf>,
        #[arg(long, default_value = "basalt-compare")]
        out: PathBuf,
    },
}

/// Set by Ctrl-C: runs stop, print what they measured and mark their report partial.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Exit code of an interrupted run (as a shell reports SIGINT).
const INTERRUPTED: u8 = 130;

fn progress(total: u64, label: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let target = if std::io::stdout().is_terminal() {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let pb = indicatif::ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(label.to_string());
    pb
}

fn run_one(
    loaded: &replay::Loaded,
    config: &basalt_plugins::Config,
    label: &str,
) -> anyhow::Result<(replay::sim::Outcome, replay::metrics::Summary)> {
    let pb = progress(2 * loaded.workload.jobs.len() as u64, label);
    let result = replay::execute(loaded, config, label, &STOP, |n| {
        if n % 1024 == 0 {
            pb.set_position(n);
        }
    });
    pb.finish_and_clear();
    result
}

fn config_label(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Apiserver { .. } = cli.command {
        return match serve(cli.command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("basalt-sim apiserver: {e:#}");
                ExitCode::from(2)
            }
        };
    }
    if matches!(
        cli.command,
        Command::Replay { .. } | Command::Compare { .. }
    ) {
        // Without a handler Ctrl-C simply ends the process, which is still no partial report.
        let _ = ctrlc::set_handler(|| STOP.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    match run(cli) {
        Ok(out) => {
            print!("{out}");
            if STOP.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("basalt-sim: interrupted; the figures above are partial");
                return ExitCode::from(INTERRUPTED);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("basalt-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the in-memory API server until Ctrl-C or SIGTERM.
fn serve(command: Command) -> anyhow::Result<()> {
    use anyhow::Context;
    let Command::Apiserver {
        listen,
        write_kubeconfig,
        faults,
        seed,
        history,
        run_bound_pods,
        no_dra,
    } = command
    else {
        unreachable!("serve is called for the apiserver command only");
    };
    let faults = match faults {
        None => basalt_apiserver::Faults::default(),
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("--faults {}: cannot read", path.display()))?;
            basalt_crds::limits::check(&format!("--faults {}", path.display()), &text)?;
            serde_yaml::from_str(&text)
                .with_context(|| format!("--faults {}: not valid fault settings", path.display()))?
        }
    };
    let config = basalt_apiserver::Config {
        listen,
        seed,
        faults,
        history,
        run_bound_pods,
        serve_dra: !no_dra,
        ..Default::default()
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let signals = Signals::listen()?;
        let server = basalt_apiserver::ApiServer::start(config).await?;
        if let Some(path) = &write_kubeconfig {
            server.write_kubeconfig(path)?;
        }
        println!("basalt-apiserver serving on {}", server.url());
        if let Some(path) = &write_kubeconfig {
            println!("kubeconfig written to {}", path.display());
        }
        signals.wait().await?;
        eprintln!("basalt-apiserver: shutting down");
        server.shutdown().await;
        Ok(())
    })
}

/// Listens for Ctrl-C and SIGTERM. Made before the server says it is ready, so a signal sent
/// right after that line is never lost to the default handler (which would kill the process).
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> anyhow::Result<Signals> {
        Ok(Signals {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?,
            #[cfg(unix)]
            int: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    async fn wait(mut self) -> anyhow::Result<()> {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await?;
        Ok(())
    }
}

/// Builds the whole output before printing, so a failure never leaves half a result on stdout.
fn run(cli: Cli) -> anyhow::Result<String> {
    match cli.command {
        Command::Plan {
            snapshots,
            config,
            scheduler_names,
            output,
            now,
            strict,
            explain,
        } => {
            let mut config = plan::load_config(config.as_deref())?;
            if !scheduler_names.is_empty() {
                config.scheduler_names = scheduler_names;
            }
            let options = basalt_crds::ConvertOptions {
                scheduler_names: config.scheduler_names.clone(),
                now_ms: now.unwrap_or_else(jiff::Timestamp::now).as_millisecond(),
                device_resources: config.devices.clone(),
                tiers: config.topology.tiers.clone(),
            };
            let (snapshot, warnings) = plan::load(&snapshots, &options, strict)?;
            for w in warnings {
                eprintln!("basalt-sim: warning: {w}");
            }
            let mut fw = basalt_plugins::framework(&config, &snapshot.resources);
            fw.explain_jobs = explain.clone();
            let result = basalt_engine::schedule(&snapshot, &fw, &mut Default::default());
            let mut why = plan::explained(&snapshot, &result, &explain)?;
            if !explain.is_empty() && matches!(output, PlanOutput::Text) {
                let objects = basalt_sim::plan_forecast::objects(&snapshots)?;
                why += &basalt_sim::plan_forecast::forecast_lines(
                    &objects, &options, &config, &explain,
                );
            }
            Ok(match output {
                PlanOutput::Text => plan::render_text(&snapshot, &result) + &why,
                PlanOutput::Json => serde_json::to_string_pretty(&result)? + "\n",
                PlanOutput::Yaml => serde_yaml::to_string(&result)?,
            })
        }
        Command::Bench {
            nodes,
            pods,
            gang_size,
            gpus_per_node,
            gpus_per_pod,
            queues,
            running,
            runs,
            explain_cost,
            forecast,
            fabric,
            constrained,
            sharing,
            dra,
            config,
            output,
        } => {
            anyhow::ensure!(gang_size >= 1, "--gang-size: must be at least 1");
            anyhow::ensure!(
                gpus_per_node as usize <= basalt_engine::MAX_GPUS_PER_NODE,
                "--gpus-per-node: at most {} GPUs per node are supported",
                basalt_engine::MAX_GPUS_PER_NODE
            );
            let setup = synthetic::Synthetic {
                gang_size,
                gpus_per_node,
                gpus_per_pod,
                queues,
                running,
                fabric,
                constrained,
                sharing,
                dra,
                ..synthetic::Synthetic::new(nodes, pods)
            };
            let config = plan::load_config(config.as_deref())?;
            if forecast {
                let report = basalt_sim::bench_forecast::run(&setup, &config, runs)?;
                return Ok(match output {
                    Output::Text => report.text(),
                    Output::Json => serde_json::to_string_pretty(&report)? + "\n",
                });
            }
            let report = bench::run(&setup, &config, runs, explain_cost)?;
            Ok(match output {
                Output::Text => report.text(),
                Output::Json => serde_json::to_string_pretty(&report)? + "\n",
            })
        }
        Command::Fgd {
            nodes,
            pods,
            policy,
            seeds,
            jobs,
            output,
        } => run_fgd(nodes, pods, &policy, &seeds, jobs, output),
        Command::Mig { args, config } => {
            let outcomes = basalt_sim::mig::run(&args, &plan::load_config(config.as_deref())?)?;
            Ok(basalt_sim::mig::render_text(&outcomes))
        }
        Command::Apiserver { .. } => unreachable!("handled in main"),
        Command::Forecast {
            trace,
            config,
            at,
            runtimes,
        } => {
            let config = plan::load_config(config.as_deref())?;
            let loaded = trace.load()?;
            let mut out = String::new();
            for s in at {
                let at_ms = (s * 1000.0).round() as i64;
                let c = replay::forecast::check(&loaded, &config, at_ms, runtimes)?;
                out.push_str(&c.text());
                out.push('\n');
            }
            Ok(out)
        }
        Command::Replay {
            trace,
            config,
            out,
            output,
        } => {
            let label = config
                .as_deref()
                .map_or("default".to_string(), config_label);
            let config = plan::load_config(config.as_deref())?;
            let loaded = trace.load()?;
            let (outcome, summary) = run_one(&loaded, &config, &label)?;
            let names: Vec<String> = loaded
                .workload
                .jobs
                .iter()
                .map(|j| j.name.clone())
                .collect();
            let run = report::RunReport {
                label: label.clone(),
                outcome: &outcome,
                summary: &summary,
                job_names: &names,
            };
            report::write_atomically(&out, |dir| report::write_replay(dir, &run, &loaded.inputs))?;
            eprintln!("basalt-sim: {}", replay::timing_text(&outcome));
            Ok(match output {
                Output::Json => serde_json::to_string_pretty(&summary)? + "\n",
                Output::Text => {
                    let rows = report::table_rows(&[&summary]);
                    let mut text = String::new();
                    if !summary.complete {
                        text.push_str("PARTIAL: interrupted before the trace ended; figures cover the simulated time reached\n");
                    }
                    text.push_str(&report::text_table(&[label], &rows));
                    text.push_str(&format!("\nreport: {}\n", out.join("report.md").display()));
                    text
                }
            })
        }
        Command::Compare {
            trace,
            configs,
            out,
        } => {
            let mut parsed = Vec::new();
            for path in &configs {
                let config = if path.as_os_str() == "default" {
                    basalt_plugins::Config::default()
                } else {
                    plan::load_config(Some(path))?
                };
                parsed.push((config_label(path), config));
            }
            let mut labels: Vec<String> = parsed.iter().map(|(l, _)| l.clone()).collect();
            for i in 0..labels.len() {
                if labels[..i].contains(&labels[i]) || labels[i + 1..].contains(&labels[i]) {
                    labels[i] = format!("{}#{}", labels[i], i + 1);
                }
            }
            let loaded = trace.load()?;
            let names: Vec<String> = loaded
                .workload
                .jobs
                .iter()
                .map(|j| j.name.clone())
                .collect();
            let mut results = Vec::new();
            for ((_, config), label) in parsed.iter().zip(&labels) {
                if STOP.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let (o, s) = run_one(&loaded, config, label)?;
                eprintln!("basalt-sim: {label}: {}", replay::timing_text(&o));
                results.push((label.clone(), o, s));
            }
            let runs: Vec<report::RunReport> = results
                .iter()
                .map(|(label, o, s)| report::RunReport {
                    label: label.clone(),
                    outcome: o,
                    summary: s,
                    job_names: &names,
                })
                .collect();
            report::write_atomically(&out, |dir| {
                report::write_compare(dir, &runs, &loaded.inputs)
            })?;
            let summaries: Vec<&replay::metrics::Summary> = results.iter().map(|r| &r.2).collect();
            let shown: Vec<String> = results.iter().map(|r| r.0.clone()).collect();
            let mut text = String::new();
            if results.len() < labels.len() || summaries.iter().any(|s| !s.complete) {
                text.push_str("PARTIAL: interrupted; runs not shown did not run, runs marked incomplete stopped early\n");
            }
            text.push_str(&report::text_table(&shown, &report::table_rows(&summaries)));
            text.push_str(&format!("\nreport: {}\n", out.join("report.md").display()));
            Ok(text)
        }
    }
}

fn run_fgd(
    nodes: Option<PathBuf>,
    pods: Option<PathBuf>,
    policy: &str,
    seeds: &str,
    jobs: Option<usize>,
    output: Output,
) -> anyhow::Result<String> {
    let policies = fgd::Policy::parse_list(policy)?;
    let seeds = fgd::parse_seeds(seeds)?;
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| fgd::FgdError::Io {
            file: path.display().to_string(),
            source,
        })
    };
    let (node_list, pod_list, label) = match (&nodes, &pods) {
        (Some(n), Some(p)) => (
            fgd::trace::read_nodes(&n.display().to_string(), &read(n)?)?,
            fgd::trace::read_pods(&p.display().to_string(), &read(p)?)?,
            format!("{} and {}", n.display(), p.display()),
        ),
        _ => {
            eprintln!(
                "basalt-sim: no --nodes/--pods given; running the bundled sample ({}, {})",
                fgd::SAMPLE_NODES_LABEL,
                fgd::SAMPLE_PODS_LABEL
            );
            (
                fgd::trace::read_nodes(fgd::SAMPLE_NODES_LABEL, fgd::SAMPLE_NODES)?,
                fgd::trace::read_pods(fgd::SAMPLE_PODS_LABEL, fgd::SAMPLE_PODS)?,
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
    Ok(match output {
        Output::Json => fgd::render_json(&outcome.curves)?,
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
            fgd::render_text(&outcome.curves, &header)
        }
    })
}
