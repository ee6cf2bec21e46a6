//! `kubectl basalt`: what Basalt's scheduler says about the cluster, read from the objects it
//! writes (Queue and PodGroup status) and the nodes and pods. A kubectl plugin: kubectl runs
//! `kubectl-basalt` from the `PATH` for `kubectl basalt ...`; the kubeconfig is found as
//! kubectl finds it (`KUBECONFIG`, `~/.kube/config`, in-cluster).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

mod jobs;
mod nodes;
mod objects;
mod queues;
mod table;
mod why;

#[derive(Parser)]
#[command(
    name = "kubectl-basalt",
    version,
    about = "Basalt's queues, waiting jobs and why they wait, GPUs per topology domain"
)]
struct Cli {
    /// The kubeconfig to use (default: as kubectl finds it).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// The queue tree: weight, deserved, allocated, share, pending demand and jobs.
    Queues,
    /// PodGroups: state, place in their queue, why they wait, estimated start.
    Jobs {
        /// Only the jobs of this queue.
        #[arg(short = 'q', long)]
        queue: Option<String>,
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Everything the scheduler says about one job: why it waits, who holds what it needs,
    /// what would free it, where it stands and when it is expected to start.
    Why {
        /// `NAMESPACE/NAME`, or `NAME` in the namespace of `-n` or the context.
        job: String,
    },
    /// Usage.
    Top {
        #[command(subcommand)]
        what: Top,
    },
}

#[derive(Subcommand)]
enum Top {
    /// GPUs used and free per topology domain and per node.
    Nodes {
        /// A node label naming a topology tier, coarse to fine (repeatable); default: the
        /// scheduler's default tiers (topology.basalt.dev/spine, topology.basalt.dev/rack,
        /// nvidia.com/gpu.clique).
        #[arg(long = "tier", value_name = "LABEL")]
        tiers: Vec<String>,
    },
}

async fn connect(cli: &Cli) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..Default::default()
    };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if cli.context.is_some() => Config::from_kubeconfig(&options).await?,
        None => Config::infer().await?,
    };
    let namespace = (cli.namespace.clone()).unwrap_or_else(|| config.default_namespace.clone());
    Ok((Client::try_from(config)?, namespace))
}

async fn run(cli: Cli) -> anyhow::Result<String> {
    let (client, namespace) = connect(&cli).await?;
    let format = cli.output;
    match cli.command {
        Command::Queues => queues::run(&client, format).await,
        Command::Jobs {
            queue,
            all_namespaces,
        } => {
            let ns = (!all_namespaces).then_some(namespace.as_str());
            jobs::run(&client, ns, queue.as_deref(), format).await
        }
        Command::Why { job } => {
            let (ns, name) = job.split_once('/').unwrap_or((&namespace, &job));
            why::run(&client, ns, name, format).await
        }
        Command::Top {
            what: Top::Nodes { tiers },
        } => nodes::run(&client, tiers, format).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kubectl-basalt: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kubectl-basalt: {e:#}");
            ExitCode::FAILURE
        }
    }
}
