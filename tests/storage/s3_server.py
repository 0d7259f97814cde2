"""A real S3 + IAM server on loopback for the object-access tests: moto's server with IAM authentication enforced
(INITIAL_NO_AUTH_ACTION_COUNT lets only the set-up of the operator's admin user through), once per test session."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from django.test import override_settings

ADMIN_ACTIONS = 3  # create_user, put_user_policy, create_access_key for the operator's admin


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto_server on a free loopback port; → (endpoint, admin key id, admin secret)."""
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.fail(f"moto_server not installed next to {sys.executable} (pip install 'moto[server]')")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(ADMIN_ACTIONS)},
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    give_up = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > give_up or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1", aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    iam.create_user(UserName="cardmix-operator")
    iam.put_user_policy(UserName="cardmix-operator", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    admin = iam.create_access_key(UserName="cardmix-operator")["AccessKey"]
    yield url, admin["AccessKeyId"], admin["SecretAccessKey"]
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture
def s3(s3_server):
    url, key, secret = s3_server
    with override_settings(S3_ENDPOINT_URL=url, S3_ADMIN_ACCESS_KEY_ID=key, S3_ADMIN_SECRET_ACCESS_KEY=secret,
                           S3_REGION="us-east-1"):
        yield url


