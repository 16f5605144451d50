//! `selvedge`: the web server on the selvedge engine. `selvedge --help` lists the commands
//! (`serve [DIR]`, `run -c FILE`, `check -c FILE`, `completions`, `man`); `docs/config.md`
//! describes the configuration file. Running the server, its signals, reloads and upgrades
//! are `selvedge_server::supervise`.

use std::ffi::OsString;
use std::process::ExitCode;

use selvedge_server::cli::{self, Action};
use selvedge_server::config::Config;
use selvedge_server::routes::Site;
use selvedge_server::{service, supervise};

fn main() -> ExitCode {
    // The binary's path now, before an upgrade replaces the file (SIGUSR2 starts the file
    // then at this path).
    let exe = std::env::current_exe().ok();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (action, level) = cli::parse();
    match action {
        Action::Completions(shell) => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cli::command(), "selvedge", &mut out);
            print_all(&out)
        }
        Action::Man => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(cli::command()).render(&mut out) {
                Ok(()) => print_all(&out),
                Err(e) => {
                    eprintln!("selvedge: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Action::Check(file) => check(&file),
        Action::Run(cfg) => supervise::run(*cfg, level.as_deref(), exe, args),
        Action::Schema => print_all(selvedge_server::config::SCHEMA.as_bytes()),
        Action::Remote(call) => match call.run() {
            Ok(out) => print_all(out.as_bytes()),
            Err(e) => {
                eprintln!("selvedge: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// Writes `text` to standard output. A reader that stopped early (`| head`) is not an
/// error: what it wanted went out.
fn print_all(text: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("selvedge: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `selvedge check`: the file parses, every path and certificate is there, the user exists.
fn check(file: &std::path::Path) -> ExitCode {
    let result = Config::load(file).map_err(|e| e.to_string()).and_then(|cfg| {
        Site::build(&cfg).map_err(|e| e.to_string())?;
        service::identity(cfg.user.as_deref(), cfg.group.as_deref()).map(|_| ())
    });
    match result {
        Ok(()) => {
            eprintln!("selvedge: {} is valid", file.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("selvedge: {e}");
            ExitCode::from(2)
        }
    }
}
