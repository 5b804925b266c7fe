//! `qpslab`: the command-line front end. Parses flags, calls the libraries, prints, and maps the
//! outcome to the exit codes of the design brief (0 ok, 1 checks failed, 2 usage/configuration).

mod args;
mod bench_cmd;
mod ci_out;
mod climb_cmd;
mod doctor_cmd;
mod host_cmd;
mod live_cmd;
mod load_cmd;
mod merge_cmd;
mod output;
mod serve_cmd;
mod store_cmd;
mod sweep_cmd;
mod tune_cmd;

use std::process::ExitCode;

use clap::Parser as _;

/// How a command ended, as the exit code tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    ChecksFailed,
    /// Pass a child's exit code through (`doctor -- COMMAND`).
    Code(u8),
}

/// An error that is the user's to fix: bad flag, unreachable target, missing permission.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_exit(&e),
    };
    match run(cli) {
        Ok(Outcome::Passed) => ExitCode::SUCCESS,
        Ok(Outcome::ChecksFailed) => ExitCode::from(1),
        Ok(Outcome::Code(c)) => ExitCode::from(c),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qpslab: error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Help and version print as clap renders them; usage errors become one line, with clap's
/// suggestion ("did you mean ...?") and the help of the subcommand being parsed, and exit 2.
fn usage_exit(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(2);
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    eprintln!("qpslab: error: {}", usage_line(e, &argv));
    ExitCode::from(2)
}

/// One line for a clap error: its message, its suggestion, and where the help is.
fn usage_line(e: &clap::Error, argv: &[String]) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = e.to_string();
    let message: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().trim_start_matches("error: "))
        .collect();
    let suggestion = [ContextKind::SuggestedSubcommand, ContextKind::SuggestedArg]
        .into_iter()
        .find_map(|k| match e.get(k)? {
            ContextValue::String(s) => Some(s.clone()),
            ContextValue::Strings(v) => v.first().cloned(),
            _ => None,
        });
    let mut line = message.join(" ");
    if let Some(s) = suggestion {
        line += &format!("; did you mean '{s}'?");
    }
    format!("{line} (see '{} --help')", command_path(argv))
}

/// `qpslab load` or `qpslab tune apply`: the subcommands named in `argv`, for the help hint.
fn command_path(argv: &[String]) -> String {
    use clap::CommandFactory as _;
    let mut cmd = args::Cli::command();
    let mut path = vec!["qpslab".to_string()];
    for arg in argv.iter().filter(|a| !a.starts_with('-')) {
        let Some(sub) = cmd.find_subcommand(arg).cloned() else { break };
        path.push(sub.get_name().to_string());
        cmd = sub;
    }
    path.join(" ")
}

fn run(cli: args::Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        args::Command::Load(a) => load_cmd::run(*a),
        args::Command::Serve(a) => serve_cmd::run(a),
        args::Command::Host(a) => host_cmd::run(a),
        args::Command::Doctor(a) => doctor_cmd::run(a),
        args::Command::Bench(a) => bench_cmd::run(*a),
        args::Command::Tune(a) => tune_cmd::run(a),
        args::Command::Merge(a) => merge_cmd::run(a),
        args::Command::Sweep(a) => sweep_cmd::run(a),
        args::Command::Climb(a) => climb_cmd::run(*a),
        args::Command::Runs(a) => store_cmd::runs(a),
        args::Command::Compare(a) => store_cmd::compare_cmd(a),
        args::Command::Report(a) => store_cmd::report_cmd(a),
        args::Command::Agent(_) => load_cmd::agent(),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
