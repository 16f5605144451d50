//! One run of a script: the process, its three pipes, and its lifetime.
//!
//! - The script runs in its own process group, with an empty environment but the
//!   meta-variables, in its directory, with `kill_on_drop`.
//! - The request body goes to stdin while stdout is read, in the same task (one `select!`
//!   over the two, both sides cancel safe), so neither side can block the other: a script
//!   that answers before reading all its input, or reads all of it first, both work with
//!   bodies larger than the pipes.
//! - stderr is forwarded line by line (at most [`MAX_LOG_LINE`] bytes each) to the
//!   server's stderr, prefixed with the script's name, by a task of its own.
//! - A script must make progress (output read, or input consumed) at least every
//!   `timeout`; else it is killed.
//! - Dropping a [`Run`] (the client went away, a limit was hit, the server is stopping)
//!   kills the whole process group with SIGKILL and reaps the script in the background.
//!   [`Run::finish`] is the normal end: the script gets `timeout` to exit on its own after
//!   its output ended, then is killed; it is reaped either way, and a failure exit status
//!   is logged. So no script outlives its request by more than `timeout`, and none is left
//!   a zombie.

use std::ffi::OsString;
use std::io;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use selvedge::{Body, BodyWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::upstream::gateway::head::{self, Head, HeadError};

/// Longest stderr line logged; longer ones are split.
pub const MAX_LOG_LINE: usize = 2048;

/// Bytes asked of stdout per read.
const READ_SIZE: usize = 16 << 10;

/// Why a run failed.
#[derive(Debug)]
pub enum Fail {
    /// No progress within the time limit.
    TimedOut,
    /// stdout ended before the head (or before the declared length).
    Eof,
    /// The head is not valid.
    Head(HeadError),
    /// Reading the request body failed (the engine answers for it).
    Body,
    /// Reading stdout failed.
    Io(io::Error),
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::TimedOut => f.write_str("no progress within the time limit: killed"),
            Fail::Eof => f.write_str("output ended early"),
            Fail::Head(e) => write!(f, "{e}"),
            Fail::Body => f.write_str("reading the request body failed: killed"),
            Fail::Io(e) => write!(f, "reading its output: {e}"),
        }
    }
}

/// What to run.
#[derive(Debug)]
pub struct Spawn<'a> {
    /// The program (the script, or its interpreter).
    pub program: &'a std::ffi::OsStr,
    /// Arguments (the script, after an interpreter).
    pub args: Vec<&'a std::ffi::OsStr>,
    /// The environment.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory.
    pub dir: &'a std::path::Path,
    /// Name used in log lines.
    pub name: Arc<str>,
    /// The progress time limit.
    pub timeout: Duration,
    /// The route's process slot, held until the script is reaped.
    pub permit: OwnedSemaphorePermit,
}

/// A running script.
#[derive(Debug)]
pub struct Run {
    proc: Proc,
    stdout: ChildStdout,
    feed: Feed,
    /// Output read but not consumed yet.
    buf: BytesMut,
    timeout: Duration,
    deadline: Instant,
}

impl Run {
    /// Starts the script; `body` is fed to its stdin from now on.
    ///
    /// # Errors
    /// The process could not be started.
    pub fn spawn(s: Spawn<'_>, body: Body) -> io::Result<Run> {
        let mut cmd = Command::new(s.program);
        cmd.args(&s.args)
            .env_clear()
            .envs(s.env)
            .current_dir(s.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(io::Error::other("missing pipe"));
        };
        tokio::spawn(forward_stderr(stderr, s.name.clone()));
        let empty = body.content_length() == Some(0);
        let feed = Feed { body: (!empty).then_some(body), stdin: (!empty).then_some(stdin), pending: Bytes::new() };
        Ok(Run {
            proc: Proc {
                child: Some(child),
                name: s.name,
                permit: Some(s.permit),
                _running: crate::metrics::CgiRunning::start(),
            },
            stdout,
            feed,
            buf: BytesMut::new(),
            timeout: s.timeout,
            deadline: Instant::now() + s.timeout,
        })
    }

    /// The script's name, for log lines.
    pub fn name(&self) -> &str {
        &self.proc.name
    }

    /// Reads until the head is complete (at most `max` bytes of it).
    ///
    /// # Errors
    /// See [`Fail`].
    pub async fn head(&mut self, max: usize) -> Result<Head, Fail> {
        loop {
            match head::parse(&self.buf, max) {
                Ok(Some((h, n))) => {
                    self.buf.advance(n);
                    return Ok(h);
                }
                Ok(None) => {}
                Err(e) => return Err(Fail::Head(e)),
            }
            let want = (max + 1).saturating_sub(self.buf.len()).min(READ_SIZE);
            if self.read(want).await? == 0 {
                return Err(Fail::Eof);
            }
        }
    }

    /// Reads exactly `n` bytes of body (anything after them is ignored).
    ///
    /// # Errors
    /// See [`Fail`]; [`Fail::Eof`] if stdout ends before `n` bytes.
    pub async fn body(&mut self, n: usize) -> Result<Bytes, Fail> {
        while self.buf.len() < n {
            let want = (n - self.buf.len()).min(READ_SIZE);
            if self.read(want).await? == 0 {
                return Err(Fail::Eof);
            }
        }
        Ok(self.buf.split_to(n).freeze())
    }

    /// Streams the rest of stdout to `w` (at most `limit` bytes; exactly that many or an
    /// error when given), then [`Run::finish`]es.
    ///
    /// # Errors
    /// The client went away, or the script failed mid-body: the response is cut short
    /// (the engine closes the connection or resets the stream) and the script killed.
    pub async fn stream(mut self, mut w: BodyWriter, limit: Option<u64>) -> io::Result<()> {
        let mut sent = 0u64;
        loop {
            if !self.buf.is_empty() {
                let take = limit.map_or(self.buf.len(), |l| self.buf.len().min((l - sent) as usize));
                if let Err(e) = write_feeding(&mut w, &self.buf[..take], &mut self.feed).await {
                    tracing::warn!("cgi {}: client gone ({e}): killed", self.name());
                    return Err(e);
                }
                sent += take as u64;
                self.buf.clear();
                self.deadline = Instant::now() + self.timeout;
                if limit == Some(sent) {
                    break;
                }
            }
            let want = limit.map_or(READ_SIZE, |l| ((l - sent) as usize).min(READ_SIZE));
            match self.read(want).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("cgi {}: {e}; response cut short", self.name());
                    return Err(io::Error::new(io::ErrorKind::TimedOut, e.to_string()));
                }
            }
        }
        if limit.is_some_and(|l| sent < l) {
            tracing::warn!("cgi {}: output shorter than its Content-Length; response cut short", self.name());
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.finish();
        Ok(())
    }

    /// The normal end: stops feeding stdin and reading stdout; the script has `timeout` to
    /// exit before its group is killed; it is reaped in the background.
    pub fn finish(self) {
        // Without a runtime (never while serving), dropping `proc` kills the group.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(reap(self.proc, self.timeout));
        }
    }

    /// One read of at most `want` bytes from stdout into `buf`, feeding stdin meanwhile.
    /// `Ok(0)`: end of output.
    async fn read(&mut self, want: usize) -> Result<usize, Fail> {
        self.buf.reserve(want.max(1));
        loop {
            let spare = (self.buf.capacity() - self.buf.len()).min(want.max(1));
            let mut dst = (&mut self.buf).limit(spare);
            tokio::select! {
                biased;
                r = self.stdout.read_buf(&mut dst) => {
                    let n = r.map_err(Fail::Io)?;
                    if n > 0 {
                        self.deadline = Instant::now() + self.timeout;
                    }
                    return Ok(n);
                }
                step = self.feed.step(), if self.feed.active() => match step {
                    Step::Progress => self.deadline = Instant::now() + self.timeout,
                    Step::Done => {}
                    Step::Failed => return Err(Fail::Body),
                },
                () = tokio::time::sleep_until(self.deadline) => return Err(Fail::TimedOut),
            }
        }
    }
}

/// Writes `data` to the client while still feeding the script's stdin (a client that only
/// reads once its upload is done must not deadlock with a script that only reads once its
/// output is taken).
async fn write_feeding(w: &mut BodyWriter, data: &[u8], feed: &mut Feed) -> io::Result<()> {
    let write = w.write(data);
    tokio::pin!(write);
    loop {
        tokio::select! {
            biased;
            r = &mut write => return r,
            step = feed.step(), if feed.active() => {
                if let Step::Failed = step {
                    return Err(io::Error::other("request body failed"));
                }
            }
        }
    }
}

/// The request body on its way to stdin.
#[derive(Debug)]
struct Feed {
    body: Option<Body>,
    stdin: Option<ChildStdin>,
    /// A piece of body read but not yet all written.
    pending: Bytes,
}

enum Step {
    Progress,
    Done,
    Failed,
}

impl Feed {
    fn active(&self) -> bool {
        self.stdin.is_some()
    }

    /// Moves the body along by one read or one write. Cancel safe: `Body::chunk` and one
    /// pipe `write` are.
    async fn step(&mut self) -> Step {
        let Some(stdin) = self.stdin.as_mut() else { return Step::Done };
        if self.pending.is_empty() {
            let Some(body) = self.body.as_mut() else {
                self.close();
                return Step::Done;
            };
            return match body.chunk().await {
                None => {
                    self.close();
                    Step::Done
                }
                Some(Ok(b)) => {
                    self.pending = b;
                    Step::Progress
                }
                Some(Err(_)) => {
                    self.close();
                    Step::Failed
                }
            };
        }
        match stdin.write(&self.pending).await {
            Ok(n) if n > 0 => {
                self.pending.advance(n);
                Step::Progress
            }
            // The script closed its stdin (or exited): the rest of the body is not wanted,
            // and the engine drains or closes.
            _ => {
                self.close();
                Step::Done
            }
        }
    }

    /// Closes stdin (the script sees end of input) and releases the body.
    fn close(&mut self) {
        self.stdin = None;
        self.body = None;
        self.pending = Bytes::new();
    }
}

/// The child process; dropping it before it was reaped kills the process group.
#[derive(Debug)]
struct Proc {
    /// `None` once reaped.
    child: Option<Child>,
    name: Arc<str>,
    permit: Option<OwnedSemaphorePermit>,
    /// Counts the script in `selvedge_cgi_processes_running` until dropped.
    _running: crate::metrics::CgiRunning,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // `id()` is `Some` until the child is reaped, and an unreaped child's pid (its
        // group's id) cannot be reused: the group killed is the script's.
        kill_group(&child);
        let _ = child.start_kill();
        let permit = self.permit.take();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = child.wait().await;
                    drop(permit);
                });
            }
            // No runtime (shutting down): tokio's orphan queue reaps it.
            Err(_) => drop(child),
        }
    }
}

/// SIGKILL to the child's process group (the script and whatever it started).
fn kill_group(child: &Child) {
    if let Some(pid) = child.id().and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Waits for a finished script's exit (killing its group after `grace`), logging failures.
/// If this task is dropped first (the server stops), dropping `proc` kills the group.
async fn reap(mut proc: Proc, grace: Duration) {
    let Some(child) = proc.child.as_mut() else { return };
    let name = &proc.name;
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(s) => s,
        Err(_) => {
            tracing::warn!("cgi {name}: still running {grace:?} after its output ended: killed");
            kill_group(child);
            child.wait().await
        }
    };
    proc.child = None;
    match status {
        Ok(s) if !s.success() => tracing::warn!("cgi {name}: {s}"),
        Ok(_) => {}
        Err(e) => tracing::warn!("cgi {name}: waiting for exit: {e}"),
    }
}

/// Logs the script's stderr, line by line.
async fn forward_stderr(mut err: ChildStderr, name: Arc<str>) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::with_capacity(256);
    let emit = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        tracing::warn!("cgi {name}: {}", text.trim_end_matches('\r'));
    };
    loop {
        let n = match err.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&line);
                line.clear();
            } else {
                if line.len() == MAX_LOG_LINE {
                    emit(&line);
                    line.clear();
                }
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}
