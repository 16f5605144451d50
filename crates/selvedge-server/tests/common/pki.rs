//! A test CA and the certificates it signs (rcgen), as PEM files in a temp directory.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use super::TempDir;

/// A CA and what it signs, as PEM files in `dir`.
pub struct Pki {
    pub ca: std::path::PathBuf,
}

pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Pki {
    pub fn ca(dir: &TempDir, name: &str) -> (Pki, Issuer<'static, KeyPair>) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        let ca = dir.write(&format!("{name}-ca.pem"), cert.pem());
        (Pki { ca }, Issuer::new(p, key))
    }
}

/// A certificate for `names` (DNS names or IP addresses) signed by `issuer`.
pub fn leaf(dir: &TempDir, issuer: &Issuer<'static, KeyPair>, file: &str, names: &[&str], client: bool) -> Leaf {
    let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, file);
    p.extended_key_usages =
        vec![if client { ExtendedKeyUsagePurpose::ClientAuth } else { ExtendedKeyUsagePurpose::ServerAuth }];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    let c = dir.write(&format!("{file}.pem"), cert.pem());
    let k = dir.write(&format!("{file}.key"), key.serialize_pem());
    Leaf { cert: c.to_str().unwrap().into(), key: k.to_str().unwrap().into() }
}
