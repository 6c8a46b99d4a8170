//! The node's client certificate request, pure: a new ECDSA P-256 key, the PKCS#10
//! request for `CN=system:node:<node>, O=system:nodes`, the
//! `certificates.k8s.io/v1` CertificateSigningRequest object that carries it (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`, usages digital signature and client
//! auth), and what a CSR read back says ([`outcome`]). Upstream:
//! `pkg/kubelet/certificate/bootstrap/bootstrap.go` (`requestNodeCertificate`,
//! `digestedName`) and client-go `util/certificate/csr` (`RequestCertificate`,
//! `WaitForCertificate`).

use base64::Engine as _;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

/// The signer of kubelet client certificates (`certificatesv1.KubeAPIServerClientKubeletSignerName`).
pub(crate) const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The group every node is in, the certificate's O.
pub(crate) const NODES_GROUP: &str = "system:nodes";
/// The usages asked for an ECDSA key, in upstream's order. (An RSA key would add
/// `key encipherment`; rkubelet's keys are ECDSA, as upstream's.)
pub(crate) const USAGES: [&str; 2] = ["digital signature", "client auth"];
/// The name prefix of a rotation's CSR (`generateName`, client-go's `csr-`).
pub(crate) const GENERATE_NAME: &str = "csr-";

/// The user a node's client certificate names: `system:node:<node>`.
pub(crate) fn common_name(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// A new private key: ECDSA on P-256 with SHA-256, upstream's choice
/// (`keyutil.MakeEllipticPrivateKeyPEM`).
pub(crate) fn generate_key() -> Result<rcgen::KeyPair, rcgen::Error> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
}

/// The PEM certificate request of `key` for `node_name`: subject
/// `CN=system:node:<node>, O=system:nodes`, no extensions (the usages travel in the CSR
/// object, as upstream's `certutil.MakeCSR` with no SANs).
pub(crate) fn request_pem(key: &rcgen::KeyPair, node_name: &str) -> Result<String, rcgen::Error> {
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, NODES_GROUP);
    dn.push(rcgen::DnType::CommonName, common_name(node_name));
    params.distinguished_name = dn;
    params.serialize_request(key)?.pem()
}

/// The CSR's name for a bootstrap request (`digestedName`): `node-csr-` and a digest of
/// the public key, the subject and the usages, so a restarted kubelet with the same
/// cached key finds its own request again instead of filing another one. SHA-512/256
/// over each input base64url-encoded and followed by `|` (not in that alphabet, so two
/// inputs can never run into each other).
pub(crate) fn digested_name(public_key_der: &[u8], node_name: &str, usages: &[&str]) -> String {
    let encode = |d: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |d: &[u8]| {
        ctx.update(encode(d).as_bytes());
        ctx.update(b"|");
    };
    write(public_key_der);
    write(common_name(node_name).as_bytes());
    write(NODES_GROUP.as_bytes());
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(ctx.finish().as_ref()))
}

/// The CSR object for `request_pem`: named `name`, or with `generateName: csr-` when
/// None.
pub(crate) fn csr_object(name: Option<&str>, request_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            generate_name: name.is_none().then(|| GENERATE_NAME.to_string()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: KUBELET_CLIENT_SIGNER.to_string(),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// What a CSR read back says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not approved yet.
    Pending,
    /// Approved; the signer has not written the certificate yet.
    Approved,
    /// Approved and issued: the certificate (PEM).
    Issued(Vec<u8>),
    /// Denied by an approver.
    Denied {
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The signer failed.
    Failed {
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
}

/// What `csr`'s conditions and certificate say (`WaitForCertificate`): Denied or
/// Failed win over Approved; Approved counts once the certificate is there. A
/// condition whose status is `False` is not counted.
pub(crate) fn outcome(csr: &CertificateSigningRequest) -> Outcome {
    let Some(status) = &csr.status else {
        return Outcome::Pending;
    };
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        if c.status == "False" {
            continue;
        }
        let (reason, message) = (
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        );
        match c.type_.as_str() {
            "Denied" => return Outcome::Denied { reason, message },
            "Failed" => return Outcome::Failed { reason, message },
            "Approved" => approved = true,
            _ => {}
        }
    }
    match &status.certificate {
        Some(cert) if approved && !cert.0.is_empty() => Outcome::Issued(cert.0.clone()),
        _ if approved => Outcome::Approved,
        _ => Outcome::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    /// The subject (CN, O) of a PEM certificate request, read with the DER walker of the
    /// kubelet port's x509 authenticator: a PKCS#10 request's info is shaped as a
    /// certificate's TBS from its subject on, so the subject is re-wrapped as one.
    fn request_subject(pem: &str) -> (String, Vec<String>) {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("base64");
        // CertificationRequest { info { version, subject, spki, attributes }, alg, sig }.
        let (_, request, _) = der_next(&der);
        let (_, info, _) = der_next(request);
        let (_, _, after_version) = der_next(info);
        let (subject, _, _) = der_next(after_version);
        // Certificate { tbs { serial, alg, issuer, validity, subject } }.
        let tbs = [
            der_element(0x02, &[1]),
            der_element(0x30, &[]),
            der_element(0x30, &[]),
            der_element(0x30, &[]),
            subject.to_vec(),
        ]
        .concat();
        let cert = der_element(0x30, &der_element(0x30, &tbs));
        let user = wire::x509::user_of(&cert).expect("subject");
        (user.name, user.groups)
    }

    /// One DER element: (the whole element, its content, what follows).
    fn der_next(buf: &[u8]) -> (&[u8], &[u8], &[u8]) {
        let first = buf[1];
        let (len, head) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            let len = buf[2..2 + n]
                .iter()
                .fold(0usize, |a, b| (a << 8) | usize::from(*b));
            (len, 2 + n)
        };
        (
            &buf[..head + len],
            &buf[head..head + len],
            &buf[head + len..],
        )
    }

    fn der_element(tag: u8, content: &[u8]) -> Vec<u8> {
        let len = content.len();
        let mut out = vec![tag];
        match u8::try_from(len) {
            Ok(l) if l < 0x80 => out.push(l),
            Ok(l) => out.extend([0x81, l]),
            Err(_) => out.extend([0x82, (len >> 8) as u8, (len & 0xff) as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    #[test]
    fn the_request_names_the_node_in_system_nodes() {
        let key = generate_key().expect("key");
        let pem = request_pem(&key, "node-a").expect("csr");
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"),
            "{pem}"
        );
        let (cn, groups) = request_subject(&pem);
        assert_eq!(cn, "system:node:node-a");
        assert_eq!(groups, ["system:nodes"]);
        let key_pem = key.serialize_pem();
        assert!(key_pem.contains("PRIVATE KEY"), "{key_pem}");
        assert_eq!(
            key.algorithm(),
            &rcgen::PKCS_ECDSA_P256_SHA256,
            "ECDSA P-256 as upstream"
        );
    }

    #[test]
    fn the_csr_object_asks_the_kubelet_client_signer_for_client_auth() {
        let named = csr_object(Some("node-csr-x"), "PEM");
        let v = serde_json::to_value(&named).expect("json");
        assert_eq!(v["metadata"]["name"], "node-csr-x");
        assert!(v["metadata"].get("generateName").is_none());
        assert_eq!(
            v["spec"]["signerName"],
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(
            v["spec"]["usages"],
            serde_json::json!(["digital signature", "client auth"])
        );
        assert_eq!(v["spec"]["request"], "UEVN", "base64 of the PEM");
        let generated = serde_json::to_value(csr_object(None, "PEM")).expect("json");
        assert_eq!(generated["metadata"]["generateName"], "csr-");
        assert!(generated["metadata"].get("name").is_none());
    }

    #[test]
    fn the_digested_name_depends_on_key_node_and_usages() {
        let a = digested_name(b"key-a", "n1", &USAGES);
        assert!(a.starts_with("node-csr-"), "{a}");
        assert_eq!(
            a.len(),
            "node-csr-".len() + 43,
            "32 bytes, base64url unpadded"
        );
        assert_eq!(a, digested_name(b"key-a", "n1", &USAGES), "stable");
        assert_ne!(a, digested_name(b"key-b", "n1", &USAGES));
        assert_ne!(a, digested_name(b"key-a", "n2", &USAGES));
        assert_ne!(a, digested_name(b"key-a", "n1", &USAGES[..1]));
    }

    fn with(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
        let mut csr = csr_object(Some("x"), "PEM");
        csr.status = Some(CertificateSigningRequestStatus {
            certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s)| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        reason: Some(format!("{t}Reason")),
                        message: Some(format!("{t} message")),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
        csr
    }

    #[test]
    fn outcome_waits_for_approval_and_the_certificate_and_stops_on_denial() {
        let denied = || Outcome::Denied {
            reason: "DeniedReason".into(),
            message: "Denied message".into(),
        };
        let rows = [
            (csr_object(None, "PEM"), Outcome::Pending),
            (with(&[], None), Outcome::Pending),
            (with(&[("Approved", "True")], None), Outcome::Approved),
            (
                with(&[("Approved", "True")], Some("CERT")),
                Outcome::Issued(b"CERT".to_vec()),
            ),
            (
                with(&[("Approved", "False")], Some("CERT")),
                Outcome::Pending,
            ),
            (with(&[("Denied", "True")], None), denied()),
            (
                with(&[("Approved", "True"), ("Denied", "True")], Some("C")),
                denied(),
            ),
            (
                with(&[("Approved", "True"), ("Failed", "True")], None),
                Outcome::Failed {
                    reason: "FailedReason".into(),
                    message: "Failed message".into(),
                },
            ),
        ];
        for (i, (csr, want)) in rows.into_iter().enumerate() {
            assert_eq!(outcome(&csr), want, "row {i}");
        }
    }
}
