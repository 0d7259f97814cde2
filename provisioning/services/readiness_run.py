"""One readiness run over a node's cards through its driver, parsed and saved as a ReadinessReport.

The worker's checks (steps.py) and the second pass on release (retest.py) run the same test: an intra-node
all_reduce for ≥ 2 cards against the accelerator's floor, a device health check for one card.
"""
import logging
import time

from core.dbclock import db_now
from core.metrics import READINESS_TOTAL

from ..choices import ReportScope
from ..models import RAW_OUTPUT_LIMIT, ReadinessReport
from ..readiness import evaluate, parse_device_health, parse_output
from .fleet import driver_for, forced_faults, node_ref

logger = logging.getLogger("cardmix.provisioning")


def driver_call(group, method, *args, **kwargs):
    """Call a driver method, adding its wall time to group.driver_seconds (saved by the caller; None: a warm-pool
    node's call, no group to add it to).

    Logs one JSON line per call (instance_id, step, driver, node, duration, exit code): with the
    instance's events this answers "why was instance X slow to become ready" (docs/operations/observability.md).
    """
    start = time.perf_counter()
    out = None
    try:
        out = method(*args, **kwargs)
        return out
    finally:
        elapsed = time.perf_counter() - start
        if group is not None:
            group.driver_seconds += elapsed
        logger.info("driver step", extra={
            "instance_id": str(group.instance_id) if group is not None else "", "step": method.__name__,
            "driver": getattr(getattr(method, "__self__", None), "name", ""),
            "node_id": str(group.node_id) if group is not None else str(getattr(args[0], "id", "")),
            "duration_s": round(elapsed, 3), "exit_code": getattr(out, "exit_code", None)})


def clip(text: str) -> str:
    data = (text or "").encode()
    return text if len(data) <= RAW_OUTPUT_LIMIT else data[:RAW_OUTPUT_LIMIT].decode(errors="ignore")


def report_write(instance, group, node, *, scope, tool, command, attempt, cards, out, started, parsed=None,
                 verdict=None, health=None, topology="", nodes=None) -> ReadinessReport:
    errors: list[str] = []
    if verdict is not None:
        errors += list(verdict.reasons)
    if parsed is not None:
        errors += [e for e in parsed.error_lines if e not in errors]
    if health is not None:
        errors += list(health.issues)
    report = ReadinessReport.objects.create(
        instance=instance, group=group, node=node, nodes=nodes or [node.hostname], scope=scope, tool=tool,
        command=command[:300], attempt=attempt, cards=list(cards), rows=parsed.rows if parsed else [],
        busbw_peak_gbps=parsed.busbw_peak_gbps if parsed else None,
        busbw_largest_gbps=parsed.busbw_largest_gbps if parsed else None,
        floor_gbps=verdict.floor_gbps if verdict else None, errors=errors,
        passed=bool(verdict.passed if verdict else health.healthy), raw_output=clip(out.text),
        exit_code=out.exit_code, topology=clip(topology), started_at=started, finished_at=db_now(),
    )
    READINESS_TOTAL.labels(accelerator=group.accelerator if group is not None else node.accelerator.slug,
                           result="pass" if report.passed else "fail").inc()
    logger.info("readiness report", extra={
        "instance_id": str(instance.pk) if instance is not None else "", "step": f"readiness:{scope}", "node_id": str(node.pk), "tool": tool,
        "attempt": attempt, "passed": report.passed, "busbw_gbps": report.busbw_largest_gbps,
        "floor_gbps": report.floor_gbps, "errors": errors[:5],
        "duration_s": round((report.finished_at - started).total_seconds(), 3)})
    return report


def cards_test(instance, group, node, cards, *, attempt: int, topology: str = "",
               scope: str | None = None) -> ReadinessReport:
    """Run the readiness test on `cards` of `node` (node with zone and accelerator loaded) and save its report.

    `scope`: the report's scope; default the test's own (intra-node or health)."""
    driver = driver_for(node)
    ref = node_ref(node)
    started = db_now()
    cards = list(cards)
    if len(cards) >= 2:
        floor = float(node.accelerator.readiness_floor_gbps or 0)
        out = driver_call(group, driver.readiness, ref, cards, **forced_faults(driver, [node.pk], "readiness"))
        tool = out.meta.get("tool") or ("hccl_test" if ref.collective == "hccl" else "nccl-tests")
        parsed = parse_output(out.text, tool=tool, ranks=len(cards))
        return report_write(instance, group, node, scope=scope or ReportScope.INTRA_NODE, tool=tool,
                            command=out.meta.get("command", ""), attempt=attempt, cards=cards, out=out,
                            started=started, parsed=parsed, verdict=evaluate(parsed, floor, out.exit_code),
                            topology=topology)
    out = driver_call(group, driver.health_check, ref, cards[0], **forced_faults(driver, [node.pk], "health_check"))
    tool = "npu-smi" if ref.collective == "hccl" else "nvidia-smi"
    return report_write(instance, group, node, scope=scope or ReportScope.HEALTH, tool=tool,
                        command=out.meta.get("command", ""), attempt=attempt, cards=cards, out=out, started=started,
                        health=parse_device_health(out.text, out.exit_code), topology=topology)
