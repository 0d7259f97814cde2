"""An organization's export: one ZIP of CSV and JSON files with everything it has — its members, instances and
their events, ledger lines, monthly statements (the same bytes as the API's CSV), audit log, volumes, API tokens
(no secrets) and the fingerprints of its members' SSH keys. Owners and admins take it; the download is audited."""
import csv
import io
import json
import zipfile

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from billing.api.serializers import TransferLineSerializer
from billing.products.statement_formats import statement_csv
from billing.products.statements import statement_build, statement_months
from billing.selectors import balance_summary, transfer_list
from core.money import format_ucny
from provisioning.models import Instance, InstanceEvent
from storage.models import Volume
from tenancy.api.serializers import AuditEventSerializer
from tenancy.audit import audit_record
from tenancy.models import ApiToken, AuditEvent, Membership, SshKey

README = """Cardmix export of {name} ({slug}), made {at} UTC.

Money is CNY with six decimals (µCNY exact), times are UTC ISO-8601, as in the API (/api/v1/).
organization.json   the organization, its members, balance and real-name status
members.csv         members and their roles
instances.csv       every instance (GET /api/v1/instances/), instance_events.csv their state changes
transfers.csv       every ledger line (GET /api/v1/billing/transfers/)
statements/*.csv    each month's statement (GET /api/v1/billing/statements/<month>.csv, the same bytes)
audit_events.csv    the audit log (GET /api/v1/audit-events/)
volumes.csv         volumes; api_tokens.csv tokens (never their secrets); ssh_keys.csv members' key fingerprints
"""


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, sort_keys=True)
    if hasattr(value, "isoformat"):
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def _csv(columns: list[str], rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return out.getvalue().encode()


INSTANCE_COLUMNS = ["id", "name", "kind", "state", "state_reason", "items", "policy", "image", "images", "billing",
                    "package_renewal", "price_per_hour", "zone", "creator_email", "created_at", "ready_at",
                    "terminated_at"]


def _instances(org):
    for i in Instance.objects.filter(organization=org).select_related("zone", "creator").order_by("created_at", "id"):
        yield {"id": i.pk, "name": i.name, "kind": i.kind, "state": i.state, "state_reason": i.state_reason,
               "items": i.items, "policy": i.policy, "image": i.image, "images": i.images, "billing": i.billing,
               "package_renewal": i.package_renewal, "price_per_hour": format_ucny(i.price_per_hour),
               "zone": i.zone.slug if i.zone else None, "creator_email": i.creator.email if i.creator else None,
               "created_at": i.created_at, "ready_at": i.ready_at, "terminated_at": i.terminated_at}


def _events(org):
    rows = (InstanceEvent.objects.filter(instance__organization=org).select_related("actor")
            .order_by("created_at", "id"))
    for e in rows:
        yield {"instance_id": e.instance_id, "from_state": e.from_state, "to_state": e.to_state, "reason": e.reason,
               "actor_email": e.actor.email if e.actor else None, "created_at": e.created_at}


def _members(org):
    for m in Membership.objects.filter(organization=org).select_related("user").order_by("created_at"):
        yield {"id": m.pk, "email": m.user.email, "name": m.user.name, "role": m.role, "created_at": m.created_at}


def organization_export(*, org, actor, request=None) -> bytes:
    """The ZIP's bytes (built in memory: an organization's rows fit; the statements are per month)."""
    now = timezone.now()
    members = list(_members(org))
    summary = balance_summary(org=org)
    org_json = {"id": org.pk, "name": org.name, "slug": org.slug, "is_personal": org.is_personal,
                "card_quota": org.card_quota, "created_at": org.created_at,
                "real_name_verified_at": org.real_name_verified_at, "members": members,
                "balance": {k: (format_ucny(v) if isinstance(v, int) and not isinstance(v, bool) else v)
                            for k, v in summary.items() if not isinstance(v, dict | list)},
                "exported_at": now}
    transfers = TransferLineSerializer(transfer_list(org=org), many=True, context={"org": org}).data
    audit = AuditEventSerializer(AuditEvent.objects.filter(organization=org).select_related("actor")
                                 .order_by("created_at", "id"), many=True).data
    user_ids = [m["id"] for m in members]
    keys = (SshKey.objects.filter(user__memberships__organization=org).select_related("user")
            .order_by("user__email", "created_at"))
    tokens = ApiToken.objects.filter(organization=org).select_related("user").order_by("created_at")
    volumes = Volume.objects.filter(organization=org).select_related("zone").order_by("created_at")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("README.txt", README.format(name=org.name, slug=org.slug, at=now.strftime("%Y-%m-%d %H:%M")))
        z.writestr("organization.json", json.dumps(org_json, cls=DjangoJSONEncoder, ensure_ascii=False, indent=2))
        z.writestr("members.csv", _csv(["id", "email", "name", "role", "created_at"], members))
        z.writestr("instances.csv", _csv(INSTANCE_COLUMNS, _instances(org)))
        z.writestr("instance_events.csv", _csv(["instance_id", "from_state", "to_state", "reason", "actor_email",
                                                "created_at"], _events(org)))
        z.writestr("transfers.csv", _csv(list(TransferLineSerializer().fields), transfers))
        for month in statement_months(org=org):
            z.writestr(f"statements/{month}.csv", statement_csv(statement_build(org=org, month=month)))
        z.writestr("audit_events.csv", _csv(list(AuditEventSerializer().fields), audit))
        z.writestr("volumes.csv", _csv(["id", "name", "kind", "size_gib", "zone", "state", "created_at"], (
            {"id": v.pk, "name": v.name, "kind": v.kind, "size_gib": v.size_gib, "zone": v.zone.slug,
             "state": v.state, "created_at": v.created_at} for v in volumes)))
        z.writestr("api_tokens.csv", _csv(["id", "user_email", "name", "prefix", "scope", "created_at", "expires_at",
                                           "last_used_at", "revoked_at"], (
            {"id": t.pk, "user_email": t.user.email, "name": t.name, "prefix": t.prefix, "scope": t.scope,
             "created_at": t.created_at, "expires_at": t.expires_at, "last_used_at": t.last_used_at,
             "revoked_at": t.revoked_at} for t in tokens)))
        z.writestr("ssh_keys.csv", _csv(["user_email", "name", "key_type", "fingerprint", "created_at"], (
            {"user_email": k.user.email, "name": k.name, "key_type": k.key_type, "fingerprint": k.fingerprint,
             "created_at": k.created_at} for k in keys)))
    audit_record(action="organization.export", org=org, actor=actor, target=org, request=request,
                 details={"members": len(user_ids), "bytes": buffer.tell()})
    return buffer.getvalue()
