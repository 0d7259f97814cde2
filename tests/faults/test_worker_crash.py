"""SIGKILL at failpoints in provisioning, in the meter tick and in webhook processing: after a restart
and the reconciler, no card leaked, no second charge, no lost credit."""
import hashlib
import hmac
import json
import time
import uuid

import pytest
import requests

from .conftest import WEBHOOK_SECRET, container_body, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.worker]


def _crashed(proc) -> bool:
    """The worker's pool child died by SIGKILL at the failpoint (the main process reports it)."""
    log = proc.log()
    return "WorkerLostError" in log or "signal 9" in log or "SIGKILL" in log


def _running_instance(faults, web, token, name):
    r = web.request("POST", "/api/v1/instances/", token, json=container_body(name))
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.mark.parametrize("point", ["provision:after_claim", "provision:after_driver", "provision:before_meter"])
def test_worker_killed_during_provisioning(faults, point):
    token = faults.shared_token()
    web = faults.shared_web()
    crashing = faults.worker({"CARDMIX_FAILPOINT": point})
    instance_id = _running_instance(faults, web, token, f"crash-{point}")
    wait_until(lambda: _crashed(crashing), 60, f"the worker to die at {point}")
    crashing.kill()  # the rest of it goes too: nothing is left to finish the step
    faults.flush_queue()  # and the broker forgets the message: recovery must come from the rows alone
    state = faults.state(instance_id)
    assert state in ("provisioning", "checking"), state
    assert faults.sql("SELECT count(*) FROM billing_meter WHERE instance_id = %s", (instance_id,)) == [(0,)]

    # The reconciler's input is the row's deadline (SPEC §3: tests move a deadline instead of the clock).
    faults.sql("UPDATE provisioning_instance SET step_deadline = now() - interval '1 second' WHERE id = %s",
               (instance_id,))
    faults.worker()
    faults.beat()  # provisioning.reconcile every 2 s re-dispatches the stuck step
    faults.wait_state(instance_id, "running", timeout=90)
    resumed = faults.sql("SELECT count(*) FROM tenancy_auditevent WHERE action = 'instance.reconcile_resume' "
                         "AND target_id = %s", (instance_id,))
    assert resumed == [(1,)], resumed  # the reconciler re-dispatched the stuck step, once

    meters = faults.sql("SELECT count(*) FILTER (WHERE closed_at IS NULL), count(*) FROM billing_meter "
                        "WHERE instance_id = %s", (instance_id,))
    assert meters == [(1, 1)], meters  # exactly one meter: the crash opened nothing twice
    cards = faults.sql("SELECT count(*) FROM inventory_cardallocation WHERE holder_id = %s AND released_at IS NULL",
                       (instance_id,))
    assert cards == [(1,)], cards
    assert faults.leaked_cards() == []
    assert web.request("DELETE", f"/api/v1/instances/{instance_id}/", token).status_code == 202
    faults.wait_state(instance_id, "terminated")
    assert faults.leaked_cards() == []
    assert faults.meter_drift() == []
    faults.verify_ledger()


def test_worker_killed_mid_meter_tick(faults):
    token = faults.shared_token()
    web = faults.shared_web()
    worker = faults.worker()
    instance_id = _running_instance(faults, web, token, "tick-crash")
    faults.wait_state(instance_id, "running")
    worker.stop()
    time.sleep(2.2)  # some whole seconds to charge

    # Inside the tick's posting transaction, after its transfers are written (names of billing/tick.py's
    # failpoints; the first one reached kills the worker).
    crashing = faults.worker({"CARDMIX_FAILPOINT": "billing.tick:after_transfers,billing.tick:after_post,"
                                                   "billing.tick:before_commit"})
    faults.send_task("billing.meter_tick")
    wait_until(lambda: _crashed(crashing), 60, "the worker to die inside the tick's transaction")
    crashing.kill()
    faults.flush_queue()  # the next tick is the next beat's, not a redelivery
    # The transfers inserted before the crash rolled back with the whole posting.
    meter = faults.sql("SELECT id, posted_through_seconds, posted_amount FROM billing_meter WHERE instance_id = %s",
                       (instance_id,))
    assert len(meter) == 1 and meter[0][1:] == (0, 0), meter
    meter_id = meter[0][0]
    assert faults.sql("SELECT count(*) FROM billing_metercharge WHERE meter_id = %s", (meter_id,)) == [(0,)]
    assert faults.sql("SELECT count(*) FROM billing_transfer WHERE key LIKE %s", (f"tick:{meter_id}:%",)) == [(0,)]

    faults.worker()
    faults.send_task("billing.meter_tick")
    wait_until(lambda: faults.sql("SELECT posted_through_seconds FROM billing_meter WHERE id = %s",
                                  (meter_id,))[0][0] > 0, 60, "a tick to post after the restart")
    assert faults.meter_drift() == []  # total == floor(rate × cards × S / 3600): charged once
    assert faults.sql("SELECT count(*) FROM billing_metercharge WHERE meter_id = %s", (meter_id,))[0][0] >= 1
    faults.verify_ledger()  # the tick's per-organization transfers sum to the meter's postings
    assert web.request("DELETE", f"/api/v1/instances/{instance_id}/", token).status_code == 202
    faults.wait_state(instance_id, "terminated")
    closed = faults.sql("SELECT closed_at IS NOT NULL, posted_amount, written_off_amount, "
                        "(rate * cards * posted_through_seconds) / 3600 FROM billing_meter WHERE id = %s",
                        (meter_id,))[0]
    assert closed[0] and closed[1] + closed[2] == closed[3] and closed[1] > 0, closed
    assert faults.meter_drift() == []
    assert faults.leaked_cards() == []
    faults.verify_ledger()


def _signed(event: dict) -> tuple[bytes, str]:
    payload = json.dumps(event).encode()
    stamp = int(time.time())
    mac = hmac.new(WEBHOOK_SECRET.encode(), f"{stamp}.".encode() + payload, hashlib.sha256).hexdigest()
    return payload, f"t={stamp},v1={mac}"


def test_web_killed_during_webhook_processing(faults):
    faults.shared_token()  # a verified user with an organization
    pi = f"pi_faults_{uuid.uuid4().hex[:16]}"
    fen = 12345
    topup = faults.shell(
        "import json; from tenancy.models import Membership; from billing.models_payments import TopUp; "
        f"m = Membership.objects.filter(user__email={faults.email!r}).select_related('organization').first(); "
        f"t = TopUp.objects.create(organization=m.organization, amount={fen * 10_000}, amount_fen={fen}, "
        f"stripe_payment_intent_id={pi!r}, state='processing'); "
        "print(json.dumps([str(t.pk), str(m.organization_id)]))")
    org_id = topup[1]
    event = {"id": f"evt_{uuid.uuid4().hex[:20]}", "type": "payment_intent.succeeded", "created": int(time.time()),
             "data": {"object": {"id": pi, "object": "payment_intent", "status": "succeeded", "currency": "cny",
                                 "amount": fen, "amount_received": fen, "latest_charge": f"ch_{pi[3:]}",
                                 "metadata": {"topup_id": topup[0], "organization_id": org_id}}}}
    path = "/api/v1/billing/stripe/webhook/"

    crashing = faults.web({"CARDMIX_FAILPOINT": "payments:after_apply"})
    payload, signature = _signed(event)
    with pytest.raises(requests.ConnectionError):  # the process died inside the event's transaction
        crashing.request("POST", path, data=payload, headers={"Stripe-Signature": signature,
                                                              "Content-Type": "application/json"})
    wait_until(lambda: not crashing.proc.alive(), 10, "the crashed web process to be gone")
    credits = "SELECT count(*), COALESCE(sum(amount), 0) FROM billing_transfer WHERE key = %s"
    assert faults.sql(credits, (f"stripe_pi:{pi}",)) == [(0, 0)]  # rolled back with the event row
    assert faults.sql("SELECT count(*) FROM billing_stripeevent WHERE id = %s", (event["id"],)) == [(0,)]

    web = faults.shared_web()  # Stripe retries the same event, to a normal web process
    for _ in range(2):  # the retry credits; a further duplicate changes nothing
        payload, signature = _signed(event)
        r = web.request("POST", path, data=payload, headers={"Stripe-Signature": signature,
                                                             "Content-Type": "application/json"})
        assert 200 <= r.status_code < 300, r.text
    assert faults.sql(credits, (f"stripe_pi:{pi}",)) == [(1, fen * 10_000)]  # exactly one credit, not lost
    assert faults.sql("SELECT credited_at IS NOT NULL FROM billing_topup WHERE id = %s", (topup[0],)) == [(True,)]
    faults.verify_ledger()
