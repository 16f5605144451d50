//! The conversation with the CA (instant-acme on rustls' ring provider): the account, one
//! order from the new-order request to the certificate chain, and the renewal window.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountBuilder, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier,
    NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};

use super::challenge::Challenges;
use super::config::{load_roots, AcmeConfig, ChallengeKind, DnsConfig};
use super::dns;

/// How long an order may take from "challenges ready" to the certificate.
/// How long a fleet instance waits between publishing a challenge answer and telling the CA.
const FLEET_GRACE: Duration = Duration::from_millis(200);
const ORDER_TIMEOUT: Duration = Duration::from_secs(120);

/// An account builder whose HTTPS client trusts the system's roots, or only `ca_roots`.
fn builder(cfg: &AcmeConfig) -> Result<AccountBuilder, String> {
    let Some(path) = &cfg.ca_roots else {
        return Account::builder().map_err(|e| format!("HTTPS client: {e}"));
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in load_roots(path)? {
        roots.add(c).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only().enable_http1().build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, instant_acme::BodyWrapper<bytes::Bytes>>(https);
    Ok(Account::builder_with_http(Box::new(client)))
}

/// The stored account, if `stored` holds its credentials.
///
/// # Errors
/// The credentials are unreadable or the CA's directory cannot be fetched.
pub async fn restore(cfg: &AcmeConfig, stored: &[u8]) -> Result<Account, String> {
    let creds: AccountCredentials =
        serde_json::from_slice(stored).map_err(|e| format!("stored account credentials: {e}"))?;
    builder(cfg)?.from_credentials(creds).await.map_err(|e| format!("account: {e}"))
}

/// A new account (terms of service agreed), and its credentials to store.
///
/// # Errors
/// The CA refused it or could not be reached.
pub async fn create(cfg: &AcmeConfig) -> Result<(Account, Vec<u8>), String> {
    let contact = cfg.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contacts, terms_of_service_agreed: true, only_return_existing: false };
    let (account, creds) = builder(cfg)?
        .create(&new, cfg.directory.clone(), None)
        .await
        .map_err(|e| format!("creating an account at {}: {e}", cfg.directory))?;
    let json = serde_json::to_vec_pretty(&creds).map_err(|e| e.to_string())?;
    Ok((account, json))
}

/// The CA's renewal window for a certificate and when to ask again; `Ok(None)` when the CA
/// does not offer renewal information.
///
/// # Errors
/// The CA could not be asked or answered something else.
pub async fn renewal_window(
    account: &Account,
    id: &CertificateIdentifier<'_>,
) -> Result<Option<((SystemTime, SystemTime), Duration)>, String> {
    match account.renewal_info(id).await {
        Ok((info, again)) => {
            let w = &info.suggested_window;
            let at = |s: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(s.max(0) as u64);
            Ok(Some(((at(w.start.unix_timestamp()), at(w.end.unix_timestamp())), again)))
        }
        Err(instant_acme::Error::Unsupported(_)) => Ok(None),
        Err(e) => Err(format!("renewal information: {e}")),
    }
}

/// Answers withdrawn when the order is over, however it ends.
struct Published<'a> {
    challenges: &'a Challenges,
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Drop for Published<'_> {
    fn drop(&mut self) {
        for t in &self.tokens {
            self.challenges.withdraw(Some(t), None);
        }
        for n in &self.names {
            self.challenges.withdraw(None, Some(n));
        }
    }
}

/// Orders a certificate for `names`: answers the challenges, finalizes with a CSR for a
/// new ECDSA P-256 key, and downloads the chain. Returns the PEM bundle (chain, then key).
/// `replaces` names the certificate this one renews (ARI: the CA may then exempt the
/// order from rate limits).
///
/// # Errors
/// The CA refused the order or a validation failed (the message says which name and why),
/// or it could not be reached.
pub async fn order(
    account: &Account,
    cfg: &AcmeConfig,
    names: &[String],
    challenges: &Challenges,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<String, String> {
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut new = NewOrder::new(&ids);
    if let Some(p) = &cfg.profile {
        new = new.profile(p);
    }
    let mut order = match replaces {
        Some(r) => match account.new_order(&new.replaces(r)).await {
            Ok(o) => o,
            // The CA refused the replacement (already replaced, another account's), or does
            // not know replacements: no order was made, a plain one is asked for. Any other
            // failure may have come after the CA made the order (a lost answer): the attempt
            // fails and is tried again later, rather than leave a second order behind.
            Err(e @ (instant_acme::Error::Api(_) | instant_acme::Error::Unsupported(_))) => {
                tracing::debug!("replacement order refused ({e}): a plain order");
                account.new_order(&NewOrder::new(&ids)).await.map_err(|e| format!("new order: {e}"))?
            }
            Err(e) => return Err(format!("new order (replacing the last certificate): {e}")),
        },
        None => account.new_order(&new).await.map_err(|e| format!("new order: {e}"))?,
    };
    let mut published = Published { challenges, tokens: Vec::new(), names: Vec::new() };
    let kind = match cfg.challenge {
        ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
        ChallengeKind::Http01 => ChallengeType::Http01,
        ChallengeKind::Dns01 => ChallengeType::Dns01,
    };
    // DNS-01: every record written and seen on the zone's servers before the CA is told
    // about any of them (the CA may look at once, and a wildcard shares its base's name).
    let dns_records = match (&cfg.dns, cfg.challenge) {
        (Some(dns), ChallengeKind::Dns01) => dns_records(&mut order, dns).await?,
        _ => None,
    };
    let mut auths = order.authorizations();
    while let Some(a) = auths.next().await {
        let mut a = a.map_err(|e| format!("authorization: {e}"))?;
        if !pending(a.status, &a.identifier())? {
            continue;
        }
        let name = a.identifier().to_string();
        let mut ch = a
            .challenge(kind.clone())
            .ok_or_else(|| format!("the CA offers no {} challenge for {name}", cfg.challenge.name()))?;
        let ka = ch.key_authorization();
        match cfg.challenge {
            ChallengeKind::Dns01 => {}
            ChallengeKind::Http01 => {
                let token = ch.token.clone();
                published.tokens.push(token.clone());
                challenges.publish_http01(&token, ka.as_str()).map_err(|e| format!("publishing the challenge: {e}"))?;
            }
            ChallengeKind::TlsAlpn01 => {
                published.names.push(name.clone());
                challenges.publish_tls_alpn01(&name, ka.digest().as_ref())?;
            }
        }
        if challenges.in_fleet() && cfg.challenge != ChallengeKind::Dns01 {
            // The other instances take the answer from its event: give them a moment
            // before the CA may reach one of them.
            tokio::time::sleep(FLEET_GRACE).await;
        }
        ch.set_ready().await.map_err(|e| format!("{name}: {e}"))?;
    }
    let policy = RetryPolicy::new().initial_delay(Duration::from_millis(500)).backoff(1.5).timeout(ORDER_TIMEOUT);
    let status = match order.poll_ready(&policy).await {
        Ok(s) => s,
        // The order failed: say which name and why, from its authorizations.
        Err(instant_acme::Error::Api(p)) => return Err(why_invalid(&mut order).await.unwrap_or_else(|| p.to_string())),
        Err(e) => return Err(format!("waiting for validation: {e}")),
    };
    if status != OrderStatus::Ready {
        return Err(why_invalid(&mut order).await.unwrap_or_else(|| "the order became invalid".into()));
    }
    drop(published);
    if let Some(d) = dns_records {
        d.remove().await;
    }
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(|e| e.to_string())?;
    order.finalize_csr(csr.der()).await.map_err(|e| format!("finalize: {e}"))?;
    let chain = order.poll_certificate(&policy).await.map_err(|e| format!("certificate: {e}"))?;
    let sep = if chain.ends_with('\n') { "" } else { "\n" };
    Ok(format!("{chain}{sep}{}", key.serialize_pem()))
}

/// Whether an authorization still needs its challenge answered (`false`: already valid).
///
/// # Errors
/// It failed, expired or was withdrawn: the order cannot succeed.
fn pending(status: AuthorizationStatus, name: &impl std::fmt::Display) -> Result<bool, String> {
    match status {
        AuthorizationStatus::Pending => Ok(true),
        AuthorizationStatus::Valid => Ok(false),
        other => Err(format!("authorization for {name} is {other:?}")),
    }
}

/// Writes the DNS-01 records of the order's pending authorizations and waits until the
/// zone's servers give them; `None` when every authorization is already valid.
async fn dns_records(order: &mut Order, dns: &DnsConfig) -> Result<Option<dns::Published>, String> {
    let mut records = Vec::new();
    let mut auths = order.authorizations();
    while let Some(a) = auths.next().await {
        let mut a = a.map_err(|e| format!("authorization: {e}"))?;
        if !pending(a.status, &a.identifier())? {
            continue;
        }
        let name = a.identifier().to_string();
        let ch =
            a.challenge(ChallengeType::Dns01).ok_or_else(|| format!("the CA offers no dns-01 challenge for {name}"))?;
        records.push(dns::TxtRecord::new(&name, ch.key_authorization().dns_value()));
    }
    if records.is_empty() {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let p = dns::Published::write(dns, records).await.map_err(|e| format!("dns-01: {e}"))?;
    let servers = dns::propagated(dns, p.records()).await.map_err(|e| format!("dns-01: {e}"))?;
    let names: Vec<&str> = p.records().iter().map(|r| r.name.as_str()).collect();
    let servers: Vec<String> = servers.iter().map(ToString::to_string).collect();
    super::log(format_args!(
        "dns-01: {} TXT record(s) at {} written and seen on {} after {} ms",
        names.len(),
        names.join(", "),
        servers.join(", "),
        started.elapsed().as_millis()
    ));
    Ok(Some(p))
}

/// Why an order became invalid: each failed challenge's name and problem.
async fn why_invalid(order: &mut Order) -> Option<String> {
    let mut why = Vec::new();
    let mut auths = order.authorizations();
    while let Some(Ok(mut a)) = auths.next().await {
        let name = a.identifier().to_string();
        if let Ok(state) = a.refresh().await {
            for c in &state.challenges {
                if let Some(p) = &c.error {
                    why.push(format!("{name}: {p}"));
                }
            }
        }
    }
    (!why.is_empty()).then(|| format!("validation failed: {}", why.join("; ")))
}
