//! The server-certificate check of `sslmode=verify-ca` / `verify-full`, made to accept what
//! libpq accepts.
//!
//! libpq checks certificates with OpenSSL, which is more lenient than webpki in ways that
//! PostgreSQL's own documentation relies on: its recipe for a self-signed server certificate
//! (`openssl req -new -x509 -subj "/CN=dbhost"`) makes a certificate with `CA:TRUE` that is
//! used as both the root (`sslrootcert`) and the server's certificate (webpki refuses it as
//! `CaUsedAsEndEntity`), its recipe for a CA-signed one (`openssl x509 -req -CA root.crt`)
//! makes an X.509 v1 certificate (webpki refuses v1), and neither names the host other than
//! by its Common Name (webpki reads only subjectAltName). So [`LibpqVerifier`] asks webpki
//! first and, when webpki refuses, accepts the two shapes OpenSSL accepts and webpki does not:
//!
//! - the server's certificate is itself one of the roots, byte for byte, and self-issued
//!   (OpenSSL trusts a self-signed certificate found in the trust store);
//! - the server's certificate is X.509 v1 and its chain (through the intermediates the server
//!   sent, to a root) is checked here: each signature with the TLS provider's algorithms, each
//!   issuer a CA (`basicConstraints` CA, or a v1 self-issued root as OpenSSL allows) whose
//!   `keyUsage`, if any, allows signing certificates and whose path length allows the chain,
//!   each validity period covering now; a chain with name constraints or an unknown critical
//!   extension is refused (webpki would enforce them, this check does not).
//!
//! The handshake's signature is checked against the certificate's key as webpki reads it, or,
//! for a v1 certificate webpki cannot read, as read here (TLS 1.3, which PostgreSQL offers
//! from version 12 with OpenSSL 1.1.1; over TLS 1.2 a v1 certificate is refused).
//!
//! Either way the server's certificate must be valid now and usable by a TLS server
//! (`extendedKeyUsage`, if any, has serverAuth; `keyUsage`, if any, allows a TLS key), as
//! OpenSSL's `ssl_server` purpose requires. A wrong CA, an expired certificate or a broken
//! signature is still refused.
//!
//! `verify-full` then checks the host name as libpq does (`fe-secure-openssl.c`): the
//! subjectAltName `dNSName`s and `iPAddress`es are compared with the host connected to (the
//! `host`, not the `hostaddr`), a `dNSName` case-insensitively with a leading `*.` matching
//! exactly one label; the Common Name is compared only when no subjectAltName of the host's
//! kind (DNS name or IP address) is present.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use x509_cert::certificate::Version;
use x509_cert::der::asn1::AnyRef;
use x509_cert::der::oid::db::{rfc4519, rfc5280};
use x509_cert::der::oid::{AssociatedOid, ObjectIdentifier};
use x509_cert::der::{Decode, Encode};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName};
use x509_cert::Certificate;

/// The longest chain (server certificate, intermediates, root) the fallback follows.
const MAX_CHAIN: usize = 8;

/// The extensions the fallback understands; a critical one outside this list refuses the chain.
const KNOWN_CRITICAL: [ObjectIdentifier; 4] = [
    rfc5280::ID_CE_BASIC_CONSTRAINTS,
    rfc5280::ID_CE_KEY_USAGE,
    rfc5280::ID_CE_EXT_KEY_USAGE,
    rfc5280::ID_CE_SUBJECT_ALT_NAME,
];

/// libpq's check of the server's certificate: the chain against the roots (webpki, or the
/// shapes OpenSSL also accepts: see the module's text) and, with `check_name`, the host name
/// as libpq compares it.
#[derive(Debug)]
pub(crate) struct LibpqVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    roots: Vec<CertificateDer<'static>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl LibpqVerifier {
    /// A verifier over `roots` (the same certificates `webpki` was built on); `check_name`
    /// for `verify-full`.
    pub(crate) fn new(
        webpki: Arc<WebPkiServerVerifier>,
        roots: Vec<CertificateDer<'static>>,
        check_name: bool,
        provider: Arc<CryptoProvider>,
    ) -> Self {
        LibpqVerifier {
            webpki,
            roots,
            check_name,
            provider,
        }
    }

    /// The chain check: webpki's, else the shapes OpenSSL accepts (webpki's error is kept when
    /// the certificate is neither).
    fn check_chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let webpki_error = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // The chain is good; the name is checked below, libpq's way.
            Ok(_)
            | Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => return Ok(()),
            Err(e) => e,
        };
        let Ok(leaf) = Certificate::from_der(end_entity.as_ref()) else {
            return Err(webpki_error);
        };
        let self_issued = leaf.tbs_certificate.issuer == leaf.tbs_certificate.subject;
        let is_root = self_issued && self.roots.iter().any(|r| r.as_ref() == end_entity.as_ref());
        let is_v1 = leaf.tbs_certificate.version == Version::V1;
        if !is_root && !is_v1 {
            // A self-signed certificate that is not one of the roots: webpki's words for it
            // (`CaUsedAsEndEntity` when it is a CA) would hide that no root vouches for it.
            return Err(if self_issued {
                CertificateError::UnknownIssuer.into()
            } else {
                webpki_error
            });
        }
        let secs = now.as_secs();
        check_validity(&leaf, secs)?;
        check_server_purpose(&leaf)?;
        if is_root {
            return Ok(());
        }
        self.check_v1_chain(&leaf, intermediates, secs)
    }

    /// The path from a v1 server certificate through `intermediates` to a root.
    fn check_v1_chain(
        &self,
        leaf: &Certificate,
        intermediates: &[CertificateDer<'_>],
        now: u64,
    ) -> Result<(), rustls::Error> {
        let roots: Vec<Certificate> = self
            .roots
            .iter()
            .filter_map(|r| Certificate::from_der(r.as_ref()).ok())
            .collect();
        let intermediates: Vec<Certificate> = intermediates
            .iter()
            .filter_map(|c| Certificate::from_der(c.as_ref()).ok())
            .collect();
        let mut current = leaf.clone();
        // `below`: CA certificates between the server's certificate and the one looked for.
        for below in 0..MAX_CHAIN {
            let issued_by = |ca: &&Certificate| {
                ca.tbs_certificate.subject == current.tbs_certificate.issuer
                    && signed_by(&current, ca, &self.provider)
            };
            // OpenSSL looks in the trust store first.
            if let Some(root) = roots.iter().find(issued_by) {
                check_issuer(root, below, now)?;
                return Ok(());
            }
            let Some(next) = intermediates.iter().find(issued_by) else {
                return Err(CertificateError::UnknownIssuer.into());
            };
            check_issuer(next, below, now)?;
            current = next.clone();
        }
        Err(CertificateError::UnknownIssuer.into())
    }
}

impl ServerCertVerifier for LibpqVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check_chain(end_entity, intermediates, server_name, ocsp_response, now)?;
        if self.check_name {
            check_host_name(end_entity, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.webpki.verify_tls13_signature(message, cert, dss) {
            // webpki cannot read a v1 certificate's key (it parses v3 only): the handshake is
            // checked against the key read here. The chain was accepted before this runs.
            Err(first) => {
                let Some(spki) = Certificate::from_der(cert.as_ref())
                    .ok()
                    .and_then(|c| c.tbs_certificate.subject_public_key_info.to_der().ok())
                else {
                    return Err(first);
                };
                rustls::crypto::verify_tls13_signature_with_raw_key(
                    message,
                    &rustls::pki_types::SubjectPublicKeyInfoDer::from(spki),
                    dss,
                    &self.provider.signature_verification_algorithms,
                )
            }
            ok => ok,
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The extension `oid` of `cert`, decoded, with whether it is critical. `Err` when present but
/// undecodable.
fn extension<T: AssociatedOid + for<'a> Decode<'a>>(
    cert: &Certificate,
) -> Result<Option<T>, rustls::Error> {
    let Some(ext) = cert
        .tbs_certificate
        .extensions
        .iter()
        .flatten()
        .find(|e| e.extn_id == T::OID)
    else {
        return Ok(None);
    };
    T::from_der(ext.extn_value.as_bytes())
        .map(Some)
        .map_err(|_| CertificateError::BadEncoding.into())
}

/// `cert`'s validity period covers `now` (seconds since the epoch).
fn check_validity(cert: &Certificate, now: u64) -> Result<(), rustls::Error> {
    let validity = &cert.tbs_certificate.validity;
    if now < validity.not_before.to_unix_duration().as_secs() {
        return Err(CertificateError::NotValidYet.into());
    }
    if now > validity.not_after.to_unix_duration().as_secs() {
        return Err(CertificateError::Expired.into());
    }
    Ok(())
}

/// OpenSSL's `ssl_server` purpose for the server's certificate: an `extendedKeyUsage` names
/// serverAuth, a `keyUsage` allows a TLS key (signature, key encipherment or agreement), and
/// no critical extension is unknown to this check.
fn check_server_purpose(cert: &Certificate) -> Result<(), rustls::Error> {
    check_critical(cert)?;
    if let Some(eku) = extension::<ExtendedKeyUsage>(cert)? {
        if !eku.0.contains(&rfc5280::ID_KP_SERVER_AUTH) {
            return Err(CertificateError::InvalidPurpose.into());
        }
    }
    if let Some(ku) = extension::<KeyUsage>(cert)? {
        if !(ku.digital_signature() || ku.key_encipherment() || ku.key_agreement()) {
            return Err(CertificateError::InvalidPurpose.into());
        }
    }
    Ok(())
}

/// A certificate that signed another in the chain, `below` CA certificates under it: a CA,
/// allowed to sign certificates, with room in its path length, valid now.
fn check_issuer(ca: &Certificate, below: usize, now: u64) -> Result<(), rustls::Error> {
    check_critical(ca)?;
    let tbs = &ca.tbs_certificate;
    match extension::<BasicConstraints>(ca)? {
        Some(bc) if bc.ca => {
            if let Some(max) = bc.path_len_constraint {
                if below > usize::from(max) {
                    return Err(CertificateError::UnknownIssuer.into());
                }
            }
        }
        // OpenSSL takes a self-issued v1 certificate as a CA (X509_check_ca's "v1 root").
        None if tbs.version == Version::V1 && tbs.issuer == tbs.subject => {}
        _ => return Err(CertificateError::UnknownIssuer.into()),
    }
    if let Some(ku) = extension::<KeyUsage>(ca)? {
        if !ku.key_cert_sign() {
            return Err(CertificateError::UnknownIssuer.into());
        }
    }
    check_validity(ca, now)
}

/// Refuses a certificate with name constraints (not enforced here) or a critical extension
/// this check does not know.
fn check_critical(cert: &Certificate) -> Result<(), rustls::Error> {
    for ext in cert.tbs_certificate.extensions.iter().flatten() {
        if ext.extn_id == rfc5280::ID_CE_NAME_CONSTRAINTS
            || (ext.critical && !KNOWN_CRITICAL.contains(&ext.extn_id))
        {
            return Err(CertificateError::UnhandledCriticalExtension.into());
        }
    }
    Ok(())
}

/// The contents of a DER SEQUENCE (an AlgorithmIdentifier as the provider's ids hold it).
fn sequence_contents(der: &[u8]) -> Option<&[u8]> {
    AnyRef::from_der(der).ok().map(|any| any.value())
}

/// Whether `issuer`'s key made `cert`'s signature, by one of the provider's algorithms.
fn signed_by(cert: &Certificate, issuer: &Certificate, provider: &CryptoProvider) -> bool {
    let (Ok(tbs), Ok(sig_alg), Ok(key_alg)) = (
        cert.tbs_certificate.to_der(),
        cert.signature_algorithm.to_der(),
        issuer
            .tbs_certificate
            .subject_public_key_info
            .algorithm
            .to_der(),
    ) else {
        return false;
    };
    let (Some(sig_alg), Some(key_alg)) = (sequence_contents(&sig_alg), sequence_contents(&key_alg))
    else {
        return false;
    };
    let (Some(key), Some(signature)) = (
        issuer
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .as_bytes(),
        cert.signature.as_bytes(),
    ) else {
        return false;
    };
    provider
        .signature_verification_algorithms
        .all
        .iter()
        .any(|alg| {
            alg.signature_alg_id().as_ref() == sig_alg
                && alg.public_key_alg_id().as_ref() == key_alg
                && alg.verify_signature(key, &tbs, signature).is_ok()
        })
}

/// libpq's host-name check of `verify-full` (see the module's text).
fn check_host_name(
    end_entity: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
) -> Result<(), rustls::Error> {
    let cert = Certificate::from_der(end_entity.as_ref())
        .map_err(|_| rustls::Error::from(CertificateError::BadEncoding))?;
    let (host, host_ip): (String, Option<IpAddr>) = match server_name {
        ServerName::DnsName(name) => (name.as_ref().to_string(), None),
        ServerName::IpAddress(ip) => {
            let ip = IpAddr::from(*ip);
            (ip.to_string(), Some(ip))
        }
        _ => return Err(CertificateError::NotValidForName.into()),
    };
    let mut presented = Vec::new();
    let mut check_cn = true;
    for name in extension::<SubjectAltName>(&cert)?
        .iter()
        .flat_map(|s| &s.0)
    {
        match name {
            GeneralName::DnsName(dns) => {
                if host_ip.is_none() {
                    check_cn = false;
                }
                let dns = dns.as_str();
                presented.push(dns.to_string());
                if name_matches(dns, &host) {
                    return Ok(());
                }
            }
            GeneralName::IpAddress(bytes) => {
                if host_ip.is_some() {
                    check_cn = false;
                }
                let ip = match bytes.as_bytes().len() {
                    4 => <[u8; 4]>::try_from(bytes.as_bytes()).ok().map(IpAddr::from),
                    16 => <[u8; 16]>::try_from(bytes.as_bytes())
                        .ok()
                        .map(IpAddr::from),
                    _ => None,
                };
                if let Some(ip) = ip {
                    presented.push(ip.to_string());
                    if Some(ip) == host_ip {
                        return Ok(());
                    }
                }
            }
            _ => {}
        }
    }
    if check_cn {
        if let Some(cn) = common_name(&cert) {
            presented.push(cn.clone());
            if name_matches(&cn, &host) {
                return Ok(());
            }
        }
    }
    Err(CertificateError::NotValidForNameContext {
        expected: server_name.to_owned(),
        presented,
    }
    .into())
}

/// The subject's first Common Name, as text (`None` when absent, not a string, or holding a
/// NUL, which libpq refuses).
fn common_name(cert: &Certificate) -> Option<String> {
    let value = cert
        .tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|atv| atv.oid == rfc4519::CN)?
        .value
        .clone();
    let text = if let Ok(s) = value.decode_as::<x509_cert::der::asn1::Utf8StringRef<'_>>() {
        s.as_str().to_string()
    } else if let Ok(s) = value.decode_as::<x509_cert::der::asn1::PrintableStringRef<'_>>() {
        s.as_str().to_string()
    } else if let Ok(s) = value.decode_as::<x509_cert::der::asn1::Ia5StringRef<'_>>() {
        s.as_str().to_string()
    } else if let Ok(s) = value.decode_as::<x509_cert::der::asn1::TeletexStringRef<'_>>() {
        s.as_str().to_string()
    } else {
        return None;
    };
    (!text.contains('\0')).then_some(text)
}

/// libpq's comparison of a certificate's name with the host: equal ignoring ASCII case, or a
/// `*.rest` pattern whose `rest` ends the host after exactly one non-empty label.
fn name_matches(pattern: &str, host: &str) -> bool {
    if pattern.contains('\0') {
        return false;
    }
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    let Some(suffix) = pattern.strip_prefix('*') else {
        return false;
    };
    if !suffix.starts_with('.') || suffix.len() < 2 || host.len() <= suffix.len() {
        return false;
    }
    let (label, rest) = host.split_at(host.len() - suffix.len());
    rest.eq_ignore_ascii_case(suffix) && !label.contains('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_as_libpq_matches_them() {
        assert!(name_matches("db.example", "DB.Example"));
        assert!(name_matches("*.example.org", "db.example.org"));
        assert!(!name_matches("*.example.org", "a.db.example.org"));
        assert!(!name_matches("*.example.org", "example.org"));
        assert!(!name_matches("*.example.org", ".example.org"));
        assert!(!name_matches("*", "localhost"));
        assert!(!name_matches("*.", "a."));
        assert!(!name_matches("db*.example.org", "db1.example.org"));
        assert!(!name_matches("localhost\0.evil", "localhost"));
        assert!(!name_matches("other", "localhost"));
    }
}
