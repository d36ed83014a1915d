//! A local CA and the certificates it signs: what a first start of the compose stack
//! (`lock-server --generate-tls`) and the tests use. Not a PKI: no revocation, no
//! intermediate; a deployment with its own CA gives the services its files instead.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::TlsError;

/// How long a certificate `LocalCa::issue` makes is valid: about a year, the longest public
/// CAs issue (398 days), so that a forgotten renewal shows within a year.
pub const LEAF_VALIDITY_DAYS: i64 = 397;
/// How long the local CA is valid: ten years.
pub const CA_VALIDITY_DAYS: i64 = 3_650;

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

/// A CA that signs the services' certificates.
pub struct LocalCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa").finish_non_exhaustive()
    }
}

fn failed(what: &str) -> impl FnOnce(rcgen::Error) -> TlsError + '_ {
    move |e| TlsError::new(what, e)
}

fn days_from_now(days: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc() + time::Duration::days(days)
}

impl LocalCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed("CA"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_after = days_from_now(CA_VALIDITY_DAYS);
        let key = KeyPair::generate().map_err(failed("CA key"))?;
        let cert = params.self_signed(&key).map_err(failed("CA"))?;
        Ok(Self { cert, key })
    }

    /// The CA's certificate (what clients trust).
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses; the first is also its common
    /// name), for servers and clients, valid from now for [`LEAF_VALIDITY_DAYS`].
    pub fn issue(&self, names: &[&str]) -> Result<Issued, TlsError> {
        self.issue_valid(names, days_from_now(-1), days_from_now(LEAF_VALIDITY_DAYS))
    }

    /// As [`Self::issue`], valid only between `not_before` and `not_after` (tests make
    /// expired certificates with it).
    pub fn issue_valid(
        &self,
        names: &[&str],
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> Result<Issued, TlsError> {
        let first = names
            .first()
            .ok_or_else(|| TlsError::new("certificate", "at least one name is needed"))?;
        let sans: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(sans).map_err(failed("certificate"))?;
        params.distinguished_name.push(DnType::CommonName, *first);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().map_err(failed("certificate key"))?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(failed("certificate"))?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}
