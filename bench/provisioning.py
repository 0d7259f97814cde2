"""Provisioning throughput: N container instances through the API, one worker, zero simulated delays.

Creates a throwaway PostgreSQL database (migrated like the test suite's), a fleet with room for
every instance, one funded organization and an API token; posts N creates through the full DRF
stack (in this process), and one real `celery worker -c 1` process (SIMULATOR_DELAY_SCALE=0) takes
each one to `running`. Prints instances per second (first request → last instance running) and the
share of that wall time spent outside driver calls (NodeGroup.driver_seconds: wall time inside
prepare / topology / readiness / health_check).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cardmix REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python -m bench.provisioning --instances 200
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--cards", type=int, default=1, help="cards per instance (1 → health check, ≥2 → nccl)")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["SIMULATOR_DELAY_SCALE"] = "0"
    os.environ["SIMULATOR_FAILURE_SCALE"] = "0"
    os.environ.setdefault("CARDMIX_TEST_DB_NAME", f"cardmix_bench_{os.getpid()}")
    import django

    django.setup()
    from django.conf import settings
    from django.test.utils import setup_databases, teardown_databases

    if not settings.REDIS_URL:
        print("bench.provisioning needs REDIS_URL (its worker takes tasks through Redis)", file=sys.stderr)
        return 2
    from config.celery import app

    queue = f"cardmix-bench-{os.getpid()}"
    app.conf.task_default_queue = queue
    old = setup_databases(verbosity=0, interactive=False)
    worker = None
    try:
        from django.db.models import Sum
        from rest_framework.test import APIClient

        from provisioning.models import Instance, NodeGroup
        from tests.conftest import WorkerProcess
        from tests.factories.provisioning import container_body, funded, make_fleet
        from tests.factories.tenancy import MembershipFactory, make_token

        per_node = 8 // args.cards
        make_fleet(zone="bench", h100=-(-args.instances // per_node))
        membership = funded(MembershipFactory(role="owner"), amount=10**12)
        org = membership.organization
        org.card_quota = args.instances * args.cards
        org.save(update_fields=["card_quota"])
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(membership, 'write')[1]}")
        worker = WorkerProcess(queue, {"SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0",
                                       "LOG_LEVEL": "WARNING"}).start()

        start = time.perf_counter()
        api_seconds = 0.0
        for n in range(args.instances):
            t = time.perf_counter()
            r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", args.cards, name=f"bench-{n}"),
                            format="json")
            api_seconds += time.perf_counter() - t
            if r.status_code != 201:
                print(f"create {n} answered {r.status_code}: {r.content[:300]!r}", file=sys.stderr)
                return 1
        deadline = time.time() + args.timeout
        while Instance.objects.exclude(state__in=["running", "failed"]).exists():
            if time.time() > deadline:
                from django.db.models import Count

                states = dict(Instance.objects.values_list("state").annotate(n=Count("pk")))
                print(f"timed out waiting for instances to run: {states}; worker log: {worker.log_tail(1500)}",
                      file=sys.stderr)
                return 1
            time.sleep(0.05)
        wall = time.perf_counter() - start
        running = Instance.objects.filter(state="running").count()
        driver = NodeGroup.objects.aggregate(s=Sum("driver_seconds"))["s"] or 0.0
        result = {
            "instances": args.instances, "cards_per_instance": args.cards, "running": running,
            "wall_s": round(wall, 3), "instances_per_s": round(running / wall, 2),
            "api_create_ms_mean": round(1000 * api_seconds / args.instances, 2),
            "driver_s": round(driver, 3), "share_outside_driver": round(1 - driver / wall, 4),
        }
        print(json.dumps(result))
        print(f"{running}/{args.instances} running in {wall:.1f} s → {result['instances_per_s']} instances/s; "
              f"{100 * result['share_outside_driver']:.1f} % of the wall time outside the driver "
              f"(API create mean {result['api_create_ms_mean']} ms)", file=sys.stderr)
        return 0
    finally:
        if worker is not None:
            worker.stop()
        from django.db import connections

        connections.close_all()
        teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    sys.exit(main())
