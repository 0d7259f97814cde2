"""Reads of instances, always scoped to an organization (another tenant's id → 404)."""
import uuid
from typing import NamedTuple

from django.db import connection
from django.db.models import Prefetch, Q, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Now
from django.utils.translation import gettext

from billing.selectors import instance_cost_expressions
from core.dbclock import db_now
from core.errors import NotFoundError
from core.querysets import ParsedJSONField
from inventory.models import CardAllocation
from inventory.selectors import images_named
from storage.selectors import instance_storage_expressions

from . import http_ports
from .choices import InstanceKind, ReportScope
from .choices import InstanceState as S
from .models import HealthIncident, Instance, InstanceEvent, NodeGroup, PortShare, ReadinessReport
from .notices import instance_notice_expressions


def _live_groups():
    return Prefetch("groups", queryset=NodeGroup.objects.live()
                    .select_related("node__accelerator").order_by("item_index", "id"), to_attr="live_groups")


def instance_list(*, org, state: str | None = None):
    """The organization's instances, newest first, with their live node groups prefetched."""
    qs = Instance.objects.filter(organization=org).select_related("zone").prefetch_related(_live_groups())
    if state:
        qs = qs.filter(state__in=[s for s in state.split(",") if s])
    return qs.order_by("-created_at", "-id")


# The columns the API's instance body shows, in provisioning.api.rows.InstanceRow order: the instance's own, then,
# read in the same statement, its live node groups (_GROUPS), the sources of its notices (provisioning/notices.py),
# its volumes and datasets (storage), its cost so far and latest package period (billing), and the statement's
# clock (as text: parsed once, not once a row).
INSTANCE_BODY_COLUMNS = (
    "id", "name", "kind", "state", "state_reason", "items_json", "policy_json", "zone_id", "zone__slug", "image",
    "images_json",
    "billing", "package_renewal", "waitlist", "created_at", "ready_at", "price_per_hour", "sla_deadline",
    "sla_event_id", "sla_settled_event_id", "sla_compensation", "organization_id",
    "group_rows", "dark", "health", "volumes", "datasets", "cost", "package", "now")
# The live node groups as one JSON array of arrays in GroupRow order, by item index.
_GROUPS = """(SELECT json_agg(json_build_array(g.item_index, g.accelerator, g.card_indices, g.state, g.node_id,
                                         n.hostname, n.ssh_host, n.ssh_port, g.ssh_port, n.card_count, a.vendor)
                        ORDER BY g.item_index, g.id)
  FROM provisioning_nodegroup g JOIN inventory_node n ON n.id = g.node_id
    JOIN inventory_accelerator a ON a.id = n.accelerator_id
  WHERE g.instance_id = provisioning_instance.id AND g.released_at IS NULL)"""


def instance_list_rows(*, org, state: str | None = None, instance_id=None):
    """instance_list as tuples of INSTANCE_BODY_COLUMNS (no model objects): a page and its figures in one statement
    (the waitlist positions apart: waitlist_positions). `instance_id`: that instance only (an action's answer)."""
    qs = Instance.objects.filter(organization=org)
    if state:
        qs = qs.filter(state__in=[s for s in state.split(",") if s])
    if instance_id is not None:
        qs = qs.filter(pk=instance_id)
    # Plain SQL, not the ORM's expressions: built from those, the statement took longer to compile than to run.
    # The jsonb columns as json: parsed by the driver (core/db_loaders.py: orjson), not by JSONField's json.loads.
    as_json = {f"{c}_json": RawSQL(f"provisioning_instance.{c}::json", (), output_field=ParsedJSONField())
               for c in ("items", "policy", "images")}
    return (qs.annotate(group_rows=RawSQL(_GROUPS, (), output_field=ParsedJSONField()), **as_json,
                        **instance_notice_expressions(),
                        **instance_storage_expressions("provisioning_instance.id", org_id=org.pk),
                        **instance_cost_expressions("provisioning_instance.id"), now=Cast(Now(), TextField()))
            .order_by("-created_at", "-id").values_list(*INSTANCE_BODY_COLUMNS))  # paged by core.pagination


def instance_pk(instance_id) -> uuid.UUID:
    """An instance id from a URL as a UUID; 404 for a malformed one, as for another tenant's."""
    try:
        return instance_id if isinstance(instance_id, uuid.UUID) else uuid.UUID(str(instance_id))
    except ValueError:
        raise NotFoundError(gettext("No such instance.")) from None


def instance_get(*, org, instance_id) -> Instance:
    """One instance of the organization, or 404 (also for malformed ids and other tenants)."""
    try:
        return instance_list(org=org).get(pk=instance_pk(instance_id))
    except Instance.DoesNotExist:
        raise NotFoundError(gettext("No such instance.")) from None


def instance_names(*, org, ids) -> dict[str, str]:
    """{str(id): name} of the organization's instances among `ids` (other tenants' ids are left out); one query."""
    ids = {str(i) for i in ids if i}
    if not ids:
        return {}
    return {str(pk): name for pk, name in Instance.objects.filter(organization=org, pk__in=ids).values_list("pk", "name")}


def event_instances(*, org, event_ids) -> dict[str, tuple[str, str]]:
    """{str(event id): (str(instance id), instance name)} for the organization's instance events among `event_ids`
    (an SLA credit names its breach, the event of the create/start request); other tenants' are left out."""
    ids = set()
    for i in event_ids:
        try:
            ids.add(uuid.UUID(str(i)))
        except ValueError:
            continue
    if not ids:
        return {}
    rows = InstanceEvent.objects.filter(pk__in=ids, instance__organization=org).values_list(
        "pk", "instance_id", "instance__name")
    return {str(pk): (str(iid), name) for pk, iid, name in rows}


def instance_named(*, org, name: str) -> Instance | None:
    """The organization's newest instance called `name` that is not terminated (None when there is none)."""
    if not name:
        return None
    return (Instance.objects.filter(organization=org, name=name).exclude(state=S.TERMINATED)
            .order_by("-created_at", "-id").first())


def instance_events(*, instance: Instance):
    """The state history, oldest first."""
    return InstanceEvent.objects.filter(instance=instance).order_by("created_at", "id")


def instance_reports(*, instance: Instance):
    """Readiness reports, in the order they ran (not the platform's second passes after release)."""
    return (ReadinessReport.objects.filter(instance=instance).exclude(scope=ReportScope.SECOND_PASS)
            .select_related("node").order_by("id"))


def org_cards_in_use(*, org) -> int:
    """Cards with a live allocation held by the organization's instances (the quota's numerator)."""
    return CardAllocation.objects.live().filter(
        holder_id__in=Instance.objects.filter(organization=org).values("pk")).count()


def waitlist_nonempty() -> bool:
    """Whether any instance waits on the waitlist (one indexed read)."""
    return Instance.objects.filter(state=S.WAITLISTED).exists()


# A position is the instance's place among the waitlisted instances of its shape (waitlist_shape, which migration
# 0017 keeps as a generated column, the queues in a partial index), FIFO by waitlisted_at, created_at, id: only the
# queues of the given waitlisted instances are walked.
_POSITIONS = """
SELECT id, pos FROM (
  SELECT w.id, row_number() OVER (PARTITION BY w.waitlist_shape ORDER BY w.waitlisted_at, w.created_at, w.id) AS pos
  FROM provisioning_instance w
  WHERE w.state = 'waitlisted' AND w.waitlist_shape IN (
    SELECT p.waitlist_shape FROM provisioning_instance p WHERE p.id = ANY(%s) AND p.state = 'waitlisted')) q
WHERE id = ANY(%s)"""


def waitlist_positions(instances) -> dict:
    """{instance id: 1-based position in its queue} for the waitlisted ones among `instances` (rows or models); one
    query, none without a waitlisted one."""
    waiting = [i.pk for i in instances if i.state == S.WAITLISTED]
    if not waiting:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_POSITIONS, [waiting, waiting])
        return dict(cursor.fetchall())


def waitlist_shape(instance: Instance) -> tuple:
    """Kind, accelerators and counts, zone — or the policy (SPEC §3 first come, first served)."""
    if instance.items:
        mix = tuple(sorted((it["accelerator"], int(it["count"])) for it in instance.items))
    else:
        p = instance.policy or {}
        mix = ("policy", p.get("total_cards"), tuple(sorted(p.get("compatible_vendors", []))),
               p.get("min_domestic_share"))
    return (instance.kind, mix, str(instance.zone_id or ""))


WAIT_SAMPLE_DAYS = 7


def waitlist_wait_estimate(*, instance: Instance) -> tuple[int | None, int]:
    """(median seconds, samples) that recent waitlisted requests of the same kind and card type waited before
    capacity woke them, over the last WAIT_SAMPLE_DAYS days, across the platform (durations only: nothing of another
    tenant is named); (None, 0) without any. One query."""
    from datetime import timedelta
    from statistics import median

    from django.db.models import OuterRef, Subquery

    since = db_now() - timedelta(days=WAIT_SAMPLE_DAYS)
    woken = InstanceEvent.objects.filter(reason="woken: capacity freed", created_at__gte=since,
                                         instance__kind=instance.kind)
    slugs = sorted({it["accelerator"] for it in instance.items or ()})
    for slug in slugs:  # jsonb containment
        woken = woken.filter(instance__items__contains=[{"accelerator": slug}])
    joined = (InstanceEvent.objects.filter(instance_id=OuterRef("instance_id"), to_state=S.WAITLISTED,
                                           created_at__lte=OuterRef("created_at")).order_by("-created_at", "-id"))
    rows = woken.annotate(waited_from=Subquery(joined.values("created_at")[:1])).values_list("created_at",
                                                                                             "waited_from")
    waits = [(at - start).total_seconds() for at, start in rows if start is not None]
    return (int(median(waits)), len(waits)) if waits else (None, 0)


def instance_groups_live(*, instance) -> list[NodeGroup]:
    """The instance's live node groups with node → zone and accelerator, by item and id (one query)."""
    return list(NodeGroup.objects.live().filter(instance=instance)
                .select_related("node__zone", "node__accelerator").order_by("item_index", "id"))


def instance_health_incidents(*, instance) -> list[dict]:
    """The instance's card health incidents (services/health.py), newest first, with what a failed card's time
    was not charged: the page's "Card health" table. One query."""
    return [{"id": str(i.pk), "class": i.klass, "card": f"{i.card.node.hostname} card {i.card.index}",
             "detail": i.detail, "started_at": i.started_at, "failed_at": i.failed_at, "ended_at": i.ended_at,
             "outcome": i.outcome, "credited": i.credited, "uncharged": i.uncharged}
            for i in (HealthIncident.objects.filter(instance=instance).select_related("card__node")
                      .order_by("-started_at"))]


def gateway_instances(*, org_ids, ref: str) -> list[Instance]:
    """The live (not terminated) instances of these organizations that `ref` names at the SSH gateway: by name,
    by short id (the first 8 hex digits of its id) or by its whole id; newest first, with the organization."""
    ref = (ref or "").strip()
    if not ref or not org_ids:
        return []
    match = Q(name=ref)
    try:
        match |= Q(pk=uuid.UUID(ref))
    except ValueError:
        if len(ref) == 8 and all(c in "0123456789abcdef" for c in ref.lower()):
            match |= Q(id_text__startswith=ref.lower())  # the first 8 hex digits of its text
    return list(Instance.objects.filter(organization_id__in=list(org_ids)).exclude(state=S.TERMINATED)
                .annotate(id_text=Cast("id", TextField())).filter(match).select_related("organization")
                .order_by("-created_at", "-id")[:5])


def instance_state_of(*, instance_id, org_id) -> str | None:
    """The instance's state now (None once it is gone): a gateway session's recheck."""
    return Instance.objects.filter(pk=instance_id, organization_id=org_id).values_list("state", flat=True).first()


# --- HTTP ports and the proxy (http_ports.py) ------------------------------------------------------

class ProxyTarget(NamedTuple):
    """Where the proxy sends one port's requests, and the JupyterLab token it adds (None: not Jupyter's)."""

    instance_id: str
    port: int
    host: str
    upstream_port: int
    jupyter_token: str | None
    tunnel: "Tunnel | None" = None  # set: reached through the instance's sshd (console/port_tunnels.py)


class Tunnel(NamedTuple):
    """The instance's sshd a port not published on its container is reached through, as the platform key."""

    host: str
    port: int
    group_id: int
    host_key: str
    private_key: str


def instance_ports(*, instance) -> list[dict]:
    """The instance's declared HTTP ports (its images', then its users'): `path` is the prefix the app is served
    under, `url` where a browser opens it in the operator's proxy mode."""
    images = images_named(instance.images.values())
    jport = http_ports.jupyter_port(images)
    return [{**p, "path": http_ports.port_path(instance.pk, p["port"]), "url": http_ports.port_url(instance.pk, p["port"]),
             "jupyter": p["port"] == jport}
            for p in http_ports.declared_ports(instance, images)]


def instance_jupyter_port(*, instance) -> int | None:
    return http_ports.jupyter_port(images_named(instance.images.values()))


def port_shares(*, instance):
    """The instance's share links, newest first (revoked and expired ones too: the list shows them)."""
    return PortShare.objects.filter(instance=instance).order_by("-created_at")


def port_share_get(*, org, instance_id, share_id) -> PortShare:
    """One share link of the organization's instance, or 404."""
    instance = instance_get(org=org, instance_id=instance_id)
    try:
        return PortShare.objects.get(instance=instance, pk=uuid.UUID(str(share_id)))
    except (PortShare.DoesNotExist, ValueError):
        raise NotFoundError(gettext("No such share link.")) from None


def port_share_active(*, instance_id, port: int, secret: str) -> PortShare | None:
    """The live (unrevoked, unexpired) share link of this instance's port that `secret` opens, or None: the
    secret itself is the credential, so no organization scopes it."""
    if not secret:
        return None
    try:
        instance_id = uuid.UUID(str(instance_id))
    except ValueError:
        return None
    return (PortShare.objects.filter(instance_id=instance_id, port=port, secret_hash=http_ports.secret_hash(secret),
                                     revoked_at__isnull=True, expires_at__gt=db_now())
            .select_related("instance").first())


def proxy_target(*, instance, port: int) -> ProxyTarget:
    """Where `port` of a running instance is reached; 404 for a port it does not declare, an instance not
    running, or a port its container did not publish."""
    declared = {p["port"]: p for p in instance_ports(instance=instance)}
    if instance.state != S.RUNNING or port not in declared:
        raise NotFoundError(gettext("No such port on a running instance."))
    head = _head_group(instance)
    where = http_ports.upstream(instance.kind, head, port) if head else None
    tunnel = None
    if where is None and head is not None and head.ssh_port:
        # Added after the container started (Docker cannot publish a port on a running container): through its sshd.
        from .platform_keys import platform_private_key

        endpoint = instance_ssh_endpoint(instance=instance)
        tunnel = Tunnel(endpoint.host, endpoint.port, endpoint.group_id, endpoint.host_key,
                        platform_private_key(instance))
        where = (endpoint.host, port)
    if where is None:
        raise NotFoundError(gettext("This port is not published on the instance's container; restart the instance."))
    token = http_ports.jupyter_token(instance.pk) if declared[port]["jupyter"] else None
    return ProxyTarget(str(instance.pk), port, where[0], where[1], token, tunnel)


def _head_group(instance):
    return (NodeGroup.objects.live().filter(instance=instance).select_related("node")
            .order_by("item_index", "id").first())


class SshEndpoint(NamedTuple):
    host: str
    port: int
    group_id: int
    host_key: str  # pinned ("" none yet: provisioning/host_keys.py)


def instance_ssh_endpoint(*, instance) -> SshEndpoint:
    """The sshd of the instance's head group (the web terminal's way in) and its host key; 404 when unplaced."""
    head = _head_group(instance)
    if head is None:
        raise NotFoundError(gettext("The instance is not placed on a node."))
    host = head.node.ssh_host or head.node.hostname
    own_network = instance.kind == InstanceKind.CONTAINER and head.ssh_port
    return SshEndpoint(host, head.ssh_port if own_network else head.node.ssh_port, head.pk, head.ssh_host_key)


def instance_state(*, instance_id) -> str | None:
    """The instance's state now (None: gone), for a connection that must end when it stops."""
    return Instance.objects.filter(pk=instance_id).values_list("state", flat=True).first()


def instance_list_page(*, org, state: str | None = None):
    """The console's instance list: the organization's instances as instance_list orders and filters them, with only
    the columns its table shows and no node groups (it shows none), and in the same statement each row's `cost` so
    far and the sources of its notices, `dark` and `health` (notices.notices_of_row): a page of full rows with their
    groups, then a query for their costs and two for their notices, cost three times what the table needs."""
    qs = Instance.objects.filter(organization=org).only(
        "id", "organization_id", "name", "kind", "state", "items", "policy", "billing", "price_per_hour", "created_at")
    if state:
        qs = qs.filter(state__in=[s for s in state.split(",") if s])
    cost = instance_cost_expressions("provisioning_instance.id")["cost"]
    return qs.annotate(cost=cost, **instance_notice_expressions()).order_by("-created_at", "-id")
