"""The SDK and CLI against the live test server (pytest-django's live_server) and a real Celery worker."""
import json
import os
import subprocess
import sys

import pytest

WORKER_ENV = {"SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}


@pytest.fixture
def platform(live_server, start_worker, member_factory, settings):
    """(url, owner membership, token secret) with a worker running and the organization funded."""
    from tests.factories.provisioning import funded
    from tests.factories.tenancy import make_token

    settings.SIMULATOR_FAILURE_SCALE = 0.0
    owner = funded(member_factory(role="owner"))
    _, secret = make_token(owner, scope="write")
    worker = start_worker(extra_env=WORKER_ENV)
    return live_server.url, owner, secret, worker


@pytest.fixture
def cli(platform, tmp_path):
    """cli(*args) → (exit code, parsed stdout when --json else text, stderr): `cardmix` as a process."""
    url, _, secret, _ = platform

    def run(*args, token=secret, timeout=180):
        env = {**os.environ, "CARDMIX_URL": url, "XDG_CONFIG_HOME": str(tmp_path / "config")}
        env.pop("CARDMIX_TOKEN", None)
        if token:
            env["CARDMIX_TOKEN"] = token
        proc = subprocess.run([sys.executable, "-m", "cardmix", *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
        out = proc.stdout
        if "--json" in args and proc.returncode == 0:
            out = json.loads(out)
        return proc.returncode, out, proc.stderr

    return run
