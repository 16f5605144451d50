//! `[log]`: the access log ([`crate::access_log`]) and diagnostics ([`crate::diag`]).

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};
use crate::access_log::{self, LogConfig, LogTarget};
use crate::diag::{ErrorFormat, ErrorLogConfig, ErrorTarget};
use crate::units::{Count, Size};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    access: Option<String>,
    error: Option<String>,
    error_format: Option<Spanned<String>>,
    level: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
    request_id: Option<Spanned<String>>,
    size: Option<Size>,
    backups: Option<Count<0, 1000>>,
}

impl RawLog {
    /// The access log: where, rotation, line format, request ids.
    pub(super) fn access_log(&self, src: &Source<'_>) -> Result<LogConfig, ConfigError> {
        let mut log = LogConfig::default();
        if let Some(a) = &self.access {
            log.target = match a.as_str() {
                "off" | "" => LogTarget::Off,
                "stdout" | "-" => LogTarget::Stdout,
                p => LogTarget::File(src.abs(p)),
            };
        }
        log.size = self.size.map_or(log.size, Size::get);
        log.backups = self.backups.map_or(log.backups, Count::get_u32);
        if let Some(f) = &self.format {
            log.format = access_log::Format::parse(f.get_ref()).map_err(|e| src.err(Some(f.span()), e))?;
        }
        log.trust_request_id = match self.request_id.as_ref().map(|r| (r.get_ref().as_str(), r.span())) {
            None | Some(("generate", _)) => false,
            Some(("trust", _)) => true,
            Some((other, sp)) => {
                return Err(src.err(Some(sp), format!("request_id {other:?}: \"generate\" or \"trust\"")));
            }
        };
        Ok(log)
    }

    /// Diagnostics: where, in which format, at which level.
    pub(super) fn error_log(&self, src: &Source<'_>) -> Result<ErrorLogConfig, ConfigError> {
        let mut error_log = ErrorLogConfig::default();
        match self.error.as_deref() {
            None | Some("stderr" | "-" | "") => {}
            Some(p) => error_log.target = ErrorTarget::File(src.abs(p)),
        }
        error_log.format = match &self.error_format {
            None => ErrorFormat::Text,
            Some(f) if f.get_ref() == "text" => ErrorFormat::Text,
            Some(f) if f.get_ref() == "json" => ErrorFormat::Json,
            Some(f) => {
                return Err(src.err(Some(f.span()), format!("error_format {:?}: \"text\" or \"json\"", f.get_ref())))
            }
        };
        if let Some(l) = &self.level {
            if let Err(e) = tracing_subscriber::EnvFilter::try_new(l.get_ref()) {
                return Err(src.err(Some(l.span()), format!("level {:?}: {e}", l.get_ref())));
            }
            error_log.level = Some(l.get_ref().clone());
        }
        Ok(error_log)
    }
}
