//! `jobyard`: the server binary.
//!
//! `jobyard serve` runs the server with embedded durable storage; `jobyard beanstalkd`
//! takes beanstalkd's own command line (so does the binary when invoked as `beanstalkd`);
//! likewise `gearmand`, and `jobd`, `jobd-master`, `jobctl` (crate `jobyard-jobd`).

mod dropin;
mod malloc_tuning;
mod package_files;
mod run;
mod settings;
mod standby;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "jobyard",
    version,
    about = "One durable job server for the job protocols you already run"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

// Parsed once at start-up and dropped: the size of the `serve` variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run the server with its embedded durable storage.
    Serve(settings::ServeArgs),
    /// Run as a drop-in beanstalkd, taking beanstalkd 1.12's flags (see `jobyard beanstalkd -h`).
    #[command(disable_help_flag = true)]
    Beanstalkd {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Manage a running server's queues over its HTTP admin API.
    Ctl(jobyard_ctl::CtlArgs),
    /// Run as a drop-in gearmand, taking gearmand 1.1's flags (see `jobyard gearmand -h`).
    #[command(disable_help_flag = true)]
    Gearmand {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run as a drop-in jobd worker daemon (`--config /etc/jobd.conf`; see docs/jobd.md).
    #[command(disable_help_flag = true)]
    Jobd {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run as a drop-in jobd-master (`--config /etc/jobd-master.conf`).
    #[command(disable_help_flag = true)]
    JobdMaster {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// jobd's command-line client (same options and commands as jobctl).
    #[command(disable_help_flag = true)]
    Jobctl {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run a 14/WMP worker that runs COMMAND per job (body on stdin, stdout is the result).
    WmpWorker(dropin::wmp::WorkerArgs),
    /// Run a 14/WMP device between workers and several managers.
    WmpDevice(dropin::wmp::DeviceArgs),
    /// Write the man pages and shell completions into OUT_DIR (for packagers).
    #[command(hide = true)]
    PackageFiles { out_dir: std::path::PathBuf },
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let invoked_as = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let rest = || argv[1..].to_vec();
    match invoked_as {
        "jobd" => std::process::exit(dropin::jobd::jobd(rest())),
        "jobd-master" => std::process::exit(dropin::jobd::master(rest())),
        "jobctl" => std::process::exit(dropin::jobd::jobctl(rest())),
        _ => {}
    }
    let settings = if invoked_as == "beanstalkd" {
        beanstalkd(&argv[1..])
    } else if invoked_as == "gearmand" {
        gearmand(&argv[1..])
    } else {
        match parse_cli(&argv).command {
            Cmd::Serve(args) => args.resolve().unwrap_or_else(|e| {
                eprintln!("jobyard: {e}");
                std::process::exit(2)
            }),
            Cmd::Beanstalkd { args } => beanstalkd(&args),
            Cmd::Gearmand { args } => gearmand(&args),
            Cmd::Ctl(args) => std::process::exit(jobyard_ctl::run(args)),
            Cmd::Jobd { args } => std::process::exit(dropin::jobd::jobd(args)),
            Cmd::JobdMaster { args } => std::process::exit(dropin::jobd::master(args)),
            Cmd::Jobctl { args } => std::process::exit(dropin::jobd::jobctl(args)),
            Cmd::WmpWorker(args) => std::process::exit(dropin::wmp::worker(args)),
            Cmd::WmpDevice(args) => std::process::exit(dropin::wmp::device(args)),
            Cmd::PackageFiles { out_dir } => {
                std::process::exit(package_files::write(Cli::command(), &out_dir))
            }
        }
    };
    malloc_tuning::for_server();
    std::process::exit(run::run(settings));
}

/// Parses the command line, with the config file's values as the defaults of `serve`.
fn parse_cli(argv: &[String]) -> Cli {
    let cmd = settings::with_file_defaults(Cli::command(), argv).unwrap_or_else(|e| {
        eprintln!("jobyard: {e}");
        std::process::exit(2)
    });
    let matches = cmd.get_matches_from(argv);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn beanstalkd(args: &[String]) -> settings::Settings {
    match dropin::beanstalkd::parse(args) {
        dropin::beanstalkd::Compat::Run(s) => *s,
        dropin::beanstalkd::Compat::Print(text) => {
            print!("{text}");
            std::process::exit(0)
        }
        dropin::beanstalkd::Compat::Fail(text, code) => {
            eprint!("{text}");
            if !text.ends_with('\n') {
                eprintln!();
            }
            std::process::exit(code)
        }
    }
}

fn gearmand(args: &[String]) -> settings::Settings {
    use dropin::gearmand::Gearmand;
    match dropin::gearmand::parse(args, std::env::var("GEARMAND_PORT").ok()) {
        Gearmand::Run(launch) => {
            if let Err(e) = dropin::gearmand::prepare(&launch) {
                eprintln!("gearmand (jobyard): {e}");
                std::process::exit(1)
            }
            launch.settings
        }
        Gearmand::Print(text) => {
            print!("{text}");
            std::process::exit(0)
        }
        Gearmand::Fail(text) => {
            eprint!("{text}");
            std::process::exit(1)
        }
    }
}
