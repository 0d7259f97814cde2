"""Two beats at once: each meter tick and reconciler pass happens once (PostgreSQL advisory locks)."""
import re
import time
import zlib

import psycopg
import pytest

from .conftest import container_body, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.worker]

FAST_BEAT = {"METER_TICK_SECONDS": "1", "RECONCILE_SECONDS": "1"}


def _lock_id(name: str) -> int:  # core.locks._lock_id
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _results(workers, task: str) -> list[str]:
    """The return values the workers logged for `task`."""
    pattern = re.compile(re.escape(task) + r"\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: (\{[^}]*\})")
    return [m for w in workers for m in pattern.findall(w.log())]


def test_two_beats_tick_and_reconcile_once(faults):
    token = faults.shared_token()
    web = faults.shared_web()
    first = faults.worker()
    r = web.request("POST", "/api/v1/instances/", token, json=container_body("two-beats"))
    assert r.status_code == 201, r.text
    instance_id = r.json()["id"]
    faults.wait_state(instance_id, "running")
    second = faults.worker()
    workers = (first, second)
    meter = "SELECT id, posted_through_seconds FROM billing_meter WHERE instance_id = %s AND closed_at IS NULL"
    (meter_id, posted_before), = faults.sql(meter, (instance_id,))

    # 1. While one tick/pass holds the lock (here: this session, as a slow first beat would), every
    #    tick and pass the two beats send, on either worker, does nothing.
    with psycopg.connect(faults.pg.dsn(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s), pg_advisory_lock(%s)",
                       (_lock_id("billing.meter_tick"), _lock_id("reconciler")))
        beats = [faults.beat(FAST_BEAT), faults.beat(FAST_BEAT)]
        wait_until(lambda: len(_results(workers, "billing.meter_tick")) >= 4
                   and len(_results(workers, "provisioning.reconcile")) >= 4, 60,
                   "both beats' ticks and passes to run while the lock is held")
        ticks, passes = _results(workers, "billing.meter_tick"), _results(workers, "provisioning.reconcile")
        assert all("'skipped': True" in t for t in ticks), ticks
        assert all("'skipped': True" in p for p in passes), passes
        assert faults.sql(meter, (instance_id,)) == [(meter_id, posted_before)]  # nothing posted meanwhile
    # Lock released: the next ticks post again.
    wait_until(lambda: faults.sql(meter, (instance_id,))[0][1] > posted_before, 30, "a tick to post")

    # 2. Two beats and two workers running together: one posting per tick second, never a second charge.
    time.sleep(3)
    for beat in beats:
        beat.stop()
    performed = [t for t in _results(workers, "billing.meter_tick") if "'skipped': True" not in t]
    assert performed, "some ticks must have run"
    # The meter's postings (the ledger's per-meter detail; keyed by meter and through-second).
    seconds = [s for (s,) in faults.sql("SELECT through_seconds FROM billing_metercharge WHERE meter_id = %s",
                                        (meter_id,))]
    postings = sum(1 for t in performed if "'meters': 1" in t)
    assert len(seconds) == len(set(seconds)) == postings, (seconds, performed)  # one per tick that ran
    faults.verify_ledger()  # and the organization's tick transfers sum to those postings
    assert faults.meter_drift() == []  # total == floor(rate × cards × S / 3600)
    assert "Traceback" not in first.log() + second.log()

    assert web.request("DELETE", f"/api/v1/instances/{instance_id}/", token).status_code == 202
    faults.wait_state(instance_id, "terminated")
    assert faults.meter_drift() == []
    assert faults.leaked_cards() == []
    faults.verify_ledger()
