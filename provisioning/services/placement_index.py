"""One in-memory placement index per worker process, kept current from inventory's change log.

Rebuilding the index from the whole fleet per decision costs in proportion to the fleet. Instead each
process keeps a Fleet and, before every decision, reads the nodes changed since its last look
(`inventory.selectors.placement_changes`, one indexed query) and re-reads only those. The change rows
are written by triggers in the same transaction as every allocation, card or node change, so nothing
can change without the index seeing it. The claim still locks and re-checks the chosen cards: a stale
view can cost a retry, never a double booking.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from django.db import connection

from inventory.selectors import PlacementMark, placement_changes, placement_mark, placement_snapshot

from ..placement import Fleet, NodeSnapshot
from .demand import demand_workload


def _snapshot(row: dict) -> NodeSnapshot:
    return NodeSnapshot(str(row["id"]), row["zone"], row["accelerator"], row["card_count"], row["free"], row["state"])


class LiveFleet:
    """A Fleet plus the mark of the change log it has read up to."""

    def __init__(self):
        self.fleet: Fleet | None = None
        self.mark = PlacementMark()
        # Nodes last read with this process's own uncommitted changes: if that transaction rolls back its
        # change rows vanish, so these are re-read at the next refresh whatever the log says.
        self.unsure: set = set()
        self.lock = threading.Lock()

    def rebuild(self) -> None:
        """Read the whole fleet (first use, or a marker says change rows may be gone)."""
        mark = placement_mark()  # before the read: changes after it are read again next time
        self.fleet = Fleet([_snapshot(r) for r in placement_snapshot()], self.fleet.workload if self.fleet else None)
        self.mark = mark
        self.unsure = set(placement_changes(since=mark).own)

    def refresh(self) -> Fleet:
        """Bring the index up to date with what this transaction sees now; returns the Fleet."""
        if self.fleet is None:
            self.rebuild()
            return self.fleet
        changes = placement_changes(since=self.mark, also=self.unsure)
        if changes.rebuild:
            self.rebuild()
            return self.fleet
        if changes.node_ids:
            rows = {str(r["id"]): _snapshot(r) for r in changes.nodes}
            self.fleet.update({i: rows.get(i) for i in changes.node_ids})
        self.unsure = set(changes.own)
        self.mark = changes.mark
        return self.fleet


_INDEXES: dict[tuple, LiveFleet] = {}
_INDEXES_LOCK = threading.Lock()


def _live() -> LiveFleet:
    db = connection.settings_dict
    key = (connection.alias, db.get("HOST"), db.get("PORT"), db.get("NAME"))
    with _INDEXES_LOCK:
        live = _INDEXES.get(key)
        if live is None:
            live = _INDEXES[key] = LiveFleet()
    return live


@contextmanager
def placement_fleet():
    """The process's Fleet, refreshed to this transaction's view and with the learned demand, held exclusively
    (the engine's tentative search mutates it) until the block ends."""
    live = _live()
    with live.lock:
        try:
            fleet = live.refresh()
            workload = demand_workload()
            if fleet.workload is not workload:
                fleet.set_workload(workload)
            yield fleet
        except BaseException:
            live.fleet = None  # a search cut short may not have given its tentative cards back: rebuild
            raise


def placement_forget(node_ids) -> None:
    """Re-read these nodes at the next refresh (a claim found them other than the index said)."""
    live = _live()
    with live.lock:
        live.unsure.update(str(i) for i in node_ids)


def placement_index_drop() -> None:
    """Forget every kept index of this process: the next decision rebuilds from the whole fleet (tests, which roll
    their rows back; a shell after the database was restored from a backup)."""
    with _INDEXES_LOCK:
        _INDEXES.clear()
