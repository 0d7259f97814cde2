"""The simulated storage driver: volumes are rows, and a zone of simulated nodes (no agent to report usage) gets
plausible usage, so the demo's storage page shows filling disks.

Deterministic per volume: while attached, usage climbs toward a fill fraction drawn from the volume's id (35–85 %
of its size) with a half-life of a few hours of attachment; detached, it keeps its last figure. Zones with agent
or Redfish nodes are left to the agents' heartbeat reports.
"""
import hashlib
import math
from decimal import Decimal

from django.db.models import Exists, OuterRef

from core.dbclock import db_now
from inventory.models import Node

from .choices import VolumeState
from .models import Volume, VolumeAttachment

SIMULATED = "simulated"
HALF_LIFE_HOURS = 6.0


def _fill(volume_id) -> float:
    digest = hashlib.sha256(str(volume_id).encode()).digest()
    return 0.35 + 0.5 * int.from_bytes(digest[:4], "big") / 2**32


def simulated_usage_gib(*, volume_id, size_gib: int, attached_hours: float, current: Decimal) -> Decimal:
    """The usage a simulated volume shows after `attached_hours` of attachment (never below what it had)."""
    target = size_gib * _fill(volume_id) * (1 - math.pow(0.5, max(attached_hours, 0.0) / HALF_LIFE_HOURS))
    return max(Decimal(f"{target:.3f}"), current)


def volumes_usage_simulate(*, now=None) -> int:
    """Update the usage of attached volumes in zones without agent nodes; returns how many changed."""
    now = now or db_now()
    # A zone with any agent-driven node reports real usage through heartbeats; only all-simulated zones are drawn.
    agent_node = Node.objects.filter(zone_id=OuterRef("volume__zone_id")).exclude(driver=SIMULATED)
    rows = (VolumeAttachment.objects.live().filter(volume__state=VolumeState.READY).filter(~Exists(agent_node))
            .select_related("volume").order_by("volume_id", "attached_at"))
    first_attached: dict = {}
    volumes: dict = {}
    for a in rows:
        first_attached.setdefault(a.volume_id, a.attached_at)
        volumes[a.volume_id] = a.volume
    changed = 0
    for vid, volume in volumes.items():
        hours = (now - first_attached[vid]).total_seconds() / 3600
        usage = simulated_usage_gib(volume_id=vid, size_gib=volume.size_gib, attached_hours=hours,
                                    current=volume.usage_gib)
        if usage != volume.usage_gib or volume.usage_reported_at is None:
            Volume.objects.filter(pk=vid).update(usage_gib=usage, over_quota=usage > volume.size_gib,
                                                 usage_reported_at=now)
            changed += 1
    return changed
