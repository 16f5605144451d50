//! The `selvedge` web server's parts, as a library so tests and fuzz targets can reach
//! them: configuration (`config`), virtual hosts and routes (`routes`, `path`, `redirect`,
//! `respond`; `lang`: matchers, placeholders, header rewriting),
//! route checks and fields (`policy`), what serves a route (`files`: static files,
//! listings, compression; `upstream`: reverse proxy, FastCGI, CGI, their pools and
//! connections), access log, metrics and the admin listener, automatic HTTPS (`acme`), and
//! running it all (`supervise`: start-up, signals, reload, upgrade). The binary
//! (`src/main.rs`) parses the command line and dispatches.

pub mod access_log;
pub mod acme;
pub mod admin;
pub mod cache;
pub mod cli;
pub mod client;
pub mod config;
pub mod diag;
pub mod files;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod lang;
pub mod metrics;
pub mod observe;
pub mod ocsp;
pub mod outbound;
pub mod path;
pub mod policy;
pub mod redirect;
pub mod respond;
pub mod routes;
pub mod service;
pub mod supervise;
pub mod units;
pub mod upstream;
