//! The `selvedge` web server's parts, as a library so tests and fuzz targets can reach
//! them: configuration, routes (static files, CGI, FastCGI, reverse proxy), route checks and
//! fields (`policy`), redirects and rewrites, directory listings, compression, access log,
//! automatic HTTPS (ACME), and running it all (`supervise`: start-up, signals, reload,
//! upgrade). The binary (`src/main.rs`) parses the command line and dispatches.

pub mod access_log;
pub mod acme;
pub mod admin;
pub mod backend;
pub mod cgi;
pub mod cli;
pub mod client;
pub mod compression;
pub mod config;
pub mod diag;
pub mod fastcgi;
#[doc(hidden)]
pub mod fuzzing;
pub mod gate;
pub mod gateway;
pub mod listing;
pub mod metrics;
pub mod mime;
pub mod observe;
pub mod path;
pub mod policy;
pub mod proxy;
pub mod redirect;
pub mod routes;
pub mod service;
pub mod static_files;
pub mod supervise;
pub mod upstream;
