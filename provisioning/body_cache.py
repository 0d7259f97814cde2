"""The instance list's kept bodies (provisioning.models.InstanceBody): built once, served until they change.

A list page was mostly the same work done again: 100 bodies built from their rows, node groups and nodes, which
change a few times in an instance's life, read on every poll. The list now keeps each body's text without its
per-row figures (cost so far, waitlist position, package, notices, volumes, datasets: they change without a write
to the instance) and splices the figures in at their places. Triggers clear a kept body in the transaction that
changes what it shows (migration 0016); the list builds it again and writes it back only if nothing changed it
since its own statement read it (`version`), so a body is never newer than its figures nor older than its rows.

Not kept: instances on their way to running (their SLA breach turns on the clock), and bodies built by other
code or settings (`FORMAT`, compared in the list's statement).

Each web process also keeps the kept texts it has read (`kept_texts`), by instance, version and the token of the
row version that holds the text (its `xmin`, which no other write of the row, committed or rolled back, ever has):
the list's statement sends the token, not 1.2 kB of text a row, and reads only the texts the process lacks.
"""
import hashlib
import inspect
import logging
import threading
from functools import lru_cache
from itertools import islice
from typing import NamedTuple

from django.conf import settings
from django.db import OperationalError, connection, transaction

from core.money import format_ucny
from core.renderers import json_text

log = logging.getLogger(__name__)

# The body's per-row figures, in body order (provisioning.api.rows.figure_fields gives their values).
FIGURES = ("package", "cost_so_far", "waitlist_position", "notices", "volumes", "datasets")
_FIGURE_SET = frozenset(FIGURES)
# What else a kept body depends on: these settings, and the code that builds and writes it.
_SETTINGS = ("SSH_GATEWAY_PUBLIC_HOST", "SSH_GATEWAY_PUBLIC_PORT", "CONTAINER_SSH_PORT_BASE", "SLURM_SCONTROL",
             "SLURM_SACCTMGR")
_CODE = ("provisioning.api.rows", "provisioning.body_cache", "provisioning.endpoints", "provisioning.choices",
         "provisioning.services.hardware_port", "provisioning.services.sla", "hardware.slurm", "core.money",
         "core.renderers")


def body_format() -> str:
    """The kept bodies this process may serve: a digest of the code that builds them and the settings they show.
    A deploy that changes either builds every body again on its first read."""
    return _format(tuple(repr(getattr(settings, name, None)) for name in _SETTINGS))


@lru_cache(maxsize=8)
def _format(values: tuple) -> str:
    import importlib

    digest = hashlib.sha256()
    for name in _CODE:
        digest.update(inspect.getsource(importlib.import_module(name)).encode())
    digest.update("\0".join(values).encode())
    return digest.hexdigest()[:32]


# What a kept body holds at each figure's place: the value most rows show (no package, notices or storage).
_PLAIN = {"package": None, "cost_so_far": "", "waitlist_position": None, "notices": [], "volumes": [], "datasets": []}


def kept_text(body: dict) -> str:
    """The body as text with its per-row figures at their most common values: "start,end,…;{json}", where
    start,end is the span of each figure's value in the JSON (FIGURES order), for body_text to replace."""
    pieces, spans, size = [], [], 0
    for key, value in body.items():
        figure = key in _FIGURE_SET
        piece = ("," if pieces else "{") + json_text({key: _PLAIN[key] if figure else value})[1:-1]
        if figure:  # the value is what follows "key":
            spans += (size + len(piece) - len(json_text(_PLAIN[key])), size + len(piece))
        pieces.append(piece)
        size += len(piece)
    if len(spans) != 2 * len(FIGURES):
        raise ValueError("the body lacks a per-row figure")
    return ",".join(map(str, spans)) + ";" + "".join(pieces) + "}"


class Kept(NamedTuple):
    """A kept text cut at its per-row figures: the JSON around them (one piece more than FIGURES), the kept value at
    each figure's place, and the text around a plain row's two figures (cost so far, waitlist position); cut once,
    when the process reads it (body_cut), spliced on every read."""

    pieces: tuple
    values: tuple
    plain: tuple


def body_cut(kept: str) -> Kept:
    head, _, text = kept.partition(";")
    cuts = [0, *map(int, head.split(",")), len(text)]
    pieces = tuple(text[cuts[2 * i]:cuts[2 * i + 1]] for i in range(len(FIGURES) + 1))
    values = tuple(text[cuts[2 * i + 1]:cuts[2 * i + 2]] for i in range(len(FIGURES)))
    # FIGURES order: package, cost so far, waitlist position, notices, volumes, datasets.
    plain = (pieces[0] + values[0] + pieces[1], pieces[2],
             pieces[3] + values[3] + pieces[4] + values[4] + pieces[5] + values[5] + pieces[6])
    return Kept(pieces, values, plain)


def body_text(kept: Kept, figures: tuple) -> str:
    """The whole body's JSON from a kept body and the per-row figures as JSON text (FIGURES order; None: the kept
    value stands)."""
    pieces, values, _ = kept
    out = [pieces[0]]
    for i, figure in enumerate(figures):
        out += (values[i] if figure is None else figure, pieces[i + 1])
    return "".join(out)


def plain_figures(cost, position) -> tuple[str, str]:
    """The cost so far (µCNY) and waitlist position as the body's JSON text, for a row with no package, notices or
    storage: equal to json_text of provisioning.api.rows.figure_fields' (tests/provisioning/test_body_cache.py)."""
    return f'"{format_ucny(int(cost or 0))}"', "null" if position is None else str(int(position))


def plain_body_text(kept: Kept, cost, position) -> str:
    """body_text for a row whose only figures are its cost so far and waitlist position (most rows)."""
    before_cost, before_position, after = kept.plain
    cost = cost or 0
    # format_ucny's digits, written here for the usual non-negative amount (a hundred rows a page).
    money = f"{cost // 1_000_000}.{cost % 1_000_000:06d}" if cost >= 0 else format_ucny(int(cost))
    return f'{before_cost}"{money}"{before_position}{"null" if position is None else int(position)}{after}'


def keep(built: list[tuple]) -> None:
    """Write back bodies the list built: (instance id, the version its statement read, kept text). Only rows still
    at that version are written; rows a writer holds are skipped, not waited for (a read never waits on a
    write). Best effort: a failure leaves the bodies to be built on the next read."""
    if not built:
        return
    ids, versions, texts = zip(*built, strict=True)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE provisioning_instancebody b SET body = v.body, format = %s "
                "FROM unnest(%s::uuid[], %s::bigint[], %s::text[]) AS v(id, version, body) "
                "WHERE b.instance_id = v.id AND b.version = v.version AND b.instance_id IN ("
                " SELECT instance_id FROM provisioning_instancebody WHERE instance_id = ANY(%s::uuid[])"
                " FOR UPDATE SKIP LOCKED) RETURNING b.instance_id::text, b.version, b.xmin::text, b.body",
                [body_format(), list(ids), list(versions), list(texts), list(ids)])
            written = cursor.fetchall()
    except OperationalError:  # e.g. a statement timeout under load: the page was served all the same
        log.warning("instance bodies not kept", exc_info=True)
        return
    _held({(pk, version, token): body_cut(body) for pk, version, token, body in written})


# (instance id, version, row version token) → its Kept, oldest first; at most TEXTS_HELD of them (~3 kB each with
# its key, the text held cut two ways: ~30 MB a process). Read without the lock (a dict read is atomic); written
# under it.
TEXTS_HELD = 10_000
_texts: dict = {}
_texts_lock = threading.Lock()  # requests run in threads of their own


def kept_texts(keys: list[tuple]) -> dict:
    """{(instance id as text, version, token): Kept} for the kept bodies the list's statement found: from this
    process's memory, the others read in one query. A key whose row has been written since (another version, or
    cleared) is left out: the caller reads its page again."""
    get = _texts.get
    found = {key: kept for key in keys if (kept := get(key)) is not None}
    if len(found) == len(keys):
        return found
    missing = [key for key in keys if key not in found]
    with connection.cursor() as cursor:
        cursor.execute("SELECT instance_id::text, version, xmin::text, body FROM provisioning_instancebody "
                       "WHERE instance_id = ANY(%s::uuid[]) AND body IS NOT NULL", [[key[0] for key in missing]])
        read = {(pk, version, token): body_cut(body) for pk, version, token, body in cursor.fetchall()}
    found.update((key, read[key]) for key in missing if key in read)
    _held(read)
    return found


def _held(texts: dict) -> None:
    with _texts_lock:
        _texts.update(texts)
        # The oldest out first: one still read is read again from the database, once, and held anew.
        for key in list(islice(_texts, max(0, len(_texts) - TEXTS_HELD))):
            del _texts[key]
