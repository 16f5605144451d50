//! DNS-01 (RFC 8555 §8.4): the TXT records at `_acme-challenge.NAME`, written through RFC 2136
//! dynamic updates signed with TSIG (RFC 8945) or by a command, checked on the zone's
//! authoritative servers before the CA is told, and removed when the order is over.
//!
//! A wildcard name and its base share one record name (`*.example.com` and `example.com`
//! are both proven at `_acme-challenge.example.com`), so records are added and removed by
//! value, never by replacing the name's whole set.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_client::client::{Client, ClientHandle};
use hickory_proto::dnssec::rdata::tsig::TsigAlgorithm;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::op::{MessageFinalizer, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{DNSClass, Name, RData, RecordSet, RecordType};
use hickory_proto::runtime::TokioRuntimeProvider;
use hickory_proto::tcp::TcpClientStream;
use hickory_proto::udp::UdpClientStream;

use super::config::{split_server, DnsConfig, DnsProvider, TsigKey};
use super::log;

/// How long one DNS exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the checked servers are asked again while a record is missing.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// The most of a command's error output kept for the log.
const MAX_COMMAND_OUTPUT: usize = 2048;

/// One TXT record of an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxtRecord {
    /// `_acme-challenge.NAME`, without the trailing dot.
    pub name: String,
    /// The key authorization's digest (base64url).
    pub value: String,
}

impl TxtRecord {
    /// The record proving `identifier` (a wildcard's is its base name's).
    pub fn new(identifier: &str, value: String) -> TxtRecord {
        let base = identifier.strip_prefix("*.").unwrap_or(identifier).trim_end_matches('.');
        TxtRecord { name: format!("_acme-challenge.{}", base.to_ascii_lowercase()), value }
    }
}

/// Writes `records`.
///
/// # Errors
/// The server refused an update or could not be reached, or the command failed; the
/// records written before it are removed again.
pub async fn present(cfg: &DnsConfig, records: &[TxtRecord]) -> Result<(), String> {
    for (i, r) in records.iter().enumerate() {
        if let Err(e) = write(cfg, r, true).await {
            // The failed one too: a command may have written it before it failed.
            let _ = remove(cfg, &records[..=i]).await;
            return Err(e);
        }
    }
    Ok(())
}

/// Removes `records`, all of them even if one fails.
///
/// # Errors
/// The first failure.
pub async fn remove(cfg: &DnsConfig, records: &[TxtRecord]) -> Result<(), String> {
    let mut first = Ok(());
    for r in records {
        if let Err(e) = write(cfg, r, false).await {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

async fn write(cfg: &DnsConfig, r: &TxtRecord, add: bool) -> Result<(), String> {
    match &cfg.provider {
        DnsProvider::Rfc2136 { server, zone, key } => {
            let mut client = connect_tcp(server, Some(key)).await?;
            let zone = match zone {
                Some(z) => name(z)?,
                None => find_zone(&mut client, &r.name).await.map_err(|e| format!("{server}: {e}"))?,
            };
            let mut set = RecordSet::with_ttl(name(&r.name)?, RecordType::TXT, cfg.ttl);
            set.add_rdata(RData::TXT(TXT::new(vec![r.value.clone()])));
            let sent = if add {
                client.append(set, zone.clone(), false).await
            } else {
                client.delete_by_rdata(set, zone.clone()).await
            };
            let what = if add { "adding" } else { "removing" };
            // A server that does not know the key, or finds its signature wrong, answers
            // unsigned or with an empty MAC, which the client cannot verify: a failed
            // exchange rather than an answer code.
            let resp = sent.map_err(|e| {
                format!(
                    "{server}: {what} TXT {}: no verifiable answer ({e}); is TSIG key {:?} ({}) the one the server has?",
                    r.name, key.name, key.algorithm
                )
            })?;
            match resp.response_code() {
                ResponseCode::NoError => Ok(()),
                code => Err(format!(
                    "{server} refused {what} TXT {} in zone {}: {code} (does key {:?} have an update-policy for it?)",
                    r.name,
                    zone.to_ascii().trim_end_matches('.'),
                    key.name
                )),
            }
        }
        DnsProvider::Exec { command } => {
            let action = if add { "present" } else { "cleanup" };
            run(command, action, &format!("{}.", r.name), &r.value, cfg.propagation_timeout).await
        }
    }
}

/// Runs `command action fqdn value` in a process group of its own, within `limit`: the
/// command's exit is what is waited for (a background process it leaves holding stderr
/// does not count), its first [`MAX_COMMAND_OUTPUT`] bytes of stderr are kept for the log
/// and the rest is read and dropped, and when it exits or its time is up the whole group
/// is killed (nothing it started outlives it).
async fn run(command: &[String], action: &str, fqdn: &str, value: &str, limit: Duration) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .args([action, fqdn, value])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", command[0]))?;
    let group = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32));
    let mut stderr = child.stderr.take();
    let mut kept = Vec::new();
    let read = async {
        let Some(err) = stderr.as_mut() else { return };
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = err.read(&mut buf).await {
            let room = MAX_COMMAND_OUTPUT.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
    };
    let status = tokio::time::timeout(limit, async {
        tokio::pin!(read);
        tokio::select! {
            s = child.wait() => {
                // What the command wrote before it exited; a background child of its may
                // keep the pipe open, so only briefly.
                let _ = tokio::time::timeout(Duration::from_millis(100), &mut read).await;
                s
            }
            () = &mut read => child.wait().await,
        }
    })
    .await;
    // The command's processes end with it (or with its time): none is left behind.
    if let Some(g) = group {
        let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
    }
    let status = match status {
        Ok(s) => s.map_err(|e| format!("{}: {e}", command[0]))?,
        Err(_) => return Err(format!("{} {action} {fqdn}: no exit after {}s (killed)", command[0], limit.as_secs())),
    };
    if status.success() {
        return Ok(());
    }
    Err(format!("{} {action} {fqdn}: {status}: {}", command[0], String::from_utf8_lossy(&kept).trim()))
}

/// Waits until every record is on every checked server, or `propagation_timeout` passed.
/// Returns the servers checked.
///
/// # Errors
/// A record is still missing somewhere (the message says which and where), or there is no
/// server to check.
pub async fn propagated(cfg: &DnsConfig, records: &[TxtRecord]) -> Result<Vec<SocketAddr>, String> {
    let deadline = Instant::now() + cfg.propagation_timeout;
    let mut servers = tokio::time::timeout(cfg.propagation_timeout, check_servers(cfg, records))
        .await
        .map_err(|_| format!("finding the zone's servers took over {}s", cfg.propagation_timeout.as_secs()))??;
    let mut seen = Vec::new();
    servers.retain(|s| {
        let new = !seen.contains(s);
        seen.push(*s);
        new
    });
    loop {
        let mut missing = Vec::new();
        for s in &servers {
            let mut by_name: Vec<(&str, Vec<&str>)> = Vec::new();
            for r in records {
                match by_name.iter_mut().find(|(n, _)| *n == r.name) {
                    Some((_, v)) => v.push(&r.value),
                    None => by_name.push((&r.name, vec![&r.value])),
                }
            }
            for (n, want) in by_name {
                let left = deadline.saturating_duration_since(Instant::now());
                let asked = tokio::time::timeout(left, txt_values(*s, n))
                    .await
                    .unwrap_or_else(|_| Err("no answer in time".into()));
                match asked {
                    Ok(have) if want.iter().all(|w| have.iter().any(|h| h == w)) => {}
                    Ok(_) => missing.push(format!("{n} not yet on {s}")),
                    Err(e) => missing.push(format!("{n} on {s}: {e}")),
                }
            }
        }
        if missing.is_empty() {
            return Ok(servers);
        }
        if Instant::now() + CHECK_EVERY > deadline {
            return Err(format!(
                "the TXT records did not appear within {}s: {}",
                cfg.propagation_timeout.as_secs(),
                missing.join("; ")
            ));
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// The servers to check: `check`, or the zone's authoritative servers (its NS records, on
/// port 53) and the RFC 2136 primary.
async fn check_servers(cfg: &DnsConfig, records: &[TxtRecord]) -> Result<Vec<SocketAddr>, String> {
    let mut out = Vec::new();
    if !cfg.check.is_empty() {
        for s in &cfg.check {
            out.push(resolve(s).await?);
        }
        return Ok(out);
    }
    let Some(first) = records.first() else { return Ok(out) };
    let (mut ask, zone) = match &cfg.provider {
        DnsProvider::Rfc2136 { server, zone, key } => {
            let addr = resolve(server).await?;
            out.push(addr);
            let mut c = connect_tcp(server, Some(key)).await?;
            let zone = match zone {
                Some(z) => name(z)?,
                None => find_zone(&mut c, &first.name).await?,
            };
            (c, zone)
        }
        DnsProvider::Exec { .. } => {
            let r = system_resolver()?;
            let mut c = connect_udp(r).await?;
            let zone = find_zone(&mut c, &first.name).await.map_err(|e| format!("the system resolver {r}: {e}"))?;
            (c, zone)
        }
    };
    let resp = ask.query(zone.clone(), DNSClass::IN, RecordType::NS).await.map_err(|e| format!("NS {zone}: {e}"))?;
    let mut hosts = Vec::new();
    for r in resp.answers() {
        if let RData::NS(ns) = r.data() {
            hosts.push(ns.0.clone());
        }
    }
    for h in hosts {
        let mut addrs: Vec<std::net::IpAddr> = resp
            .additionals()
            .iter()
            .filter(|r| *r.name() == h)
            .filter_map(|r| match r.data() {
                RData::A(a) => Some(std::net::IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(std::net::IpAddr::V6(a.0)),
                _ => None,
            })
            .collect();
        if addrs.is_empty() {
            let host = h.to_ascii().trim_end_matches('.').to_string();
            let found = tokio::net::lookup_host((host.as_str(), 53)).await;
            if let Ok(found) = found {
                addrs.extend(found.map(|a| a.ip()));
            }
        }
        for a in addrs {
            let s = SocketAddr::new(a, 53);
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    if out.is_empty() {
        return Err(format!("found no authoritative server for zone {zone}; set [acme.dns] check"));
    }
    Ok(out)
}

/// The TXT values at `name` on `server` (asked without recursion).
async fn txt_values(server: SocketAddr, name_: &str) -> Result<Vec<String>, String> {
    let mut c = connect_udp(server).await?;
    let resp = c.query(name(name_)?, DNSClass::IN, RecordType::TXT).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for r in resp.answers() {
        if let RData::TXT(t) = r.data() {
            out.push(t.txt_data().iter().map(|p| String::from_utf8_lossy(p)).collect::<String>());
        }
    }
    Ok(out)
}

/// The zone holding `record`: the owner of the SOA record the server answers with (in the
/// answer for the apex, in the authority section otherwise).
async fn find_zone(c: &mut Client, record: &str) -> Result<Name, String> {
    let resp = c.query(name(record)?, DNSClass::IN, RecordType::SOA).await.map_err(|e| format!("SOA {record}: {e}"))?;
    resp.answers()
        .iter()
        .chain(resp.name_servers())
        .find(|r| r.record_type() == RecordType::SOA)
        .map(|r| r.name().clone())
        .ok_or_else(|| format!("no SOA record for {record} ({}); set [acme.dns] zone", resp.response_code()))
}

fn name(s: &str) -> Result<Name, String> {
    let mut n = Name::from_ascii(s).map_err(|e| format!("{s}: {e}"))?;
    n.set_fqdn(true);
    Ok(n)
}

async fn resolve(server: &str) -> Result<SocketAddr, String> {
    let (host, port) = split_server(server).ok_or_else(|| format!("{server}: not host:port"))?;
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("{server}: {e}"))?
        .next()
        .ok_or_else(|| format!("{server}: no address"))
}

/// The first `nameserver` of /etc/resolv.conf.
fn system_resolver() -> Result<SocketAddr, String> {
    let text = std::fs::read_to_string("/etc/resolv.conf").map_err(|e| format!("/etc/resolv.conf: {e}"))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .find_map(|a| a.trim().parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .ok_or_else(|| "no nameserver in /etc/resolv.conf; set [acme.dns] check".into())
}

fn signer(key: &TsigKey) -> Result<Arc<dyn MessageFinalizer>, String> {
    let algorithm = match key.algorithm.as_str() {
        "hmac-sha256" => TsigAlgorithm::HmacSha256,
        "hmac-sha384" => TsigAlgorithm::HmacSha384,
        "hmac-sha512" => TsigAlgorithm::HmacSha512,
        other => return Err(format!("TSIG algorithm {other:?} is not supported")),
    };
    let s = TSigner::new(key.secret.clone(), algorithm, name(&key.name)?, 300).map_err(|e| format!("TSIG key: {e}"))?;
    Ok(Arc::new(s))
}

async fn connect_tcp(server: &str, key: Option<&TsigKey>) -> Result<Client, String> {
    let addr = resolve(server).await?;
    let signer = key.map(signer).transpose()?;
    let (stream, handle) = TcpClientStream::new(addr, None, Some(EXCHANGE_TIMEOUT), TokioRuntimeProvider::new());
    let (client, bg) =
        Client::with_timeout(stream, handle, EXCHANGE_TIMEOUT, signer).await.map_err(|e| format!("{server}: {e}"))?;
    tokio::spawn(bg);
    Ok(client)
}

async fn connect_udp(addr: SocketAddr) -> Result<Client, String> {
    let stream =
        UdpClientStream::builder(addr, TokioRuntimeProvider::new()).with_timeout(Some(EXCHANGE_TIMEOUT)).build();
    let (mut client, bg) = Client::connect(stream).await.map_err(|e| format!("{addr}: {e}"))?;
    client.disable_edns();
    tokio::spawn(bg);
    Ok(client)
}

/// Records written for an order, removed when it is over however it ends: explicitly with
/// [`Published::remove`], or by a task when the order is dropped (a timeout).
#[derive(Debug)]
pub struct Published {
    cfg: DnsConfig,
    records: Vec<TxtRecord>,
}

impl Published {
    /// Writes `records` and keeps them to remove.
    ///
    /// # Errors
    /// As [`present`].
    pub async fn write(cfg: &DnsConfig, records: Vec<TxtRecord>) -> Result<Published, String> {
        present(cfg, &records).await?;
        Ok(Published { cfg: cfg.clone(), records })
    }

    /// The records.
    pub fn records(&self) -> &[TxtRecord] {
        &self.records
    }

    /// Removes the records now; a failure is logged (the records stay, harmless but untidy).
    pub async fn remove(mut self) {
        let records = std::mem::take(&mut self.records);
        if let Err(e) = remove(&self.cfg, &records).await {
            log(format_args!("error: removing the dns-01 TXT records: {e}"));
        }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        if self.records.is_empty() {
            return;
        }
        let (cfg, records) = (self.cfg.clone(), std::mem::take(&mut self.records));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = remove(&cfg, &records).await {
                    log(format_args!("error: removing the dns-01 TXT records: {e}"));
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_is_proven_at_its_base_name() {
        assert_eq!(TxtRecord::new("*.Example.com", "v".into()).name, "_acme-challenge.example.com");
        assert_eq!(TxtRecord::new("example.com", "w".into()).name, "_acme-challenge.example.com");
        assert_eq!(TxtRecord::new("a.example.com.", "x".into()).name, "_acme-challenge.a.example.com");
    }

    #[test]
    fn key_files_as_tsig_keygen_writes_them() {
        let k = super::super::config::parse_key_file(
            "key \"selvedge\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VsdmVkZ2Ugc2VsdmVkZ2Ugc2VsdmVkZ2U=\";\n};\n",
        )
        .unwrap();
        assert_eq!(k.name, "selvedge");
        assert_eq!(k.algorithm, "hmac-sha256");
        assert_eq!(k.secret, b"selvedge selvedge selvedge");
        assert!(super::super::config::parse_key_file("key x { algorithm hmac-sha256; };").is_err());
    }

    fn hook(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into(), "hook".into()]
    }

    #[tokio::test]
    async fn a_command_s_exit_is_waited_for_its_output_bounded_and_its_group_killed() {
        let limit = Duration::from_secs(3);
        // Its arguments: action, name, value.
        let r = run(&hook("test \"$1 $2 $3\" = \"present x. v\" || exit 3"), "present", "x.", "v", limit).await;
        assert_eq!(r, Ok(()));
        // Megabytes on stderr: the error keeps the first MAX_COMMAND_OUTPUT bytes.
        let e = run(&hook("head -c 5000000 /dev/zero | tr '\\0' x >&2; exit 1"), "present", "x.", "v", limit)
            .await
            .unwrap_err();
        assert!(e.len() < MAX_COMMAND_OUTPUT + 200 && e.contains("xxxx"), "{}", e.len());
        // A background process holding stderr does not make the command "hang", and does not
        // outlive it.
        let started = Instant::now();
        let pid_file = std::env::temp_dir().join(format!("selvedge-dns-hook-bg-{}", std::process::id()));
        let script = format!("sleep 30 & echo $! > {}; exit 0", pid_file.display());
        assert_eq!(run(&hook(&script), "present", "x.", "v", limit).await, Ok(()));
        assert!(started.elapsed() < Duration::from_secs(2));
        let child: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let _ = std::fs::remove_file(&pid_file);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z "), "the hook's background child lives on: {state}");
        // At the limit the whole group is killed, its children too.
        let pid_file = std::env::temp_dir().join(format!("selvedge-dns-hook-{}", std::process::id()));
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let e = run(&hook(&script), "present", "x.", "v", Duration::from_millis(500)).await.unwrap_err();
        assert!(e.contains("killed"), "{e}");
        let child: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let _ = std::fs::remove_file(&pid_file);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z "), "the hook's child lives on: {state}");
    }

    #[test]
    fn servers_and_ports() {
        assert_eq!(split_server("127.0.0.1:5353"), Some(("127.0.0.1", 5353)));
        assert_eq!(split_server("ns1.example.com"), Some(("ns1.example.com", 53)));
        assert_eq!(split_server("[::1]:5353"), Some(("::1", 5353)));
        assert_eq!(split_server("[::1]"), Some(("::1", 53)));
        assert_eq!(split_server("::1"), Some(("::1", 53)));
        assert_eq!(split_server("host:port"), None);
        assert_eq!(split_server(""), None);
    }
}
