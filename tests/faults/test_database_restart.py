"""PostgreSQL restarted mid-run: requests fail cleanly with 503, web and worker recover unrestarted."""
import pytest
import requests

from .conftest import container_body, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.redis, pytest.mark.worker]


def _unavailable(response: requests.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "service_unavailable"


def _console_login(faults, web) -> requests.Session:
    """A console session (cookie + CSRF) for the shared user, through the real login form."""
    faults.shell("import json; from tenancy.models import User; "
                 f"u = User.objects.get(email={faults.email!r}); u.set_password('faults-Pass-1234'); u.save(); "
                 "print(json.dumps(True))")
    browser = requests.Session()
    browser.get(f"{web.base}/login/", timeout=30)
    r = browser.post(f"{web.base}/login/", data={"username": faults.email, "password": "faults-Pass-1234",
                                                 "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                     headers={"Referer": f"{web.base}/login/"}, timeout=30, allow_redirects=False)
    assert r.status_code == 302, (r.status_code, r.text[:500])
    return browser


def test_database_restart_fails_cleanly_and_recovers(faults):
    token = faults.shared_token()
    worker = faults.worker()
    web = faults.shared_web()
    r = web.request("POST", "/api/v1/instances/", token, json=container_body("before-outage"))
    assert r.status_code == 201, r.text
    before = r.json()["id"]
    faults.wait_state(before, "running")

    browser = _console_login(faults, web)
    assert browser.get(f"{web.base}/dashboard/", timeout=30, allow_redirects=False).status_code == 200

    faults.pg.stop()
    _unavailable(web.request("GET", "/api/v1/instances/", token))
    _unavailable(web.request("POST", "/api/v1/instances/", token, json=container_body("during-outage")))
    _unavailable(web.request("GET", f"/api/v1/instances/{before}/", token))
    health = web.request("GET", "/healthz")  # a plain Django view, outside DRF
    assert health.status_code == 503 and health.json()["database"] == "error", health.text
    page = browser.get(f"{web.base}/dashboard/", timeout=30, allow_redirects=False)  # console session, no DRF
    assert page.status_code == 503 and "unavailable" in page.text, (page.status_code, page.text[:300])
    assert page.headers.get("Retry-After") == "5"

    faults.pg.start()
    # Neither process is restarted: the web's stale connection is health-checked away, the worker reconnects.
    wait_until(lambda: web.request("GET", "/healthz").status_code == 200, 30, "healthz to answer 200 again")
    assert browser.get(f"{web.base}/dashboard/", timeout=30, allow_redirects=False).status_code == 200
    r = web.request("GET", "/api/v1/instances/", token)
    assert r.status_code == 200 and before in {i["id"] for i in r.json()["results"]}, r.text
    r = web.request("POST", "/api/v1/instances/", token, json=container_body("after-outage"))
    assert r.status_code == 201, r.text
    after = r.json()["id"]
    faults.wait_state(after, "running")
    assert web.proc.alive() and worker.alive(), "web and worker must survive the restart"
    assert not faults.sql("SELECT 1 FROM provisioning_instance WHERE name = 'during-outage'")

    for iid in (before, after):
        assert web.request("DELETE", f"/api/v1/instances/{iid}/", token).status_code in (200, 202)
        faults.wait_state(iid, "terminated")
    assert faults.leaked_cards() == []
    assert faults.meter_drift() == []
    faults.verify_ledger()
