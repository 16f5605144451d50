//! `selvedge-attack`: replays attacks on an HTTP server for a bounded time and reports how
//! the server dealt with them, as one `RESULT key=value ...` line (see `report.rs`); the
//! `probe` command is the legitimate client run alongside (`PROBE ...` line).
//!
//! ```text
//! selvedge-attack CLASS --addr 127.0.0.1:8080 [--duration 8] [--conns 1] [--path /index.html]
//!                       [--authority localhost] [--interval 5] [--in-flight 50] [--streams 10]
//! selvedge-attack probe --addr 127.0.0.1:8080 --proto h1|h2 [--duration 8] [--interval 0.2]
//!                       [--path /index.html] [--expect-len N] [--timeout 5]
//! selvedge-attack list
//! ```
//!
//! The HTTP/2 attacks speak cleartext HTTP/2 with prior knowledge, write every frame and
//! header block by hand (`wire.rs`) and read the server's frames on a thread of their own
//! (`conn.rs`). See bench/attacks/README.md for what each class does and what a server
//! should do about it.

mod attacks;
mod conn;
mod h1;
mod opts;
mod probe;
mod report;
mod wire;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

fn usage() -> ExitCode {
    eprintln!("usage: selvedge-attack CLASS|probe|list --addr HOST:PORT [options] (see the source's header)");
    ExitCode::from(2)
}

struct Args(Vec<String>);

impl Args {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().position(|a| a == name).and_then(|i| self.0.get(i + 1)).map(String::as_str)
    }
    fn secs(&self, name: &str, default: f64) -> Result<Duration, String> {
        match self.get(name) {
            None => Ok(Duration::from_secs_f64(default)),
            Some(v) => v.parse::<f64>().map(Duration::from_secs_f64).map_err(|_| format!("{name}: not a number: {v}")),
        }
    }
    fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{name}: not a number: {v}")),
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first().cloned() else { return usage() };
    if cmd == "list" {
        for (name, unit, what) in attacks::CLASSES {
            println!("{name:20} {unit:8} {what}");
        }
        return ExitCode::SUCCESS;
    }
    let args = Args(argv[1..].to_vec());
    match run(&cmd, &args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("selvedge-attack: {e}");
            usage()
        }
    }
}

fn run(cmd: &str, a: &Args) -> Result<String, String> {
    let addr: SocketAddr = a.get("--addr").ok_or("--addr is required")?.parse().map_err(|e| format!("--addr: {e}"))?;
    let path = a.get("--path").unwrap_or("/index.html").to_string();
    let authority = a.get("--authority").unwrap_or("localhost").to_string();
    let duration = a.secs("--duration", 8.0)?;
    if cmd == "probe" {
        let o = probe::ProbeOpts {
            addr,
            h2: match a.get("--proto").unwrap_or("h1") {
                "h1" => false,
                "h2" => true,
                p => return Err(format!("--proto: h1 or h2, not {p}")),
            },
            duration,
            interval: a.secs("--interval", 0.2)?,
            path,
            authority,
            expect_len: a.get("--expect-len").map(|v| v.parse()).transpose().map_err(|_| "--expect-len")?,
            timeout: a.secs("--timeout", 5.0)?,
        };
        return Ok(probe::run(&o));
    }
    let o = attacks::Opts {
        addr,
        duration,
        conns: a.num("--conns", 1)?,
        path,
        authority,
        interval: a.secs("--interval", 5.0)?,
        in_flight: a.num("--in-flight", 50)?,
        streams: a.num("--streams", 10)?,
    };
    let (unit, outcomes) = attacks::run(cmd, &o)?;
    for (i, oc) in outcomes.iter().enumerate().take(20) {
        eprintln!(
            "conn {i}: how={} cut_at={:?} close={} at {:?} units={} streams={} answered={} rst={:?} statuses={:?} first_response={:?}",
            oc.how(),
            oc.cut_at(),
            oc.close_kind(),
            oc.end_at,
            oc.units,
            oc.streams,
            oc.answered,
            oc.rst,
            oc.statuses,
            oc.first_response
        );
    }
    if outcomes.len() > 20 {
        eprintln!("... {} connections in all", outcomes.len());
    }
    Ok(report::summary(cmd, unit, &outcomes))
}
