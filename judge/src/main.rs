//! `livecheck-judge [--config PATH]`: reads the config (else `$LIVECHECK_JUDGE_CONFIG`), serves until
//! SIGTERM or Ctrl-C, then finishes the judge calls in flight. Logs go to stderr; `RUST_LOG` filters.

#[cfg(target_family = "wasm")]
fn main() {}

/// musl's allocator is slow under the sidecar's load (see judge/Cargo.toml): the static build uses
/// mimalloc, which also takes malloc's place for the C code (SQLite); the glibc build keeps the
/// system's.
#[cfg(all(target_env = "musl", not(target_family = "wasm")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(target_family = "wasm"))]
fn main() -> std::process::ExitCode {
    native::main()
}

#[cfg(not(target_family = "wasm"))]
mod native {
    use std::fmt;
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::sync::Arc;

    use livecheck_judge::config::CONFIG_ENV;
    use livecheck_judge::{serve, App, Settings, StartError};
    use tracing_subscriber::EnvFilter;

    const USAGE: &str = "usage: livecheck-judge [--config PATH]";

    pub fn main() -> ExitCode {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
            )
            .init();
        let path = match config_path(std::env::args().skip(1)) {
            Ok(p) => p,
            Err(problem) => {
                eprintln!("livecheck-judge: {problem}\n{USAGE}");
                return ExitCode::from(2);
            }
        };
        let settings = match Settings::load(&path, &|var| std::env::var(var).ok()) {
            Ok(s) => s,
            Err(err) => {
                for problem in &err.0 {
                    eprintln!("livecheck-judge: config: {problem}");
                }
                return ExitCode::from(2);
            }
        };
        // One thread runs every task: a judged check is waiting on I/O nearly all its time, and
        // on tokio's work-stealing pool the request, its backend call and hyper's connection tasks
        // woke each other across threads, which cost as much as all the rest of the sidecar's work
        // for a check (`make bench` judge_overhead: ~440 -> ~215 us p50). SQLite's work has its
        // own thread (sqlx's worker) either way.
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("livecheck-judge: cannot start the runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        match runtime.block_on(run(settings)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(problem) => {
                eprintln!("livecheck-judge: {problem}");
                ExitCode::FAILURE
            }
        }
    }

    /// Why the command line names no config file: each says one sentence.
    #[derive(Debug)]
    enum Usage {
        /// `--config` is last, without its path.
        NoPath,
        /// `-h` / `--help`.
        Help,
        Unknown(String),
        /// Neither `--config` nor the env var.
        NoConfig,
    }

    impl fmt::Display for Usage {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Self::NoPath => f.write_str("--config needs a path"),
                Self::Help => write!(f, "reads PATH, else ${CONFIG_ENV}"),
                Self::Unknown(other) => write!(f, "unknown argument {other:?}"),
                Self::NoConfig => write!(f, "no config: pass --config PATH or set {CONFIG_ENV}"),
            }
        }
    }

    fn config_path(mut args: impl Iterator<Item = String>) -> Result<PathBuf, Usage> {
        let mut path = None;
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--config" => match args.next() {
                    Some(p) => path = Some(PathBuf::from(p)),
                    None => return Err(Usage::NoPath),
                },
                other => match other.strip_prefix("--config=") {
                    Some(p) => path = Some(PathBuf::from(p)),
                    None if other == "-h" || other == "--help" => return Err(Usage::Help),
                    None => return Err(Usage::Unknown(other.to_owned())),
                },
            }
        }
        path.or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from))
            .ok_or(Usage::NoConfig)
    }

    /// Why the service stopped with a failure.
    #[derive(Debug)]
    enum RunError {
        Start(StartError),
        Listen(SocketAddr, std::io::Error),
        Serve(std::io::Error),
    }

    impl fmt::Display for RunError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Self::Start(e) => write!(f, "{e}"),
                Self::Listen(listen, e) => write!(f, "cannot listen on {listen}: {e}"),
                Self::Serve(e) => write!(f, "server failed: {e}"),
            }
        }
    }

    async fn run(settings: Settings) -> Result<(), RunError> {
        let listen = settings.listen;
        let app = App::start(settings).await.map_err(RunError::Start)?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| RunError::Listen(listen, e))?;
        // The bound address, so a config asking for port 0 says which port it got.
        let listen = listener.local_addr().unwrap_or(listen);
        // The config allows no token on loopback only.
        let filter_token = app.settings().filter_token.is_some();
        if !filter_token {
            tracing::warn!(
                %listen,
                "no [filter] token_env: any local process can call the filter endpoints"
            );
        }
        tracing::info!(
            %listen,
            replica = %app.replica(),
            timeout_ms = app.settings().timeout.as_millis() as u64,
            max_concurrent = app.settings().max_concurrent,
            filter_token = if filter_token { "required" } else { "none" },
            "livecheck-judge listening"
        );
        serve(listener, Arc::clone(&app), shutdown_signal())
            .await
            .map_err(RunError::Serve)?;
        app.leave().await;
        tracing::info!("livecheck-judge stopped");
        Ok(())
    }

    async fn shutdown_signal() {
        let ctrl_c = async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            _ = term => {},
        }
        tracing::info!(
            "shutting down: finishing the judge calls in flight, then handing this replica's work to the others"
        );
    }
}
