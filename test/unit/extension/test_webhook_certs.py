"""The webhook's certificates: created once, kept while good, renewed before expiry, the old CA trusted meanwhile."""

from __future__ import annotations

import datetime as dt

from cryptography import x509

from extension.webhook_certs import (
    CA_RENEW_BEFORE,
    CA_VALIDITY,
    SERVING_RENEW_BEFORE,
    SERVING_VALIDITY,
    WebhookCerts,
    ensure_certs,
)

NAMES = ["svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local"]
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def bundle(certs: WebhookCerts) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(certs.ca_bundle)


def test_created_certificate_serves_the_service_names_and_chains_to_the_bundle():
    certs, reason = ensure_certs(None, NAMES, NOW)
    assert reason == "created"
    serving = cert(certs.cert)
    assert serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.DNSName) == NAMES
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in serving.extensions.get_extension_for_class(
        x509.ExtendedKeyUsage).value
    serving.verify_directly_issued_by(bundle(certs)[0])
    assert serving.not_valid_before_utc < NOW < serving.not_valid_after_utc
    assert cert(certs.ca_cert).extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert WebhookCerts.from_secret_data(certs.secret_data()) == certs


def test_kept_while_valid():
    certs, _ = ensure_certs(None, NAMES, NOW)
    later = NOW + SERVING_VALIDITY - SERVING_RENEW_BEFORE - dt.timedelta(days=1)
    assert ensure_certs(certs, NAMES, later) == (certs, None)


def test_serving_certificate_renewed_before_expiry_with_the_same_ca():
    certs, _ = ensure_certs(None, NAMES, NOW)
    later = NOW + SERVING_VALIDITY - SERVING_RENEW_BEFORE + dt.timedelta(days=1)
    renewed, reason = ensure_certs(certs, NAMES, later)
    assert reason.startswith("serving certificate renewed: expires")
    assert renewed.ca_cert == certs.ca_cert and renewed.cert != certs.cert
    assert cert(renewed.cert).not_valid_after_utc > later + SERVING_RENEW_BEFORE
    cert(renewed.cert).verify_directly_issued_by(bundle(renewed)[0])


def test_other_names_renew_the_serving_certificate():
    certs, _ = ensure_certs(None, NAMES, NOW)
    renewed, reason = ensure_certs(certs, ["other.ns.svc"], NOW)
    assert "names" in reason and renewed.ca_cert == certs.ca_cert


def test_ca_renewal_keeps_the_old_ca_in_the_bundle_until_it_expires():
    certs, _ = ensure_certs(None, NAMES, NOW)
    near_ca_end = NOW + CA_VALIDITY - CA_RENEW_BEFORE + dt.timedelta(days=1)
    renewed, reason = ensure_certs(certs, NAMES, near_ca_end)
    assert reason == "CA renewed before expiry"
    assert [c.subject for c in bundle(renewed)] == [cert(renewed.ca_cert).subject, cert(certs.ca_cert).subject]
    assert renewed.previous_ca == certs.ca_cert
    after_old_ca = NOW + CA_VALIDITY + dt.timedelta(days=1)
    cleaned, reason = ensure_certs(renewed, NAMES, after_old_ca)
    assert reason == "expired previous CA dropped" and cleaned.previous_ca == b""
    assert cleaned.ca_cert == renewed.ca_cert


def test_unreadable_secret_data_starts_over():
    broken = WebhookCerts(b"junk", b"junk", b"junk", b"junk")
    certs, reason = ensure_certs(broken, NAMES, NOW)
    assert reason.startswith("stored certificates unreadable")
    cert(certs.cert).verify_directly_issued_by(cert(certs.ca_cert))
