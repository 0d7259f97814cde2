"""docker-compose.yml stays within what docker-compose v1.29 (Debian's) accepts."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.compose
def test_compose_file_is_valid_for_docker_compose():
    run = subprocess.run(["docker-compose", "-f", "docker-compose.yml", "config", "-q"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


@pytest.mark.compose
def test_compose_validation_can_fail(tmp_path):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text('version: "3.8"\nservices:\n  web:\n    image: x\n    restart: sometimes-maybe\n    ports: 80\n')
    run = subprocess.run(["docker-compose", "-f", str(broken), "config", "-q"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode != 0 and "ports" in run.stderr, run.stderr
