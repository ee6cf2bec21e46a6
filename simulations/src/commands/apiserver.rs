//! `basalt-sim apiserver`: the in-memory Kubernetes API server, served until a signal.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ApiserverArgs {
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
}

/// Runs the in-memory API server until Ctrl-C or SIGTERM.
pub fn serve(args: ApiserverArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let ApiserverArgs {
        listen,
        write_kubeconfig,
        faults,
        seed,
        history,
        run_bound_pods,
        no_dra,
    } = args;
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
