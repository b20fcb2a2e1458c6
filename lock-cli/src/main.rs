//! `lockctl`: run a command under a distributed lock (so a cron job, batch job
//! or deploy step never runs on two hosts at once, and with `--min-hold` not
//! twice for one timer), and inspect and manage the locks of a DynamoDB or
//! PostgreSQL table. See `docs/cli.md`.

mod args;
mod child;
mod commands;
mod connect;
mod deadline;
mod exec;
mod exit;
mod metrics;
mod output;
mod progress;
mod text;
mod watchdog;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version go to stdout with 0; usage errors to stderr with 2.
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(exit::USAGE));
        }
    };
    // The helpers of `run` do their one job, without a runtime or logging.
    match &cli.command {
        args::Command::Exec(exec) => return ExitCode::from(exec::exec(exec.parent, &exec.command)),
        args::Command::Watchdog => return ExitCode::from(watchdog::serve()),
        _ => {}
    }
    // Library logs are for debugging (LOCKCTL_LOG=info); lockctl says what
    // matters itself.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("LOCKCTL_LOG").unwrap_or_else(|_| EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: never into a pipe or a log
        // file, and never when NO_COLOR is set (https://no-color.org).
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .init();
    // Installed before any client is built: each registers its figures then.
    let collector = cli.global.metrics.then(metrics::collect);
    let code = run(&cli);
    if let Some(collector) = collector {
        metrics::print(&collector);
    }
    code
}

fn run(cli: &args::Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(source) => {
            return exit::report(
                &exit::CliError::Io {
                    what: "starting the async runtime",
                    source,
                },
                cli.global.verbose,
            );
        }
    };
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => exit::report(&error, cli.global.verbose),
    }
}
