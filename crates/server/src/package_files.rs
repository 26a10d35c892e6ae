//! `jobyard package-files OUT_DIR` (hidden): the man pages and shell completions a package
//! installs, generated from the real command line so they cannot drift from it.

use std::io;
use std::path::Path;

use clap::Command;
use clap_complete::Shell;

/// The shells Debian ships completion directories for.
const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// Writes `OUT_DIR/man/*.1` (one page per visible subcommand) and `OUT_DIR/completions/`
/// (`jobyard.bash`, `_jobyard`, `jobyard.fish`); returns the exit code.
pub fn write(cmd: Command, out_dir: &Path) -> i32 {
    match try_write(cmd, out_dir) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("jobyard: cannot write into {}: {e}", out_dir.display());
            1
        }
    }
}

fn try_write(cmd: Command, out_dir: &Path) -> io::Result<()> {
    let man = out_dir.join("man");
    std::fs::create_dir_all(&man)?;
    let mut cmd = without_hidden_subcommands(cmd);
    clap_mangen::generate_to(cmd.clone(), &man)?;
    let completions = out_dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in SHELLS {
        clap_complete::generate_to(shell, &mut cmd, "jobyard", &completions)?;
    }
    Ok(())
}

/// The top-level command rebuilt without its hidden subcommands (this one among them):
/// clap_complete offers every subcommand, hidden or not, and clap cannot remove one.
fn without_hidden_subcommands(cmd: Command) -> Command {
    let visible: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut top = Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().cloned())
        .subcommand_required(cmd.is_subcommand_required_set())
        .subcommands(visible);
    if let Some(version) = cmd.get_version() {
        top = top.version(version.to_string());
    }
    if let Some(about) = cmd.get_about() {
        top = top.about(about.clone());
    }
    top
}
