//! The command line (clap): `serve [DIR]`, `run -c FILE`, `check -c FILE`,
//! `completions SHELL`, `man`, and the older `--config FILE [--check]`. Every `serve` flag
//! can also come from a `SELVEDGE_*` environment variable (shown in `--help`).

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::access_log::{LogConfig, LogTarget};
use crate::admin::client::{Call, ConfigAsk, Target};
use crate::config::{Config, TlsListen};

const ABOUT: &str = "selvedge: a fast HTTP/1.1, HTTP/2 and HTTP/3 web server (static files, TLS with automatic \
                     certificates (ACME), CGI, FastCGI, reverse proxy)";

const AFTER_HELP: &str = "\
Examples:
  selvedge serve                      serve the current directory on http://127.0.0.1:8080/
  selvedge serve ./public -b 0.0.0.0 -p 80 --user nobody
  selvedge run -c /etc/selvedge/selvedge.toml
  selvedge check -c /etc/selvedge/selvedge.toml
  selvedge reload -c /etc/selvedge/selvedge.toml
  selvedge config get vhost/0/route -c /etc/selvedge/selvedge.toml

Signals: HUP reloads the configuration and certificates and reopens the logs; USR1 reopens
the logs; USR2 starts the binary on disk on the same sockets, then this process drains and
exits; TERM, INT and QUIT finish in-flight requests and exit.";

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(name = "selvedge", version, about = ABOUT, after_help = AFTER_HELP, arg_required_else_help = true)]
pub struct Cli {
    /// Run with this configuration file (the same as `selvedge run -c FILE`)
    #[arg(short = 'c', long = "config", value_name = "FILE", env = "SELVEDGE_CONFIG")]
    pub config: Option<PathBuf>,
    /// With --config: check the file and exit (the same as `selvedge check -c FILE`)
    #[arg(short = 't', long = "check", requires = "config")]
    pub check: bool,
    /// Diagnostics level: error, warn, info, debug, trace, or a filter such as
    /// "selvedge=debug,warn" (overrides RUST_LOG and the level in the file)
    #[arg(long, global = true, value_name = "LEVEL", env = "SELVEDGE_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// What to do
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Serve a directory, no configuration file needed
    Serve(Box<ServeArgs>),
    /// Run with a configuration file
    Run {
        /// The configuration file (TOML)
        #[arg(short = 'c', long = "config", value_name = "FILE", env = "SELVEDGE_CONFIG")]
        config: PathBuf,
    },
    /// Check a configuration file and exit: 0 if it is valid, 2 if not
    Check {
        /// The configuration file (TOML)
        #[arg(short = 'c', long = "config", value_name = "FILE", env = "SELVEDGE_CONFIG")]
        config: PathBuf,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff; `selvedge man | man -l -`)
    Man,
    /// Reload the running server's configuration file: through its admin listener, else
    /// SIGHUP to the process in its pid file
    Reload(Remote),
    /// Stop the running server gracefully (in-flight requests finish): through its admin
    /// listener, else SIGTERM to the process in its pid file
    Stop(Remote),
    /// Read or change the running server's configuration through its admin listener
    /// (docs/admin-api.md)
    #[command(subcommand)]
    Config(ConfigCmd),
}

/// How to reach a running server: its configuration file names its admin listener (and
/// token) and its pid file.
#[derive(Debug, Clone, clap::Args)]
pub struct Remote {
    /// The running server's configuration file
    #[arg(short = 'c', long = "config", value_name = "FILE", env = "SELVEDGE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The admin listener (HOST:PORT or unix:PATH), instead of the one the file names
    #[arg(long, value_name = "ADDR", env = "SELVEDGE_ADMIN")]
    pub admin: Option<String>,
    /// The admin API's bearer token, instead of the one the file names
    #[arg(long, value_name = "TOKEN", env = "SELVEDGE_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl From<Remote> for Target {
    fn from(r: Remote) -> Target {
        Target { config: r.config, admin: r.admin, token: r.token }
    }
}

/// `selvedge config`'s commands.
#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Print the configuration (or the part at PATH, such as vhost/0/route/1) as JSON
    Get {
        /// The path
        path: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Set the value at PATH to JSON (created or replaced)
    Set {
        /// The path
        path: String,
        /// The value, as JSON ('"1h"', '8', '{"status": 204}')
        value: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Remove the value at PATH
    Delete {
        /// The path
        path: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Print the JSON Schema of the configuration file (for editors and CI)
    Schema,
    /// Load a whole configuration (TOML, or JSON if FILE ends in .json)
    Load {
        /// The file to load ("-": standard input, TOML)
        file: PathBuf,
        #[command(flatten)]
        remote: Remote,
    },
}

/// `selvedge serve`'s flags.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Directory to serve [default: the current directory]
    #[arg(value_name = "DIR", env = "SELVEDGE_ROOT")]
    pub dir: Option<PathBuf>,
    /// Address to listen on
    #[arg(
        short = 'b',
        long,
        visible_alias = "bind",
        value_name = "IP",
        env = "SELVEDGE_HOST",
        default_value = "127.0.0.1"
    )]
    pub host: IpAddr,
    /// Port to listen on
    #[arg(short, long, value_name = "PORT", env = "SELVEDGE_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Listen on these addresses instead of --host/--port: "IP:PORT" or "unix:PATH",
    /// comma-separated or repeated
    #[arg(short, long, value_name = "ADDR", env = "SELVEDGE_LISTEN", value_delimiter = ',')]
    pub listen: Vec<String>,
    /// Worker threads [default: one per core]
    #[arg(short, long, value_name = "N", env = "SELVEDGE_WORKERS")]
    pub workers: Option<NonZeroUsize>,
    /// Access log: a file, "stdout" or "off"
    #[arg(
        short = 'a',
        long = "access-log",
        visible_alias = "log",
        value_name = "FILE",
        env = "SELVEDGE_ACCESS_LOG",
        default_value = "off"
    )]
    pub access_log: String,
    /// Write the process id to this file (removed at exit)
    #[arg(long, value_name = "FILE", env = "SELVEDGE_PID_FILE")]
    pub pid_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key
    #[arg(long, value_name = "FILE", env = "SELVEDGE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM); needs --tls-cert
    #[arg(long, value_name = "FILE", env = "SELVEDGE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Also serve HTTP/3 over QUIC on the HTTPS port (UDP); needs --tls-cert
    #[arg(long, env = "SELVEDGE_HTTP3", requires = "tls_cert", value_parser = BoolishValueParser::new())]
    pub http3: bool,
    /// Cache-Control max-age for the files served: "1h", "30s", "1d"...
    #[arg(long, value_name = "DURATION", env = "SELVEDGE_MAX_AGE", value_parser = crate::units::parse_duration)]
    pub max_age: Option<std::time::Duration>,
    /// After binding, run as this user (started as root)
    #[arg(short, long, value_name = "USER", env = "SELVEDGE_USER")]
    pub user: Option<String>,
    /// After binding, run as this group [default: the user's primary group]
    #[arg(short, long, value_name = "GROUP", env = "SELVEDGE_GROUP")]
    pub group: Option<String>,
    /// Answer 404 for directories without an index file instead of listing them
    #[arg(long, env = "SELVEDGE_NO_LISTING", value_parser = BoolishValueParser::new())]
    pub no_listing: bool,
    /// A single-page app: serve this file (under DIR, "/index.html") with 200 for page
    /// requests of paths with no file
    #[arg(long, visible_alias = "spa", value_name = "FILE", env = "SELVEDGE_FALLBACK")]
    pub fallback: Option<String>,
    /// Allow cross-origin requests (CORS) from these origins ("scheme://host:port", or
    /// "*" for any), comma-separated or repeated
    #[arg(long, value_name = "ORIGIN", env = "SELVEDGE_CORS", value_delimiter = ',')]
    pub cors: Vec<String>,
    /// Require HTTP Basic authentication against this htpasswd file (bcrypt or {SHA} entries)
    #[arg(long, value_name = "HTPASSWD", env = "SELVEDGE_AUTH")]
    pub auth: Option<PathBuf>,
    /// Add a field to every response: "Name: value" ("-Name" removes one), repeated
    #[arg(
        long = "header",
        value_name = "NAME: VALUE",
        env = "SELVEDGE_HEADERS",
        value_delimiter = '\n',
        allow_hyphen_values = true
    )]
    pub headers: Vec<String>,
    /// Do not compress responses on the fly (gzip/brotli for compressible types is on)
    #[arg(long, env = "SELVEDGE_NO_COMPRESS", value_parser = BoolishValueParser::new())]
    pub no_compress: bool,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Action {
    /// Serve with this configuration (from `serve`, or a file).
    Run(Box<Config>),
    /// Check the file.
    Check(PathBuf),
    /// Print completions.
    Completions(clap_complete::Shell),
    /// Print the manual page.
    Man,
    /// Talk to a running server.
    Remote(Box<Call>),
    /// Print the configuration's JSON Schema.
    Schema,
}

/// The clap command (for completions and the manual page).
pub fn command() -> clap::Command {
    Cli::command()
}

/// The boolean variables (`serve`'s switches): `1`/`0`, `true`/`false`, `yes`/`no`,
/// `on`/`off` (any case), or empty for false.
const BOOL_VARS: [&str; 3] = ["SELVEDGE_NO_LISTING", "SELVEDGE_NO_COMPRESS", "SELVEDGE_HTTP3"];

/// A boolean variable's value that is none of those: the error, naming the variable.
fn check_bool_var(name: &str, value: Option<&std::ffi::OsStr>) -> Result<(), String> {
    let Some(v) = value else { return Ok(()) };
    let ok = v.to_str().is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "1" | "0" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "t" | "f"
        )
    });
    if ok {
        return Ok(());
    }
    Err(format!("{name}={}: a boolean (1 or 0, true or false, yes or no, on or off)", v.to_string_lossy()))
}

/// Parses the process's arguments. `--help` and `--version` print to stdout and exit 0; a
/// usage error prints clap's whole message (what is missing or wrong, a similar name if
/// there is one, the usage) to stderr and exits 2.
pub fn parse() -> (Action, Option<String>) {
    for name in BOOL_VARS {
        if let Err(e) = check_bool_var(name, std::env::var_os(name).as_deref()) {
            eprintln!("selvedge: {e}");
            std::process::exit(2);
        }
    }
    let matches = match command().try_get_matches() {
        Ok(m) => m,
        Err(e) => exit_with(e),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| exit_with(e));
    let level = cli.log_level.clone();
    match action(cli, &matches) {
        Ok(a) => (a, level),
        Err(msg) => {
            eprintln!("selvedge: {msg}");
            std::process::exit(2);
        }
    }
}

/// Help and version go to stdout (exit 0), usage errors to stderr (exit 2), as clap writes
/// them.
fn exit_with(e: clap::Error) -> ! {
    e.exit()
}

fn action(cli: Cli, matches: &clap::ArgMatches) -> Result<Action, String> {
    match cli.command {
        None => match cli.config {
            Some(f) if cli.check => Ok(Action::Check(f)),
            Some(f) => Config::load(&f).map(|c| Action::Run(Box::new(c))).map_err(|e| e.to_string()),
            None => Err("nothing to do (see 'selvedge --help')".into()),
        },
        Some(Cmd::Run { config }) => Config::load(&config).map(|c| Action::Run(Box::new(c))).map_err(|e| e.to_string()),
        Some(Cmd::Check { config }) => Ok(Action::Check(config)),
        Some(Cmd::Completions { shell }) => Ok(Action::Completions(shell)),
        Some(Cmd::Man) => Ok(Action::Man),
        Some(Cmd::Reload(r)) => Call::reload(r.into()).map(|c| Action::Remote(Box::new(c))),
        Some(Cmd::Stop(r)) => Call::stop(r.into()).map(|c| Action::Remote(Box::new(c))),
        Some(Cmd::Config(c)) => {
            let (ask, remote) = match c {
                ConfigCmd::Schema => return Ok(Action::Schema),
                ConfigCmd::Get { path, remote } => (ConfigAsk::Get(path.unwrap_or_default()), remote),
                ConfigCmd::Set { path, value, remote } => (ConfigAsk::Set(path, value), remote),
                ConfigCmd::Delete { path, remote } => (ConfigAsk::Delete(path), remote),
                ConfigCmd::Load { file, remote } => (ConfigAsk::Load(file), remote),
            };
            Call::config(ask, remote.into()).map(|c| Action::Remote(Box::new(c)))
        }
        Some(Cmd::Serve(args)) => {
            let sub = matches.subcommand_matches("serve");
            let defaulted =
                |id: &str| sub.and_then(|m| m.value_source(id)) == Some(clap::parser::ValueSource::DefaultValue);
            serve_config(*args, defaulted("host") && defaulted("port")).map(|c| Action::Run(Box::new(c)))
        }
    }
}

/// The configuration `selvedge serve` runs. `default_addr`: neither --host nor --port was
/// given (then `SELVEDGE_ADDR=IP:PORT`, the older variable, is taken if set).
fn serve_config(mut a: ServeArgs, default_addr: bool) -> Result<Config, String> {
    let flags = RouteFlags {
        no_listing: a.no_listing,
        fallback: a.fallback.take(),
        cors: std::mem::take(&mut a.cors),
        auth: a.auth.take(),
        headers: std::mem::take(&mut a.headers),
        no_compress: a.no_compress,
    };
    let root = match a.dir {
        Some(d) => d,
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    if !root.is_dir() {
        return Err(format!("{} is not a directory", root.display()));
    }
    let mut addr = SocketAddr::new(a.host, a.port);
    if default_addr {
        if let Some(env) = std::env::var("SELVEDGE_ADDR").ok().filter(|v| !v.is_empty()) {
            addr = env.parse().map_err(|_| format!("SELVEDGE_ADDR {env:?}: expected IP:PORT"))?;
        }
    }
    let workers = a.workers.map(NonZeroUsize::get);
    let mut cfg = Config::simple(root, addr, workers);
    if let Some(n) = workers {
        cfg.settings.workers = selvedge::Workers::PerCore(n);
    }
    if !a.listen.is_empty() {
        cfg.listen.clear();
        for l in &a.listen {
            cfg.listen.push(parse_listen(l)?);
        }
    }
    cfg.log = LogConfig {
        target: match a.access_log.as_str() {
            "off" | "" => LogTarget::Off,
            "stdout" | "-" => LogTarget::Stdout,
            p => LogTarget::File(PathBuf::from(p)),
        },
        ..LogConfig::default()
    };
    route_flags(&mut cfg, &flags)?;
    cfg.pid_file = a.pid_file;
    cfg.user = a.user;
    cfg.group = a.group;
    if let Some(age) = a.max_age {
        for r in cfg.vhosts.iter_mut().flat_map(|v| v.routes.iter_mut()) {
            if let crate::config::RouteKind::Static { opts, .. } = &mut r.kind {
                opts.max_age = Some(age.as_secs());
            }
        }
    }
    if let (Some(cert), Some(key)) = (a.tls_cert, a.tls_key) {
        selvedge::tls::CertKey::from_pem_files(vec![], &cert, &key).map_err(|e| format!("tls: {e}"))?;
        for addr in std::mem::take(&mut cfg.listen) {
            let quic = a.http3 && matches!(addr, selvedge::Listen::Tcp(_));
            cfg.tls.push(TlsListen {
                addr,
                cert: Some(cert.clone()),
                key: Some(key.clone()),
                strict_sni: false,
                quic,
                on_demand: None,
            });
        }
    }
    Ok(cfg)
}

/// The route settings `serve` takes as flags.
struct RouteFlags {
    no_listing: bool,
    fallback: Option<String>,
    cors: Vec<String>,
    auth: Option<PathBuf>,
    headers: Vec<String>,
    no_compress: bool,
}

/// Applies the route flags (listing, fallback, CORS, auth, headers, compression) to the
/// route `serve` makes.
fn route_flags(cfg: &mut Config, a: &RouteFlags) -> Result<(), String> {
    use crate::policy::{auth::AuthConfig, cors::CorsConfig, HeaderRules, Policy};
    for r in cfg.vhosts.iter_mut().flat_map(|v| v.routes.iter_mut()) {
        if !a.cors.is_empty() {
            r.policy.cors = Some(CorsConfig::for_origins(&a.cors).map_err(|e| format!("--{e}"))?);
        }
        if let Some(f) = &a.auth {
            let realm = "selvedge".to_string();
            r.policy.auth = Some(AuthConfig::from_file(f, realm).map_err(|e| format!("--{e}"))?);
        }
        let mut table = std::collections::BTreeMap::new();
        for h in &a.headers {
            match h.strip_prefix('-') {
                Some(name) => table.insert(format!("-{}", name.trim()), String::new()),
                None => {
                    let (n, v) = h.split_once(':').ok_or_else(|| format!("--header {h:?}: write \"Name: value\""))?;
                    table.insert(n.trim().to_string(), v.trim().to_string())
                }
            };
        }
        r.policy.headers = HeaderRules::from_raw(&table).map_err(|e| format!("--header: {e}"))?;
        r.compress = !a.no_compress;
        let fields = Policy::fixed_fields(&r.policy);
        if let crate::config::RouteKind::Static { opts, .. } = &mut r.kind {
            opts.listing = !a.no_listing;
            opts.compress = !a.no_compress;
            opts.fields = fields;
            if let Some(f) = &a.fallback {
                let f = if f.starts_with('/') { f.clone() } else { format!("/{f}") };
                let inside = f.trim_start_matches('/').split('/').all(|s| !s.is_empty() && s != "." && s != "..");
                if !inside {
                    return Err(format!("--fallback {f:?}: a file under the directory (\"/index.html\")"));
                }
                opts.fallback = Some(f);
            }
        }
    }
    Ok(())
}

fn parse_listen(text: &str) -> Result<selvedge::Listen, String> {
    if let Some(p) = text.strip_prefix("unix:").filter(|p| !p.is_empty()) {
        return Ok(selvedge::Listen::Unix(PathBuf::from(p)));
    }
    text.parse()
        .map(selvedge::Listen::Tcp)
        .map_err(|_| format!("--listen {text:?}: expected IP:PORT (\"[::]:8080\") or unix:PATH"))
}
