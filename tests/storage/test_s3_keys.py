"""S3 object access to shared volumes against a real S3 + IAM server on loopback (moto's server, with IAM
authentication enforced: INITIAL_NO_AUTH_ACTION_COUNT lets only the set-up of the operator's admin user through).

A key created through the API can put and get objects in its volume's bucket, is refused once revoked, and is
refused by another volume's bucket; the secret is in the create response only and stored as a hash."""
import hashlib
import json
import os

import boto3
import pytest
from botocore.exceptions import ClientError
from django.conf import settings
from django.test import override_settings

from storage.access_keys import VolumeAccessKey
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.inventory import ZoneFactory
from tests.factories.storage import make_volume

pytestmark = pytest.mark.django_db

def s3_as(url, key_id, secret):
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=key_id,
                        aws_secret_access_key=secret)


def refused(call) -> str:
    with pytest.raises(ClientError) as exc:
        call()
    return exc.value.response["Error"]["Code"]


@pytest.fixture
def owner(member_factory, session_client_for):
    membership = member_factory(role="owner")
    fund(membership.organization, 1_000_000_000)
    return membership, session_client_for(membership)


def test_a_key_puts_and_gets_in_its_bucket_and_is_refused_after_revocation(s3, owner):
    membership, client = owner
    zone = ZoneFactory()
    volume = make_volume(membership.organization, zone, name="ckpt", kind="shared", size_gib=50)
    other = make_volume(membership.organization, zone, name="other", kind="shared", size_gib=10)

    r = client.post(f"/api/v1/volumes/{volume.pk}/keys/", {"name": "trainer"}, format="json")
    assert r.status_code == 201, r.json()
    created = r.json()
    secret, key_id, bucket = created["secret_access_key"], created["access_key_id"], created["bucket"]
    assert bucket == f"cardmix-{volume.pk}" and created["endpoint_url"] == s3
    row = VolumeAccessKey.objects.get(access_key_id=key_id)
    assert row.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(list(VolumeAccessKey.objects.values()), default=str)  # only its hash is kept
    assert AuditEvent.objects.filter(action="volume.access_key_create", target_id=str(volume.pk)).exists()

    listed = client.get(f"/api/v1/volumes/{volume.pk}/keys/").json()["results"]
    assert [k["access_key_id"] for k in listed] == [key_id] and "secret_access_key" not in listed[0]
    assert "secret_access_key" not in client.get(f"/api/v1/volumes/{volume.pk}/keys/{row.pk}/").json()

    tenant = s3_as(s3, key_id, secret)
    payload = os.urandom(4096) + b"\x00checkpoint"
    tenant.put_object(Bucket=bucket, Key="run-1/step-100.pt", Body=payload)
    assert tenant.get_object(Bucket=bucket, Key="run-1/step-100.pt")["Body"].read() == payload

    # Another volume's bucket refuses this key (its own key works there).
    other_key = client.post(f"/api/v1/volumes/{other.pk}/keys/", {}, format="json").json()
    s3_as(s3, other_key["access_key_id"], other_key["secret_access_key"]).put_object(
        Bucket=other_key["bucket"], Key="x", Body=b"x")
    assert refused(lambda: tenant.put_object(Bucket=other_key["bucket"], Key="y", Body=b"y")) == "AccessDenied"
    assert refused(lambda: tenant.get_object(Bucket=other_key["bucket"], Key="x")) == "AccessDenied"

    assert client.delete(f"/api/v1/volumes/{volume.pk}/keys/{row.pk}/").status_code == 204
    assert refused(lambda: tenant.get_object(Bucket=bucket, Key="run-1/step-100.pt")) == "InvalidAccessKeyId"
    assert refused(lambda: tenant.put_object(Bucket=bucket, Key="z", Body=b"z")) == "InvalidAccessKeyId"
    assert client.get(f"/api/v1/volumes/{volume.pk}/keys/").json()["results"] == []
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert AuditEvent.objects.filter(action="volume.access_key_revoke", target_id=str(volume.pk)).exists()
    # The data stays: the operator's credentials still read it.
    operator = s3_as(s3, settings.S3_ADMIN_ACCESS_KEY_ID, settings.S3_ADMIN_SECRET_ACCESS_KEY)
    assert operator.get_object(Bucket=bucket, Key="run-1/step-100.pt")["Body"].read() == payload


def test_only_shared_volumes_have_keys_and_other_organizations_get_404(s3, owner, member_factory,
                                                                        session_client_for):
    membership, client = owner
    zone = ZoneFactory()
    disk = make_volume(membership.organization, zone, name="disk", kind="disk", size_gib=10)
    r = client.post(f"/api/v1/volumes/{disk.pk}/keys/", {}, format="json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"

    shared = make_volume(membership.organization, zone, name="shared", kind="shared", size_gib=10)
    r = client.post(f"/api/v1/volumes/{shared.pk}/keys/", {"nmae": "typo"}, format="json")
    assert r.status_code == 400 and "nmae" in json.dumps(r.json())
    assert not VolumeAccessKey.objects.exists()
    key = client.post(f"/api/v1/volumes/{shared.pk}/keys/", {}, format="json").json()

    stranger = session_client_for(member_factory(role="owner"))
    assert stranger.get(f"/api/v1/volumes/{shared.pk}/keys/").status_code == 404
    assert stranger.post(f"/api/v1/volumes/{shared.pk}/keys/", {}, format="json").status_code == 404
    assert stranger.delete(f"/api/v1/volumes/{shared.pk}/keys/{key['id']}/").status_code == 404
    assert VolumeAccessKey.objects.get(pk=key["id"]).revoked_at is None


def test_no_endpoint_configured_is_a_clear_503(owner):
    membership, client = owner
    shared = make_volume(membership.organization, ZoneFactory(), name="shared", kind="shared", size_gib=10)
    with override_settings(S3_ENDPOINT_URL=""):
        r = client.post(f"/api/v1/volumes/{shared.pk}/keys/", {}, format="json")
    assert r.status_code == 503 and r.json()["error"]["code"] == "service_unavailable"
    assert not VolumeAccessKey.objects.exists()
