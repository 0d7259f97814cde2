"""The integration fixture runs a real Celery worker as another OS process."""
import os

import pytest


@pytest.mark.worker
def test_task_runs_in_another_process(celery_worker_process):
    pid = celery_worker_process.wait_ready()
    assert pid != os.getpid()
    assert celery_worker_process.proc.poll() is None
