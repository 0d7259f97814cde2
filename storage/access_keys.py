"""S3 object access to shared volumes: a bucket per volume on the operator's S3-compatible endpoint (MinIO, Ceph
RGW, a cloud's), and per-volume access keys the organization creates, lists and revokes.

Each key is an IAM user of its own with one inline policy: every S3 action on its volume's bucket and nothing
else, so another volume's bucket refuses it and a revoked key (user, policy and access key deleted) is refused
everywhere. The secret is shown once, at create; only its SHA-256 is kept (the S3 endpoint holds the secret
itself, as SigV4 needs), so a database dump gives nothing to sign with.
"""
import hashlib
import json
import logging
import uuid

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, NotFoundError, QuotaExceeded, ServiceUnavailable, ValidationFailed
from tenancy.audit import audit_record

from .choices import VolumeKind, VolumeState

logger = logging.getLogger("cardmix.storage")


class VolumeAccessKey(models.Model):
    """One S3 access key of a shared volume (its IAM user), from create until revoked."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    volume = models.ForeignKey("storage.Volume", on_delete=models.PROTECT, related_name="access_keys")
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    access_key_id = models.CharField(max_length=128, unique=True)
    secret_sha256 = models.CharField(max_length=64)  # of the secret shown once; never the secret
    iam_user = models.CharField(max_length=64)
    bucket = models.CharField(max_length=63)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "storage"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["volume"], condition=Q(revoked_at__isnull=True), name="access_key_live_idx")]

    def __str__(self):
        return f"{self.access_key_id} ({self.volume_id})"


# -- the S3 endpoint ---------------------------------------------------------------------------

def s3_configured() -> bool:
    return bool(settings.S3_ENDPOINT_URL and settings.S3_ADMIN_ACCESS_KEY_ID)


def _client(service: str, *, key_id=None, secret=None):
    import boto3  # the SDK loads lazily: most processes (the tick, the agent API) never talk S3
    from botocore.config import Config

    return boto3.client(service, endpoint_url=settings.S3_ENDPOINT_URL, region_name=settings.S3_REGION,
                        aws_access_key_id=key_id or settings.S3_ADMIN_ACCESS_KEY_ID,
                        aws_secret_access_key=secret or settings.S3_ADMIN_SECRET_ACCESS_KEY,
                        config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2},
                                      s3={"addressing_style": "path"}))


def volume_bucket(volume) -> str:
    """The volume's bucket name (lowercase, ≤ 63 characters, as S3 requires)."""
    return f"{settings.S3_BUCKET_PREFIX}{volume.pk}"[:63]


def bucket_policy(bucket: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": "s3:*", "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]})


def _unavailable(exc) -> ServiceUnavailable:
    logger.warning("S3 endpoint %s failed: %s", settings.S3_ENDPOINT_URL, exc)
    return ServiceUnavailable(gettext("The object storage endpoint did not answer; try again."),
                              details={"endpoint": settings.S3_ENDPOINT_URL})


def bucket_ensure(volume) -> str:
    """Create the volume's bucket through the S3 API (one that exists already will do). → its name"""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket = volume_bucket(volume)
    try:
        _client("s3").create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise _unavailable(exc) from exc
    except BotoCoreError as exc:
        raise _unavailable(exc) from exc
    return bucket


def _iam_user_drop(iam, user: str, access_key_id: str | None) -> None:
    """Delete an IAM user with its key and policy; parts already gone count as deleted."""
    from botocore.exceptions import ClientError

    steps = [lambda: iam.delete_user_policy(UserName=user, PolicyName="volume-bucket"), lambda: iam.delete_user(
        UserName=user)]
    if access_key_id:
        steps.insert(0, lambda: iam.delete_access_key(UserName=user, AccessKeyId=access_key_id))
    for step in steps:
        try:
            step()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchEntity":
                raise


# -- reads -------------------------------------------------------------------------------------

def access_key_list(*, volume, include_revoked: bool = False):
    """A volume's keys, newest first (the volume comes from a tenant-scoped selector)."""
    qs = VolumeAccessKey.objects.filter(volume=volume, organization_id=volume.organization_id)
    return qs if include_revoked else qs.filter(revoked_at__isnull=True)


def access_key_get(*, volume, key_id) -> VolumeAccessKey:
    """One of the volume's keys by id or access key id; anything else (another volume's) is 404."""
    try:
        by = Q(pk=uuid.UUID(str(key_id))) | Q(access_key_id=str(key_id))
    except ValueError:
        by = Q(access_key_id=str(key_id))
    key = access_key_list(volume=volume, include_revoked=True).filter(by).first()
    if key is None:
        raise NotFoundError(gettext("Access key not found."))
    return key


# -- writes ------------------------------------------------------------------------------------

def access_key_create(*, volume, name: str = "", actor=None, request=None) -> tuple[VolumeAccessKey, str]:
    """A new key for a shared volume: its bucket ensured, an IAM user limited to it, the key. → (key, secret);
    the secret is shown this once."""
    if not s3_configured():
        raise ServiceUnavailable(gettext("Object access is not configured on this platform (S3_ENDPOINT_URL)."))
    if volume.kind != VolumeKind.SHARED:
        raise ValidationFailed(gettext("Only shared volumes have object access."), details={"volume": [gettext("Not a shared volume.")]})
    if volume.state != VolumeState.READY:
        raise InvalidState(gettext("The volume is not ready."), details={"state": volume.state})
    if access_key_list(volume=volume).count() >= settings.S3_KEYS_PER_VOLUME:
        raise QuotaExceeded(gettext('A volume has at most %(S3_KEYS_PER_VOLUME)s access keys; revoke one first.') % {'S3_KEYS_PER_VOLUME': settings.S3_KEYS_PER_VOLUME})
    from botocore.exceptions import BotoCoreError, ClientError

    bucket = bucket_ensure(volume)
    iam, user, made = _client("iam"), f"cmx-{uuid.uuid4()}", None
    try:
        iam.create_user(UserName=user, Tags=[{"Key": "cardmix-volume", "Value": str(volume.pk)}])
        iam.put_user_policy(UserName=user, PolicyName="volume-bucket", PolicyDocument=bucket_policy(bucket))
        made = iam.create_access_key(UserName=user)["AccessKey"]
        with transaction.atomic():
            key = VolumeAccessKey.objects.create(
                volume=volume, organization_id=volume.organization_id, name=name[:100], bucket=bucket, iam_user=user,
                access_key_id=made["AccessKeyId"], created_by=actor if getattr(actor, "pk", None) else None,
                secret_sha256=hashlib.sha256(made["SecretAccessKey"].encode()).hexdigest())
            audit_record(action="volume.access_key_create", actor=actor, request=request, target=volume,
                         details={"access_key_id": key.access_key_id, "bucket": bucket, "name": key.name})
    except (ClientError, BotoCoreError) as exc:
        _cleanup(iam, user, made)
        raise _unavailable(exc) from exc
    except Exception:
        _cleanup(iam, user, made)  # a key the database does not know must not stay usable
        raise
    return key, made["SecretAccessKey"]


def _cleanup(iam, user, made) -> None:
    try:
        _iam_user_drop(iam, user, made["AccessKeyId"] if made else None)
    except Exception:
        logger.exception("could not remove IAM user %s after a failed key create", user)


def access_key_revoke(*, volume, key_id, actor=None, request=None) -> VolumeAccessKey:
    """Revoke a key: its IAM user, policy and key are deleted at the endpoint first, then the row is marked, so a
    key shown as revoked is refused. Revoking a revoked key changes nothing."""
    from botocore.exceptions import BotoCoreError, ClientError

    key = access_key_get(volume=volume, key_id=key_id)
    if key.revoked_at is not None:
        return key
    try:
        _iam_user_drop(_client("iam"), key.iam_user, key.access_key_id)
    except (ClientError, BotoCoreError) as exc:
        raise _unavailable(exc) from exc
    with transaction.atomic():
        updated = VolumeAccessKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=db_now())
        if updated:
            audit_record(action="volume.access_key_revoke", actor=actor, request=request, target=volume,
                         details={"access_key_id": key.access_key_id})
    key.refresh_from_db()
    return key


def access_keys_revoke_all(*, volume, actor=None) -> int:
    """Every live key of a volume (its deletion): → how many were revoked."""
    keys = list(access_key_list(volume=volume))
    for key in keys:
        access_key_revoke(volume=volume, key_id=key.pk, actor=actor)
    return len(keys)
