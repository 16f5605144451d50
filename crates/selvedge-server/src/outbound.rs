//! The HTTP client of the server's own requests (on-demand TLS's `ask`, OCSP answers):
//! HTTP/1.1, `http://` or `https://` with the system's roots, on rustls' ring provider.

use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

/// A client sending bodies of type `B`.
pub type HttpClient<B> = Client<hyper_rustls::HttpsConnector<HttpConnector>, B>;

/// A new client.
///
/// # Errors
/// The TLS configuration cannot be made.
pub fn client<B>() -> Result<HttpClient<B>, String>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(https))
}
