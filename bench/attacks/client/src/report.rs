//! What one connection saw, and the summary line the scripts parse.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::wire::error_name;

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The server closed it (FIN).
    Eof,
    /// The server reset it (RST), or a write found it gone.
    Reset,
    /// Another socket error.
    Error(String),
    /// Still open when the run ended.
    Open,
}

/// One attack connection's record. Times are from the connection's start; the cut-off
/// time ([`Outcome::cut_at`]) counts from the attack's first bytes (`attack_at`), so that
/// the connection's setup (connect, prefaces, SETTINGS) is not in it.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The first GOAWAY: its code and when it arrived.
    pub goaway: Option<(u32, Duration)>,
    /// The GOAWAY's last stream id: the highest stream the server took.
    pub goaway_last: Option<u32>,
    /// How the connection ended, and when.
    pub end: End,
    pub end_at: Duration,
    /// When the client's writes stopped going out (the server stopped reading), if they did.
    pub stalled_at: Option<Duration>,
    /// Attack units sent (streams or frames, as the class counts) and streams opened.
    pub units: u64,
    pub streams: u64,
    /// Streams the server answered (a response head or RST_STREAM).
    pub answered: u64,
    /// RST_STREAM received, by code.
    pub rst: BTreeMap<u32, u64>,
    /// Response statuses received.
    pub statuses: BTreeMap<u16, u64>,
    /// The first response: its status and when its first byte arrived.
    pub first_response: Option<(u16, Duration)>,
    /// The first RST_STREAM received: its code and when.
    pub first_rst: Option<(u32, Duration)>,
    /// For attacks on one stream: the server reset that stream (code, when).
    pub stream_cut: Option<(u32, Duration)>,
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// When the attack's first bytes went out (zero for attacks that send at once).
    pub attack_at: Duration,
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome {
            goaway: None,
            goaway_last: None,
            end: End::Open,
            end_at: Duration::ZERO,
            stalled_at: None,
            units: 0,
            streams: 0,
            answered: 0,
            rst: BTreeMap::new(),
            statuses: BTreeMap::new(),
            first_response: None,
            first_rst: None,
            stream_cut: None,
            bytes_out: 0,
            bytes_in: 0,
            attack_at: Duration::ZERO,
        }
    }
}

impl Outcome {
    /// Whether the server cut this connection off (rather than the run ending).
    pub fn cut(&self) -> bool {
        self.goaway.is_some() || self.stream_cut.is_some() || self.end != End::Open
    }

    /// When the server acted first, counted from the attack's first bytes: its GOAWAY,
    /// else the close.
    pub fn cut_at(&self) -> Option<Duration> {
        let first = [self.goaway.map(|g| g.1), self.stream_cut.map(|r| r.1)].into_iter().flatten().min();
        let at = match (first, &self.end) {
            (Some(t), _) => Some(t),
            (None, End::Open) => None,
            (None, _) => Some(self.end_at),
        };
        at.map(|t| t.saturating_sub(self.attack_at))
    }

    /// Streams the server took: those it answered, or (for streams it never answers, like
    /// client-reset ones) as many as its GOAWAY's last stream id covers.
    pub fn taken(&self) -> u64 {
        let by_goaway = self.goaway_last.map_or(0, |l| u64::from(l).div_ceil(2));
        self.answered.max(by_goaway.min(self.streams))
    }

    /// `goaway:CODE`, `rst:CODE` (the attacking stream), `fin`, `reset`, `error`, or `none`.
    pub fn how(&self) -> String {
        match (self.goaway, self.stream_cut) {
            (Some((code, t)), Some((_, r))) if t <= r => return format!("goaway:{}", error_name(code)),
            (Some((code, _)), None) => return format!("goaway:{}", error_name(code)),
            (_, Some((code, _))) => return format!("rst:{}", error_name(code)),
            (None, None) => {}
        }
        match &self.end {
            End::Eof => "fin".into(),
            End::Reset => "reset".into(),
            End::Error(_) => "error".into(),
            End::Open => "none".into(),
        }
    }

    /// How the socket itself ended: `fin`, `reset`, `error`, `open`.
    pub fn close_kind(&self) -> &'static str {
        match &self.end {
            End::Eof => "fin",
            End::Reset => "reset",
            End::Error(_) => "error",
            End::Open => "open",
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// The `RESULT` line: `key=value` pairs (no spaces inside values) for the scripts, about
/// the first connection (`how`, `cut_ms`, `close`, `close_ms`, `first_status`,
/// `first_ms`) and all of them (the rest).
pub fn summary(class: &str, unit: &str, all: &[Outcome]) -> String {
    let connect_error = |o: &Outcome| matches!(&o.end, End::Error(e) if e.starts_with("connect"));
    let connect_errors = all.iter().filter(|o| connect_error(o)).count();
    let outcomes: Vec<Outcome> = all.iter().filter(|o| !connect_error(o)).cloned().collect();
    let mut s = format!("RESULT class={class} unit={unit} conns={} connect_errors={connect_errors}", outcomes.len());
    let cut = outcomes.iter().filter(|o| o.cut()).count();
    let _ = write!(s, " cutoffs={cut}");
    if let Some(o) = outcomes.first() {
        let _ = write!(s, " how={}", o.how());
        let _ = write!(s, " cut_ms={}", o.cut_at().map_or("-".into(), ms));
        let _ = write!(
            s,
            " close={} close_ms={}",
            o.close_kind(),
            if o.end == End::Open { "-".into() } else { ms(o.end_at) }
        );
        let _ = write!(s, " stalled_ms={}", o.stalled_at.map_or("-".into(), ms));
        match o.first_response {
            Some((st, t)) => {
                let _ = write!(s, " first_status={st} first_ms={}", ms(t));
            }
            None => s.push_str(" first_status=- first_ms=-"),
        }
    }
    let cuts: Vec<f64> = outcomes.iter().filter_map(|o| o.cut_at()).map(|d| d.as_secs_f64() * 1e3).collect();
    let _ = write!(s, " cut_ms_med={}", median(cuts).map_or("-".into(), |v| format!("{v:.2}")));
    let sum = |f: fn(&Outcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    let _ = write!(
        s,
        " units={} streams={} answered={} bytes_out={} bytes_in={}",
        sum(|o| o.units),
        sum(|o| o.streams),
        sum(|o| o.answered),
        sum(|o| o.bytes_out),
        sum(|o| o.bytes_in)
    );
    // Streams a connection got the server to take before it was cut off (its budget).
    let _ = write!(s, " taken={}", sum(|o| o.taken()));
    let per: Vec<f64> = outcomes.iter().filter(|o| o.cut()).map(|o| o.taken() as f64).collect();
    let _ = write!(s, " taken_per_cut_med={}", median(per).map_or("-".into(), |v| format!("{v:.0}")));
    // The most responses of one status a connection got (e.g. 431s before a cut-off).
    let max431 = outcomes.iter().map(|o| o.statuses.get(&431).copied().unwrap_or(0)).max().unwrap_or(0);
    let _ = write!(s, " max431_per_conn={max431}");
    let mut goaways: BTreeMap<String, u64> = BTreeMap::new();
    let mut rst: BTreeMap<String, u64> = BTreeMap::new();
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    for o in &outcomes {
        if let Some((c, _)) = o.goaway {
            *goaways.entry(error_name(c)).or_default() += 1;
        }
        for (c, n) in &o.rst {
            *rst.entry(error_name(*c)).or_default() += n;
        }
        for (st, n) in &o.statuses {
            *statuses.entry(*st).or_default() += n;
        }
    }
    let join = |m: Vec<String>| if m.is_empty() { "-".to_string() } else { m.join(",") };
    let _ = write!(s, " goaways={}", join(goaways.iter().map(|(k, v)| format!("{k}:{v}")).collect()));
    let _ = write!(s, " rst={}", join(rst.iter().map(|(k, v)| format!("{k}:{v}")).collect()));
    let _ = write!(s, " statuses={}", join(statuses.iter().map(|(k, v)| format!("{k}:{v}")).collect()));
    s
}

/// Latency percentiles of the legitimate client.
pub fn probe_summary(ok: usize, total: usize, mut lat_ms: Vec<f64>, fails: &BTreeMap<String, u64>) -> String {
    lat_ms.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| -> String {
        if lat_ms.is_empty() {
            return "-".into();
        }
        let i = ((lat_ms.len() as f64 - 1.0) * p).round() as usize;
        format!("{:.2}", lat_ms[i])
    };
    let fails = if fails.is_empty() {
        "-".to_string()
    } else {
        fails.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(",")
    };
    format!(
        "PROBE probes={total} ok={ok} p50_ms={} p99_ms={} max_ms={} failures={fails}",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    )
}
