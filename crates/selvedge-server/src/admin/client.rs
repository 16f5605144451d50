//! The command line's side of the admin API (`selvedge reload`, `stop`, `config ...`): one
//! HTTP/1.1 request to the running server's admin listener, found through its configuration
//! file; `reload` and `stop` fall back to a signal to the process in the file's pid file
//! when there is no admin listener or nothing answers on it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use selvedge::Listen;

use crate::config::Config;

/// How long the command waits for the server (a reload of a large site takes a moment).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer read.
const MAX_ANSWER: u64 = 16 << 20;

/// Where the running server is: its configuration file (its admin listener, token and pid
/// file), or an admin address and token given instead.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The configuration file.
    pub config: Option<PathBuf>,
    /// The admin listener (`HOST:PORT` or `unix:PATH`).
    pub admin: Option<String>,
    /// The bearer token.
    pub token: Option<String>,
}

/// What `selvedge config` asks of the running server.
#[derive(Debug, Clone)]
pub enum ConfigAsk {
    /// The value at a path (`""`: all of it).
    Get(String),
    /// A path and a JSON value to set there.
    Set(String, String),
    /// A path to remove.
    Delete(String),
    /// A file to load (`-`: standard input).
    Load(PathBuf),
}

/// A request for the running server, with the signal that does the same without the API.
#[derive(Debug)]
pub struct Call {
    admin: Option<Listen>,
    token: Option<String>,
    pid_file: Option<PathBuf>,
    method: &'static str,
    path: String,
    body: Option<(&'static str, Vec<u8>)>,
    signal: Option<(rustix::process::Signal, &'static str)>,
}

impl Call {
    fn to(r: Target, method: &'static str, path: String) -> Result<Call, String> {
        let cfg = match &r.config {
            Some(f) => Some(Config::load(f).map_err(|e| e.to_string())?),
            None => None,
        };
        let admin = match (&r.admin, &cfg) {
            (Some(a), _) => Some(parse_addr(a)?),
            (None, Some(c)) => c.admin.as_ref().map(|a| a.listen.clone()),
            (None, None) => None,
        };
        let token = r.token.or_else(|| cfg.as_ref().and_then(|c| c.admin.as_ref()?.token.clone()));
        let pid_file = cfg.as_ref().and_then(|c| c.pid_file.clone());
        if admin.is_none() && pid_file.is_none() {
            return Err("no admin listener to ask: give -c FILE (with [admin] listen) or --admin ADDR".into());
        }
        Ok(Call { admin, token, pid_file, method, path, body: None, signal: None })
    }

    /// `selvedge reload`.
    ///
    /// # Errors
    /// The configuration file cannot be read, or names no way to the server.
    pub fn reload(r: Target) -> Result<Call, String> {
        let mut c = Call::to(r, "POST", "/reload".into())?;
        c.signal = Some((rustix::process::Signal::HUP, "SIGHUP"));
        Ok(c)
    }

    /// `selvedge stop`.
    ///
    /// # Errors
    /// As [`Call::reload`].
    pub fn stop(r: Target) -> Result<Call, String> {
        let mut c = Call::to(r, "POST", "/stop".into())?;
        c.signal = Some((rustix::process::Signal::TERM, "SIGTERM"));
        Ok(c)
    }

    /// `selvedge config ...`.
    ///
    /// # Errors
    /// As [`Call::reload`]; a value that is not JSON; a file that cannot be read.
    pub fn config(ask: ConfigAsk, remote: Target) -> Result<Call, String> {
        let at = |p: &str| format!("/config/{}", encode_path(p.trim_start_matches('/')));
        let mut call = match ask {
            ConfigAsk::Get(path) => Call::to(remote, "GET", at(&path))?,
            ConfigAsk::Set(path, value) => {
                serde_json::from_str::<serde_json::Value>(&value).map_err(|e| {
                    format!("the value is not JSON ({e}); a string is written with its quotes: '\"1h\"'")
                })?;
                let mut call = Call::to(remote, "PUT", at(&path))?;
                call.body = Some(("application/json", value.into_bytes()));
                call
            }
            ConfigAsk::Delete(path) => Call::to(remote, "DELETE", at(&path))?,
            ConfigAsk::Load(file) => {
                let body = if file == Path::new("-") {
                    let mut b = Vec::new();
                    std::io::stdin().read_to_end(&mut b).map_err(|e| format!("standard input: {e}"))?;
                    b
                } else {
                    std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?
                };
                let json = file.extension().is_some_and(|e| e == "json");
                let mut call = Call::to(remote, "POST", "/load".into())?;
                call.body = Some((if json { "application/json" } else { "application/toml" }, body));
                call
            }
        };
        if call.admin.is_none() {
            call.pid_file = None;
            return Err("the configuration API needs the admin listener ([admin] listen, or --admin ADDR)".into());
        }
        Ok(call)
    }

    /// Makes the call: the answer's body, or why it failed (an answer other than 2xx
    /// included).
    ///
    /// # Errors
    /// Nothing answered (and no signal could be sent), or the answer was an error.
    pub fn run(&self) -> Result<String, String> {
        let Some(admin) = &self.admin else { return self.by_signal("no admin listener") };
        match self.request(admin) {
            Ok((status, body)) if (200..300).contains(&status) => Ok(body),
            // An admin listener without the API (`api` off): the signal does it.
            Ok((404, _)) if self.signal.is_some() => self.by_signal("the admin listener has no configuration API"),
            Ok((status, body)) => Err(format!("the server answered {status}: {}", body.trim_end())),
            Err(e) if self.signal.is_some() => self.by_signal(&format!("the admin listener: {e}")),
            Err(e) => Err(format!("the admin listener: {e}")),
        }
    }

    fn by_signal(&self, why: &str) -> Result<String, String> {
        let (Some((sig, name)), Some(pid_file)) = (self.signal, &self.pid_file) else {
            return Err(format!("{why}, and no pid file to signal"));
        };
        let text = crate::files::read_small(pid_file, 64)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| format!("{why}; pid file {}: {e}", pid_file.display()))?;
        let pid = text
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|&p| p > 1)
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| format!("{why}; pid file {}: not a process id", pid_file.display()))?;
        // The pid file may be stale (the server was killed) and its number another
        // process's now: signalled only if it runs this program, or one named selvedge.
        let n = pid.as_raw_nonzero();
        let exe = std::fs::read_link(format!("/proc/{n}/exe")).ok();
        let ours = exe.is_some() && exe == std::env::current_exe().ok();
        let named =
            exe.as_deref().and_then(Path::file_name).is_some_and(|f| f.to_string_lossy().starts_with("selvedge"));
        if !ours && !named {
            return Err(format!(
                "{why}; pid file {}: process {n} is not selvedge (a stale pid file?)",
                pid_file.display()
            ));
        }
        rustix::process::kill_process(pid, sig)
            .map_err(|e| format!("{why}; signalling {}: {e}", pid.as_raw_nonzero()))?;
        Ok(format!("{why}: sent {name} to process {}\n", pid.as_raw_nonzero()))
    }

    fn request(&self, admin: &Listen) -> std::io::Result<(u16, String)> {
        let mut head = format!("{} {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n", self.method, self.path);
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        let body: &[u8] = match &self.body {
            Some((ct, b)) => {
                head.push_str(&format!("Content-Type: {ct}\r\nContent-Length: {}\r\n", b.len()));
                b
            }
            None if self.method != "GET" => {
                head.push_str("Content-Length: 0\r\n");
                &[]
            }
            None => &[],
        };
        head.push_str("\r\n");
        let mut answer = Vec::new();
        match admin {
            Listen::Tcp(a) => {
                let mut s = std::net::TcpStream::connect_timeout(a, TIMEOUT)?;
                s.set_read_timeout(Some(TIMEOUT))?;
                s.write_all(head.as_bytes())?;
                s.write_all(body)?;
                s.take(MAX_ANSWER).read_to_end(&mut answer)?;
            }
            Listen::Unix(p) => {
                let mut s = std::os::unix::net::UnixStream::connect(p)?;
                s.set_read_timeout(Some(TIMEOUT))?;
                s.write_all(head.as_bytes())?;
                s.write_all(body)?;
                s.take(MAX_ANSWER).read_to_end(&mut answer)?;
            }
        }
        parse_answer(&answer).ok_or_else(|| std::io::Error::other("not an HTTP answer"))
    }
}

/// A configuration path for a request line: `/` kept between segments, every byte but
/// letters, digits and `-._~` percent-encoded (a key with `?`, `#`, a space or a line
/// break is a key, not the end of the path or of the request).
fn encode_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for &b in p.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `HOST:PORT` or `unix:PATH`.
fn parse_addr(s: &str) -> Result<Listen, String> {
    if let Some(p) = s.strip_prefix("unix:") {
        return Ok(Listen::Unix(PathBuf::from(p)));
    }
    s.parse().map(Listen::Tcp).map_err(|_| format!("--admin {s}: HOST:PORT (an IP address) or unix:PATH"))
}

/// The status and body of an HTTP/1.1 answer read to its end (the body by its
/// `Content-Length`; the client sent `Connection: close`).
fn parse_answer(a: &[u8]) -> Option<(u16, String)> {
    let end = a.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&a[..end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let mut body = &a[end + 4..];
    let len = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
    });
    if let Some(n) = len {
        body = &body[..n.min(body.len())];
    }
    Some((status, String::from_utf8_lossy(body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_addresses() {
        let a = b"HTTP/1.1 412 Precondition Failed\r\ncontent-length: 5\r\nx: y\r\n\r\nhello, and more";
        assert_eq!(parse_answer(a), Some((412, "hello".into())));
        assert_eq!(parse_answer(b"HTTP/1.1 200 OK\r\n\r\nall"), Some((200, "all".into())));
        assert_eq!(parse_answer(b"garbage"), None);
        assert!(matches!(parse_addr("unix:/run/a.sock"), Ok(Listen::Unix(_))));
        assert!(matches!(parse_addr("127.0.0.1:2019"), Ok(Listen::Tcp(_))));
        assert!(parse_addr("localhost:2019").is_err());
        assert_eq!(encode_path("vhost/0/headers/X?Y"), "vhost/0/headers/X%3FY");
        assert_eq!(encode_path("a b\r\nPOST /stop"), "a%20b%0D%0APOST%20/stop");
        assert_eq!(encode_path("100%"), "100%25");
    }
}
