//! `ferrisson`: the operators' tool. Lists the objects in Redis (`list`, `watch`), shows who
//! holds one and who waits (`inspect`), which clients are alive and what each holds
//! (`clients`), and frees a stuck lock (`force-unlock`). See the guide's "Operating
//! ferrisson" page, and `ferrisson --help` for the exit codes.

mod args;
mod clients;
mod commands;
mod connect;
mod fail;
mod force;
mod holds;
mod screen;
mod show;
mod table;
mod text;
mod watch;
mod who;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use fail::{Code, Failure};

fn main() -> ExitCode {
    // Usage errors exit here with 2, `--help` and `--version` with 0 (clap's codes).
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => Err(Failure::new(
            Code::Redis,
            format!("cannot start the async runtime: {e}"),
        )),
    };
    match outcome {
        Ok(code) => code.exit(),
        Err(failure) => {
            // The message may carry a name or a server's reply: no raw control characters.
            let message = text::clean(&failure.message);
            let _ = writeln!(std::io::stderr(), "ferrisson: {message}");
            failure.code.exit()
        }
    }
}

async fn run(cli: Cli) -> Result<Code, Failure> {
    if let Command::Watch { .. } = cli.command {
        watch::needs_terminal()?;
    }
    let client = connect::connect(&cli.server).await?;
    let outcome = match &cli.command {
        Command::Inspect { name, kind, json } => {
            commands::inspect(&client, name, *kind, *json).await
        }
        Command::List { pattern, json } => commands::list(&client, pattern, *json).await,
        Command::Clients { json } => clients::clients(&client, *json).await,
        Command::Watch { pattern, interval } => {
            let server = connect::shown(&cli.server);
            watch::watch(&client, pattern, *interval, &server).await
        }
        Command::ForceUnlock { name, yes } => force::force_unlock(&client, name, *yes).await,
    };
    // The tool's identity goes now, rather than 5 s later by its TTL.
    client.close().await;
    outcome
}
