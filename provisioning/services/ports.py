"""An instance's user-added HTTP ports and the share links that open one port without a console session."""
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, NotFoundError, ValidationFailed
from tenancy.audit import audit_record

from .. import http_ports, selectors
from ..choices import InstanceState as S
from ..lock_objects import instance_lock
from ..models import PortShare

# Ports an instance's own services hold: its sshd.
RESERVED_PORTS = frozenset({22})
GONE = (S.TERMINATING, S.TERMINATED)


def _live_instance(*, org, instance_id):
    instance = instance_lock(instance_id=selectors.instance_get(org=org, instance_id=instance_id).pk)
    if instance.state in GONE:
        raise InvalidState(gettext("The instance is terminated."))
    return instance


def instance_port_add(*, org, instance_id, port: int, name: str = "", actor=None, request=None):
    """Declare one more HTTP port (a running container's is reached through its sshd until its next start
    publishes it)."""
    if port in RESERVED_PORTS:
        raise ValidationFailed(gettext("Port 22 is the instance's sshd."), details={"port": [gettext("Port 22 is reserved.")]})
    with transaction.atomic():
        instance = _live_instance(org=org, instance_id=instance_id)
        declared = selectors.instance_ports(instance=instance)
        if any(p["port"] == port for p in declared):
            raise InvalidState(gettext('Port %(port)s is already declared.') % {'port': port})
        if len(declared) >= settings.HTTP_PORTS_PER_INSTANCE:
            raise ValidationFailed(gettext("Too many ports."), details={
                "port": [gettext('An instance declares at most %(HTTP_PORTS_PER_INSTANCE)s ports.') % {'HTTP_PORTS_PER_INSTANCE': settings.HTTP_PORTS_PER_INSTANCE}]})
        instance.http_ports = [*instance.http_ports, {"port": port, "name": name}]
        instance.save(update_fields=["http_ports", "updated_at"])
        audit_record(action="instance.port_added", org=org, actor=actor, target=instance, request=request,
                     details={"port": port, "name": name})
    return instance


def instance_port_remove(*, org, instance_id, port: int, actor=None, request=None):
    """Forget a user-added port and revoke its share links (an image's port cannot be removed)."""
    with transaction.atomic():
        instance = _live_instance(org=org, instance_id=instance_id)
        kept = [p for p in instance.http_ports if p["port"] != port]
        if len(kept) == len(instance.http_ports):
            raise NotFoundError(gettext("No such user-added port."))
        instance.http_ports = kept
        instance.save(update_fields=["http_ports", "updated_at"])
        PortShare.objects.filter(instance=instance, port=port, revoked_at__isnull=True).update(revoked_at=db_now())
        audit_record(action="instance.port_removed", org=org, actor=actor, target=instance, request=request,
                     details={"port": port})
    return instance


def port_share_create(*, org, instance_id, port: int, expires_in: timedelta, actor=None, request=None):
    """A share link of one declared port, valid for `expires_in`: (row, secret). The secret is shown once."""
    if not timedelta(minutes=1) <= expires_in <= timedelta(days=settings.PORT_SHARE_MAX_DAYS):
        raise ValidationFailed(gettext("Bad expiry."), details={"expires_in_hours": [
            gettext('Between one minute and %(PORT_SHARE_MAX_DAYS)s days.') % {'PORT_SHARE_MAX_DAYS': settings.PORT_SHARE_MAX_DAYS}]})
    with transaction.atomic():
        instance = _live_instance(org=org, instance_id=instance_id)
        if not any(p["port"] == port for p in selectors.instance_ports(instance=instance)):
            raise NotFoundError(gettext("No such port on this instance."))
        secret = http_ports.share_secret()
        share = PortShare.objects.create(instance=instance, port=port, secret_hash=http_ports.secret_hash(secret),
                                         expires_at=db_now() + expires_in,
                                         created_by=actor if getattr(actor, "is_authenticated", False) else None)
        audit_record(action="instance.port_shared", org=org, actor=actor, target=instance, request=request,
                     details={"port": port, "share_id": str(share.pk), "expires_at": share.expires_at.isoformat()})
    return share, secret


def port_share_revoke(*, org, instance_id, share_id, actor=None, request=None) -> PortShare:
    """Stop a share link now (idempotent: a revoked link stays revoked at its first time)."""
    with transaction.atomic():
        share = selectors.port_share_get(org=org, instance_id=instance_id, share_id=share_id)
        share = PortShare.objects.select_for_update().get(pk=share.pk)
        if share.revoked_at is None:
            share.revoked_at = db_now()
            share.save(update_fields=["revoked_at"])
            audit_record(action="instance.port_share_revoked", org=org, actor=actor, target=share.instance,
                         request=request, details={"port": share.port, "share_id": str(share.pk)})
    return share
