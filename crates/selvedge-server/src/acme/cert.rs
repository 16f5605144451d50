//! A stored certificate: the PEM bundle (chain, then key) and what renewal needs to know
//! from it (names, validity, serial, the ARI identifier).

use std::time::{Duration, SystemTime};

use instant_acme::CertificateIdentifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use selvedge::tls::CertKey;

/// What renewal needs from a certificate.
#[derive(Debug, Clone)]
pub struct CertInfo {
    /// DNS names (subjectAltName), lower case, sorted.
    pub names: Vec<String>,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// Serial number, lower-case hex.
    pub serial: String,
    /// The certificate's identifier for the CA's renewal information (RFC 9773), if it has
    /// an authority key identifier.
    pub ari_id: Option<CertificateIdentifier<'static>>,
}

impl CertInfo {
    /// Reads a DER certificate.
    ///
    /// # Errors
    /// Not a parsable X.509 certificate.
    pub fn parse(der: &CertificateDer<'_>) -> Result<CertInfo, String> {
        let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| format!("certificate: {e}"))?;
        let time = |t: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(t.max(0) as u64);
        let mut names: Vec<String> = match c.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        names.sort();
        names.dedup();
        let serial = c.tbs_certificate.raw_serial().iter().map(|b| format!("{b:02x}")).collect();
        Ok(CertInfo {
            names,
            not_before: time(c.validity().not_before.timestamp()),
            not_after: time(c.validity().not_after.timestamp()),
            serial,
            ari_id: CertificateIdentifier::try_from(der).ok().map(CertificateIdentifier::into_owned),
        })
    }

    /// Whether the certificate is for exactly these names (in any order).
    pub fn covers_exactly(&self, names: &[String]) -> bool {
        let mut want: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
        want.sort();
        want.dedup();
        want == self.names
    }
}

/// A certificate chain with its key, ready to serve.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The leaf certificate's facts.
    pub info: CertInfo,
    /// Chain and key for the TLS listeners.
    pub key: CertKey,
}

impl Bundle {
    /// Reads a PEM bundle: the chain (leaf first) and the private key.
    ///
    /// # Errors
    /// No certificate, no key, a key that does not suit the provider, an unparsable leaf.
    pub fn from_pem(pem: &[u8]) -> Result<Bundle, String> {
        let leaf = CertificateDer::pem_slice_iter(pem)
            .next()
            .ok_or("no certificate in the bundle")?
            .map_err(|e| format!("certificate PEM: {e}"))?;
        let info = CertInfo::parse(&leaf)?;
        let key = CertKey::from_pem(Vec::new(), pem, pem).map_err(|e| e.to_string())?;
        Ok(Bundle { info, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_bundle() {
        let mut params = rcgen::CertificateParams::new(vec!["B.example.com".into(), "a.example.com".into()]).unwrap();
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x01, 0xab]));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        let b = Bundle::from_pem(pem.as_bytes()).unwrap();
        assert_eq!(b.info.names, ["a.example.com", "b.example.com"]);
        assert_eq!(b.info.serial, "01ab");
        assert!(b.info.not_after > b.info.not_before);
        assert!(b.info.covers_exactly(&["b.example.com".into(), "A.example.com".into()]));
        assert!(!b.info.covers_exactly(&["a.example.com".into()]));
        assert!(Bundle::from_pem(cert.pem().as_bytes()).is_err(), "no key");
        assert!(Bundle::from_pem(key.serialize_pem().as_bytes()).is_err(), "no certificate");
    }
}
