"""Notices on the instance body (`notices`): what the users of an instance must know now that its state does not
say. `node_unreachable`, while a node holding its cards is silent (hardware.heartbeats_check marked it), read live
from the node's state, so it shows the moment the node is marked and goes the moment it is back; `card_failed` and
`card_degraded`, while a health incident of one of its cards is open (services/health.py)."""
from datetime import timedelta

from django.conf import settings
from django.db.models.expressions import RawSQL
from django.utils.translation import gettext

from core.querysets import ParsedJSONField
from hardware.models import NodeCredential
from hardware.services import UNREACHABLE_REASON
from inventory.choices import NodeState

from .choices import InstanceKind
from .choices import InstanceState as S


def instance_notices(instances) -> dict:
    """{instance id: [notice]} for the running ones among `instances` (rows or models); one query, none when
    nothing runs."""
    running = [i.pk for i in instances if i.state == S.RUNNING]
    if not running:
        return {}
    from .models import HealthIncident, NodeGroup

    kinds = {i.pk: (i.kind, i.billing) for i in instances}
    found: dict = {}
    rows = (NodeGroup.objects.live().filter(instance_id__in=running,
                                            node__agent_credential__node_id__in=_dark_node_ids())
            .values_list("instance_id", "node__hostname", "node__agent_credential__last_heartbeat_at"))
    for instance_id, hostname, last in rows:
        found.setdefault(instance_id, {})[hostname] = last
    notices = {iid: [notice_node_unreachable(node=host, since=last, kind=kinds[iid][0], billing=kinds[iid][1])
                     for host, last in sorted(nodes.items())] for iid, nodes in found.items()}
    for incident in (HealthIncident.objects.filter(instance_id__in=running, ended_at__isnull=True)
                     .select_related("card__node").order_by("started_at", "card_id")):
        kind, billing = kinds[incident.instance_id]
        notices.setdefault(incident.instance_id, []).append(notice_card_health(incident, kind=kind, billing=billing))
    return notices


def notice_card_health(incident, *, kind: str, billing: str) -> dict:
    """The notice of one card's open health incident: failed (not charged from `since`; a container may move to
    healthy cards, `action` "move") or degraded (charged, and not handed out again once released)."""
    return _card_notice(incident.card.node.hostname, incident.card.index, incident.started_at, incident.failed_at,
                        incident.detail, kind=kind, billing=billing)


def _card_notice(hostname: str, index: int, started_at, failed_at, detail: str, *, kind: str, billing: str) -> dict:
    # `message` is for people, in the request's language; the codes and fields beside it are for programs.
    card = gettext("%(node)s card %(index)s") % {"node": hostname, "index": index}
    if failed_at is None:
        return {"code": "card_degraded", "node": hostname, "card": index,
                "since": started_at, "billing": "charged", "action": None, "action_at": None,
                "detail": detail,
                "message": gettext("%(card)s reports a problem (%(detail)s). It keeps running and is charged; it "
                                   "will not be given to anyone after you release it.") % {"card": card,
                                                                                            "detail": detail}}
    paid = (gettext("Its monthly package period runs on.") if billing == "monthly"
            else gettext("You are not charged for it from then."))
    move = kind == InstanceKind.CONTAINER
    then = (gettext("Move the instance to healthy cards (its volumes are kept), or stop it.") if move
            else gettext("Stop the instance to release it."))
    return {"code": "card_failed", "node": hostname, "card": index,
            "since": failed_at, "billing": "package" if billing == "monthly" else "not_charged",
            "action": "move" if move else None, "action_at": None, "detail": detail,
            "message": gettext("%(card)s failed (%(detail)s). %(paid)s %(then)s") % {
                "card": card, "detail": detail, "paid": paid, "then": then}}


# What instance_notices reads, as JSON in the list's page statement (a query on provisioning_instance), for its
# running rows: "dark", [{h, t}] (hostname, last heartbeat as text) of its live groups on nodes marked silent, and
# "health", [{h, i, s, f, d}] (hostname, card index, started, failed, detail) of its open incidents; NULL when none.
# Each is read a row only when the platform has any such node / incident at all (checked once a statement).
_SILENT = "n.state = %s AND starts_with(n.state_reason, %s)"
_DARK = f"""CASE WHEN provisioning_instance.state = 'running'
  AND EXISTS (SELECT 1 FROM inventory_node n WHERE {_SILENT}) THEN (
  SELECT json_agg(json_build_object('h', n.hostname, 't', c.last_heartbeat_at::text))
  FROM provisioning_nodegroup g JOIN inventory_node n ON n.id = g.node_id
    JOIN hardware_nodecredential c ON c.node_id = n.id
  WHERE g.instance_id = provisioning_instance.id AND g.released_at IS NULL AND {_SILENT}) END"""
_HEALTH = """CASE WHEN provisioning_instance.state = 'running'
  AND EXISTS (SELECT 1 FROM provisioning_healthincident WHERE ended_at IS NULL) THEN (
  SELECT json_agg(json_build_object('h', n.hostname, 'i', c."index", 's', h.started_at::text,
                                    'f', h.failed_at::text, 'd', h.detail) ORDER BY h.started_at, h.card_id)
  FROM provisioning_healthincident h JOIN inventory_card c ON c.id = h.card_id
    JOIN inventory_node n ON n.id = c.node_id
  WHERE h.instance_id = provisioning_instance.id AND h.ended_at IS NULL) END"""


def instance_notice_expressions() -> dict:
    """{"dark": …, "health": …} above, as expressions for the list's page statement."""
    silent = (NodeState.UNREACHABLE.value, UNREACHABLE_REASON)
    return {"dark": RawSQL(_DARK, silent * 2, output_field=ParsedJSONField()),
            "health": RawSQL(_HEALTH, (), output_field=ParsedJSONField())}


def notices_of_row(*, kind: str, billing: str, dark, health) -> list:
    """instance_notices' list for one instance from what instance_notice_expressions read."""
    from core.dbclock import db_time

    nodes = {g["h"]: g["t"] for g in dark or ()}
    out = [notice_node_unreachable(node=host, since=db_time(last), kind=kind, billing=billing)
           for host, last in sorted(nodes.items())]
    out += [_card_notice(i["h"], i["i"], db_time(i["s"]), db_time(i["f"]), i["d"], kind=kind, billing=billing)
            for i in health or ()]
    return out


def _dark_node_ids():
    return NodeCredential.objects.filter(node__state=NodeState.UNREACHABLE,
                                         node__state_reason__startswith=UNREACHABLE_REASON).values("node_id")


def notice_node_unreachable(*, node: str, since, kind: str = "", billing: str = "on_demand") -> dict:
    """The notice of one silent node: since when, and what happens at `action_at` unless it answers again.

    `billing`: "paused" (on demand: no meter runs while it is silent) or "package" (a monthly period runs on)."""
    action = settings.NODE_DARK_ACTION if kind == InstanceKind.CONTAINER else "fail"
    action_at = since + timedelta(seconds=settings.NODE_DARK_TIMEOUT_SECONDS) if since else None
    if billing != "monthly":
        paid = gettext("You are not charged from when it was last seen until it answers again.")
    else:
        paid = gettext("Its monthly package period runs on.")
    what = (gettext("If it does not answer in time, the instance is failed and its cards released.") if action == "fail"
            else gettext("If it does not answer in time, the instance is moved to other cards (the container starts "
                         "afresh)."))
    return {"code": "node_unreachable", "node": node, "since": since,
            "billing": "package" if billing == "monthly" else "paused", "action": action, "action_at": action_at,
            "message": gettext("The machine running this instance stopped answering. %(paid)s %(what)s") % {
                "paid": paid, "what": what}}
