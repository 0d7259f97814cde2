"""Accounts tests: the loopback OpenID Connect provider (tests/accounts/idp/) and TOTP codes as an app makes them."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, LoggedProcess
from tests.e2e.conftest import chromium_launched, e2e_env  # noqa: F401  (e2e_env: live-server settings, a fixture)

PROVIDER_ID = "testuni"
PERSON = {"username": "ada", "password": "idp-password-1", "email": "ada@lab.testuni.edu.cn", "name": "Ada Lovelace"}


def _rsa_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _admin(sql: str) -> None:
    """Run `sql` on the test run's PostgreSQL server, outside any database the tests use."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    params = {"dbname": "postgres", "user": db["USER"], "password": db["PASSWORD"] or None,
              "host": db["HOST"] or db.get("OPTIONS", {}).get("host"), "port": db["PORT"] or None}
    with psycopg.connect(**{k: v for k, v in params.items() if v}, autocommit=True) as conn:
        conn.execute(sql)


def _idp_database(name: str) -> dict:
    """A new, empty database for the IdP on the test run's server; its Django settings (ENGINE aside)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}"')
    return {"NAME": name, "USER": db["USER"], "PASSWORD": db["PASSWORD"], "HOST": db["HOST"], "PORT": db["PORT"],
            "OPTIONS": {k: v for k, v in db.get("OPTIONS", {}).items() if k == "host"}}


class IdpProcess(LoggedProcess):
    """django-oauth-toolkit (OIDC on) in its own process on a free loopback port, with one person and one client."""

    client_id = "cardmix-test-client"
    client_secret = "cardmix-test-secret-0123456789"

    def __init__(self, redirect_uris: list[str], people: list[dict]):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server_url = f"{self.url}/o"
        self.tmp = tempfile.TemporaryDirectory(prefix="cardmix-idp-")
        self.log_path = Path(self.tmp.name) / "idp.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
        self.db = _idp_database(f"cardmix_idp_{os.getpid()}_{self.port}")
        self.env.update(IDP_DB=json.dumps(self.db), IDP_RSA_KEY=_rsa_pem(),
                        IDP_USERS=json.dumps(people), IDP_CLIENT_ID=self.client_id,
                        IDP_CLIENT_SECRET=self.client_secret, IDP_REDIRECT_URIS=" ".join(redirect_uris))

    def start(self) -> "IdpProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.accounts.idp.server", str(self.port)], cwd=ROOT,
                                     env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the IdP exited with {self.proc.returncode}: {self.log_tail()}")
            if b"idp ready" in self.log_path.read_bytes():
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"the IdP did not start: {self.log_tail()}")

    def stop(self) -> None:
        self.stop_group()
        self.tmp.cleanup()
        _admin(f'DROP DATABASE IF EXISTS "{self.db["NAME"]}" WITH (FORCE)')

    def configure(self, settings) -> None:
        """Point Cardmix's SSO settings (OIDC_PROVIDERS' form) at this provider."""
        settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": [{
            "provider_id": PROVIDER_ID, "name": "Test University", "client_id": self.client_id,
            "secret": self.client_secret, "settings": {"server_url": self.server_url}}]}}


@pytest.fixture(scope="module")
def _idp_for_test_client():
    """One provider per module for the Django test client's flows (callback at http://testserver)."""
    idp = IdpProcess([f"http://testserver/accounts/oidc/{PROVIDER_ID}/login/callback/"], [PERSON]).start()
    yield idp
    idp.stop()


@pytest.fixture
def idp(settings, _idp_for_test_client):
    """The loopback provider, configured as Cardmix's SSO for this test."""
    _idp_for_test_client.configure(settings)
    return _idp_for_test_client


@pytest.fixture
def idp_start(settings):
    """idp_start(base_url) → a running IdpProcess whose client may redirect to `base_url`'s SSO callback."""
    started = []

    def start(base_url: str, people=(PERSON,)) -> IdpProcess:
        idp = IdpProcess([f"{base_url}/accounts/oidc/{PROVIDER_ID}/login/callback/"], list(people)).start()
        started.append(idp)
        idp.configure(settings)
        return idp

    yield start
    for idp in started:
        idp.stop()


def totp_now(secret: str) -> str:
    """The code an authenticator app shows now for a base32 secret."""
    import pyotp

    return pyotp.TOTP(secret).now()


@pytest.fixture
def chromium():
    """Headless Chromium (with e2e_env and live_server)."""
    yield from chromium_launched()
