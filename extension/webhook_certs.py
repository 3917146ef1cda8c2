"""The CA and serving certificate of cri-resmgr-webhook, kept in a seed Secret so reconciles reuse them.

The CA (5 years) signs the serving certificate (1 year, SANs: the webhook Service's DNS names).
Each reconcile reads the Secret and renews only what needs it: the serving certificate when it
expires within 30 days, names other names or is not signed by the CA; the CA when it expires
within 180 days. A renewed CA stays in the caBundle next to the new one until it expires, so the
API server trusts the webhook pods that still serve the old certificate while they roll.

The CA also follows the shoot's CA rotation, as Gardener's extensions secrets manager does it (gardener
v1.149.3 extensions/pkg/util/secret/manager/manager.go): a new CA when the rotation's lastInitiationTime
differs from the one the CA was made for (phase Preparing), the old one kept in the bundle, and the old
one dropped while the phase is Completing (IgnoreOldSecrets).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from dataclasses import dataclass, replace
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extension import constants as c
from extension.gardener.kube import Apis, is_not_found

log = logging.getLogger("extension.webhook_certs")

SECRET_NAME = "cri-resmgr-webhook-certs"
CA_VALIDITY = dt.timedelta(days=5 * 365)
CA_RENEW_BEFORE = dt.timedelta(days=180)
SERVING_VALIDITY = dt.timedelta(days=365)
SERVING_RENEW_BEFORE = dt.timedelta(days=30)
# Certificates start an hour early: clocks of the seed and the shoot may differ a little.
BACKDATE = dt.timedelta(hours=1)
_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key", "previous-ca.crt", "last-rotation-initiation-time")
# The phases of a shoot's CA rotation (gardener pkg/apis/core/v1beta1 CredentialsRotationPhase).
PREPARING, COMPLETING = "Preparing", "Completing"


@dataclass(frozen=True)
class CARotation:
    """The shoot's CA rotation (status.credentials.rotation.certificateAuthorities)."""
    phase: str = ""
    last_initiation_time: str = ""


NO_ROTATION = CARotation()


@dataclass(frozen=True)
class WebhookCerts:
    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    # The CA before the last CA renewal, while it is valid (trusted during the roll).
    previous_ca: bytes = b""
    # The lastInitiationTime of the shoot CA rotation this CA was made for ("" if none).
    rotation_initiation: str = ""

    @property
    def ca_bundle(self) -> bytes:
        return self.ca_cert + self.previous_ca

    def secret_data(self) -> dict[str, str]:
        values = (self.ca_cert, self.ca_key, self.cert, self.key, self.previous_ca, self.rotation_initiation.encode())
        return {k: base64.b64encode(v).decode() for k, v in zip(_KEYS, values, strict=True) if v}

    @classmethod
    def from_secret_data(cls, data: dict[str, str]) -> WebhookCerts:
        raw = {k: base64.b64decode(data.get(k) or "") for k in _KEYS}
        return cls(raw["ca.crt"], raw["ca.key"], raw["tls.crt"], raw["tls.key"], raw["previous-ca.crt"],
                   raw["last-rotation-initiation-time"].decode())


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service (it uses <svc>.<ns>.svc)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _builder(subject: str, issuer: x509.Name | None, public_key: Any, now: dt.datetime,
             validity: dt.timedelta) -> x509.CertificateBuilder:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + validity))


def new_ca(now: dt.datetime) -> tuple[bytes, bytes]:
    """A self-signed CA (PEM certificate, PEM key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder("cri-resmgr-webhook-ca", None, key.public_key(), now, CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def new_serving_cert(ca_cert: bytes, ca_key: bytes, dns_names: list[str], now: dt.datetime) -> tuple[bytes, bytes]:
    """A serving certificate for ``dns_names`` signed by the CA (PEM certificate, PEM key)."""
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(dns_names[0], ca.subject, key.public_key(), now, SERVING_VALIDITY)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(signer, hashes.SHA256()))  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _expires_within(pem: bytes, margin: dt.timedelta, now: dt.datetime) -> bool:
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc - margin <= now


def _serving_fits(certs: WebhookCerts, dns_names: list[str], now: dt.datetime) -> str | None:
    """Why the serving certificate must be renewed, or None."""
    cert = x509.load_pem_x509_certificate(certs.cert)
    ca = x509.load_pem_x509_certificate(certs.ca_cert)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not signed by the CA"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    if sorted(sans) != sorted(dns_names):
        return f"names {sans} instead of {dns_names}"
    if _expires_within(certs.cert, SERVING_RENEW_BEFORE, now):
        return f"expires {cert.not_valid_after_utc.isoformat()}"
    return None


def _rotation_step(current: WebhookCerts, rotation: CARotation) -> tuple[WebhookCerts | None, str | None]:
    """What the shoot's CA rotation asks of ``current``: (certificates to keep instead, why) or (None, why a new CA
    is due) or (None, None) for nothing."""
    started = rotation.last_initiation_time
    if started and started != current.rotation_initiation:
        # A CA from before this code knew of rotations is adopted, not replaced, unless a rotation is starting now.
        if current.rotation_initiation or rotation.phase == PREPARING:
            return None, f"CA rotated with the shoot's CA rotation (started {started})"
        return replace(current, rotation_initiation=started), "CA adopted for the shoot's CA rotation state"
    if rotation.phase == COMPLETING and current.previous_ca:
        return replace(current, previous_ca=b""), "old CA dropped: the shoot's CA rotation is completing"
    return None, None


def ensure_certs(current: WebhookCerts | None, dns_names: list[str], now: dt.datetime | None = None,
                 rotation: CARotation = NO_ROTATION) -> tuple[WebhookCerts, str | None]:
    """The certificates to use and why they changed (None: ``current`` is kept as it is)."""
    now = now or dt.datetime.now(dt.UTC)
    reason: str | None = None
    if current is not None:
        try:
            changes = []
            kept, reason = _rotation_step(current, rotation)
            if kept is not None:  # the same CA, with what the rotation changed about it
                changes.append(reason)
                current, reason = kept, None
            if reason is None and _expires_within(current.ca_cert, CA_RENEW_BEFORE, now):
                reason = "CA renewed before expiry"
            if reason is None:
                unfit = _serving_fits(current, dns_names, now)
                if unfit is not None:
                    cert, key = new_serving_cert(current.ca_cert, current.ca_key, dns_names, now)
                    current = replace(current, cert=cert, key=key)
                    changes.append(f"serving certificate renewed: {unfit}")
                elif current.previous_ca and _expires_within(current.previous_ca, dt.timedelta(), now):
                    current = replace(current, previous_ca=b"")
                    changes.append("expired previous CA dropped")
                return current, "; ".join(changes) or None
        except (ValueError, TypeError, x509.ExtensionNotFound) as err:
            current, reason = None, f"stored certificates unreadable ({err})"
    ca_cert, ca_key = new_ca(now)
    cert, key = new_serving_cert(ca_cert, ca_key, dns_names, now)
    previous = current.ca_cert if current is not None else b""
    return WebhookCerts(ca_cert, ca_key, cert, key, previous, rotation.last_initiation_time), reason or "created"


def reconcile_secret(apis: Apis, namespace: str, dns_names: list[str], now: dt.datetime | None = None,
                     rotation: CARotation = NO_ROTATION) -> WebhookCerts:
    """The certificates from the seed Secret in the shoot namespace, created or renewed there when needed."""
    try:
        secret = apis.core.read_namespaced_secret(SECRET_NAME, namespace)
    except Exception as err:
        if not is_not_found(err):
            raise
        secret = None
    current = WebhookCerts.from_secret_data(secret.data or {}) if secret is not None else None
    certs, reason = ensure_certs(current, dns_names, now, rotation)
    if reason is None:
        return certs
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET_NAME, "namespace": namespace, "labels": {c.ORIGIN_LABEL: c.ORIGIN_VALUE}},
            "data": certs.secret_data()}
    if secret is None:
        apis.core.create_namespaced_secret(namespace, body)
    else:
        # Replace with the read resourceVersion: two reconciles racing cannot both write their own CA.
        body["metadata"]["resourceVersion"] = secret.metadata.resource_version
        apis.core.replace_namespaced_secret(SECRET_NAME, namespace, body)
    log.info("webhook certificates written: %s", reason, extra={"namespace": namespace, "secret": SECRET_NAME})
    return certs


def delete_secret(apis: Apis, namespace: str) -> None:
    """Remove the certificates (webhook disabled or extension deleted); absent is fine."""
    try:
        apis.core.delete_namespaced_secret(SECRET_NAME, namespace)
    except Exception as err:
        if not is_not_found(err):
            raise
        return
    log.info("webhook certificates deleted", extra={"namespace": namespace, "secret": SECRET_NAME})
