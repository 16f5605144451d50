//! php-fpm (Debian's package), run by a test with a pool of its own on a Unix socket in a
//! temp dir.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{eventually, TempDir};

/// A php-fpm master with its pool, stopped when dropped.
pub struct Fpm {
    pub child: Child,
    pub sock: PathBuf,
}

impl Fpm {
    /// php-fpm with `children` static workers on `dir/fpm.sock`.
    pub fn start(dir: &TempDir, children: u32) -> Fpm {
        // Debian's is /usr/sbin/php-fpmX.Y (package php-fpm); others have php-fpm in PATH.
        let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/sbin")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("php-fpm")))
            .collect();
        candidates.sort();
        candidates.reverse();
        candidates.push(PathBuf::from("php-fpm"));
        let bin = candidates
            .into_iter()
            .find(|p| Command::new(p).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok())
            .expect("php-fpm is not installed (Debian: apt-get install php-fpm; .ci/run does)");
        let sock = dir.path().join("fpm.sock");
        let log = dir.path().join("fpm.log");
        let conf = dir.write(
            "fpm.conf",
            format!(
                "[global]\npid = {d}/fpm.pid\nerror_log = {log}\ndaemonize = no\n\
                 [test]\nlisten = {sock}\npm = static\npm.max_children = {children}\n\
                 catch_workers_output = yes\nclear_env = yes\n",
                d = dir.path().display(),
                log = log.display(),
                sock = sock.display(),
            ),
        );
        // Errors go to the web server over FCGI_STDERR (no error_log of PHP's own), and are
        // not displayed in the page.
        let ini = dir.write(
            "php.ini",
            "display_errors = Off\nlog_errors = On\noutput_buffering = 4096\nmax_execution_time = 30\n\
             post_max_size = 64M\nupload_max_filesize = 64M\nenable_post_data_reading = On\n",
        );
        // -R: the tests may run as root (a pool without `user` then needs it).
        let child = Command::new(bin)
            .args(["--nodaemonize", "-R", "-y"])
            .arg(&conf)
            .arg("-c")
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let fpm = Fpm { child, sock };
        eventually(10, "php-fpm's socket", || fpm.sock.exists());
        fpm
    }
}

impl Drop for Fpm {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-QUIT").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
