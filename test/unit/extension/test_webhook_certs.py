"""The webhook's certificates: created once, kept while good, renewed before expiry, the old CA trusted meanwhile."""

from __future__ import annotations

import datetime as dt

from cryptography import x509

from extension.webhook_certs import (
    CA_RENEW_BEFORE,
    CA_VALIDITY,
    SERVING_RENEW_BEFORE,
    SERVING_VALIDITY,
    CARotation,
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


STARTED = "2026-03-01T10:00:00Z"


def test_the_shoots_ca_rotation_brings_a_new_ca_and_drops_the_old_one_when_completing():
    """As Gardener's extensions secrets manager: a new CA for a new lastInitiationTime, the old one trusted
    until the rotation's Completing phase, then dropped; nothing more while the phase stays."""
    before, _ = ensure_certs(None, NAMES, NOW)
    preparing, reason = ensure_certs(before, NAMES, NOW, CARotation("Preparing", STARTED))
    assert reason == f"CA rotated with the shoot's CA rotation (started {STARTED})"
    assert preparing.ca_cert != before.ca_cert and preparing.previous_ca == before.ca_cert
    cert(preparing.cert).verify_directly_issued_by(bundle(preparing)[0])
    assert [c.subject for c in bundle(preparing)] == [cert(preparing.ca_cert).subject, cert(before.ca_cert).subject]
    # Prepared: the same rotation seen again changes nothing.
    assert ensure_certs(preparing, NAMES, NOW, CARotation("Prepared", STARTED)) == (preparing, None)
    completing, reason = ensure_certs(preparing, NAMES, NOW, CARotation("Completing", STARTED))
    assert reason == "old CA dropped: the shoot's CA rotation is completing"
    assert completing.ca_bundle == preparing.ca_cert and completing.cert == preparing.cert
    assert ensure_certs(completing, NAMES, NOW, CARotation("Completed", STARTED)) == (completing, None)
    # The initiation time survives the Secret.
    assert WebhookCerts.from_secret_data(completing.secret_data()) == completing


def test_a_ca_renewed_on_its_own_keeps_its_predecessor_through_a_completed_rotation():
    """Only the Completing phase drops an old CA: one renewed before expiry stays trusted until it expires."""
    first, _ = ensure_certs(None, NAMES, NOW, CARotation("Completed", STARTED))
    renewed, reason = ensure_certs(first, NAMES, NOW + CA_VALIDITY - CA_RENEW_BEFORE, CARotation("Completed", STARTED))
    assert reason == "CA renewed before expiry" and renewed.previous_ca == first.ca_cert
    assert renewed.rotation_initiation == STARTED  # no rotation of its own on the next reconcile
    later = NOW + CA_VALIDITY - CA_RENEW_BEFORE
    assert ensure_certs(renewed, NAMES, later, CARotation("Completed", STARTED))[1] is None


def test_certificates_from_before_rotations_were_followed_are_adopted_not_replaced():
    """A Secret without the initiation time (written by an older version) takes the shoot's current rotation as
    its own, unless that rotation is just starting."""
    old, _ = ensure_certs(None, NAMES, NOW)
    assert old.rotation_initiation == ""
    adopted, reason = ensure_certs(old, NAMES, NOW, CARotation("Completed", STARTED))
    assert reason == "CA adopted for the shoot's CA rotation state"
    assert adopted.ca_cert == old.ca_cert and adopted.rotation_initiation == STARTED
    rotated, _ = ensure_certs(old, NAMES, NOW, CARotation("Preparing", STARTED))
    assert rotated.ca_cert != old.ca_cert and rotated.previous_ca == old.ca_cert
