"""The simulated driver's readiness output parses with the real parsers and passes or fails as forced."""

import pytest

from provisioning.drivers import NodeRef, get_driver
from provisioning.drivers.simulated import FAULTS
from provisioning.readiness import evaluate, parse_output

FLOORS = {"h100-sxm-80g": 235, "h800-sxm-80g": 150, "a800-sxm-80g": 150, "ascend-910b": 100}
COLLECTIVE = {"ascend-910b": "hccl"}
READINESS_FAULTS = ["low_bandwidth", "data_errors", "nccl_error", "timeout", "truncated"]


def node(accelerator: str, **kw) -> NodeRef:
    collective = COLLECTIVE.get(accelerator, "nccl")
    vendor = "huawei" if collective == "hccl" else "nvidia"
    defaults = dict(
        id=f"{accelerator}-1",
        hostname="node-01",
        accelerator=accelerator,
        vendor=vendor,
        collective=collective,
        card_count=8,
        zone="cn-a",
        fabric="roce-200g",
    )
    return NodeRef(**{**defaults, **kw})


def verdict_of(output, floor):
    result = parse_output(output.text, tool=output.meta["tool"], ranks=output.meta["ranks"])
    return result, evaluate(result, floor, output.exit_code)


@pytest.mark.parametrize("accelerator", sorted(FLOORS))
@pytest.mark.parametrize("cards", [2, 3, 4, 6, 8])
def test_healthy_runs_parse_and_pass(accelerator, cards):
    driver = get_driver("simulated", delay_scale=0, seed=cards, failure_rate_scale=0)
    for _ in range(25):  # noise must never push a healthy node under its floor
        output = driver.readiness(node(accelerator), list(range(cards)))
        result, verdict = verdict_of(output, FLOORS[accelerator])
        assert result.ok_format, result.parse_errors
        assert result.warnings == [] or result.tool == "hccl_test"
        assert result.ranks == cards
        assert verdict.passed, (verdict.reasons, output.text)


@pytest.mark.parametrize(
    "accelerator,low,high",
    [
        ("h100-sxm-80g", 360, 480),
        ("h800-sxm-80g", 200, 215),
        ("a800-sxm-80g", 190, 220),
        ("ascend-910b", 150, 200),
    ],
)
def test_eight_card_bandwidth_in_spec_range(accelerator, low, high):
    driver = get_driver("simulated", delay_scale=0, seed=7, failure_rate_scale=0)
    values = []
    for _ in range(50):
        output = driver.readiness(node(accelerator), list(range(8)))
        values.append(verdict_of(output, 0)[0].busbw_largest_gbps)
    # The in-place/out-of-place jitter is ±0.5 %.
    assert low * 0.99 <= min(values) and max(values) <= high * 1.01
    assert len(set(values)) > 10  # noisy, not constant


def test_commands_match_spec():
    driver = get_driver("simulated", delay_scale=0, seed=1)
    nv = driver.readiness(node("h100-sxm-80g"), [0, 1, 2, 3])
    assert nv.meta["command"] == "all_reduce_perf -b 8G -e 8G -f 2 -g 4 -c 1"
    assert nv.meta["tool"] == "nccl-tests" and nv.meta["env"] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    hw = driver.readiness(node("ascend-910b"), list(range(8)))
    assert hw.meta["command"] == "all_reduce_test -b 8G -e 8G -p 8" and hw.meta["tool"] == "hccl_test"


@pytest.mark.parametrize("accelerator", sorted(FLOORS))
@pytest.mark.parametrize("fault", READINESS_FAULTS)
def test_each_forced_fault_fails(accelerator, fault):
    driver = get_driver("simulated", delay_scale=0, seed=3, failure_rate_scale=0)
    output = driver.readiness(node(accelerator), list(range(8)), forced_faults=[fault])
    _, verdict = verdict_of(output, FLOORS[accelerator])
    assert not verdict.passed
    expected = {
        "low_bandwidth": "below_floor",
        "data_errors": "data_errors",
        "nccl_error": "error_lines",
        "timeout": "exit_code",
        "truncated": "parse_error",
    }[fault]
    assert expected in verdict.codes, verdict.reasons


def test_faults_forced_in_constructor_per_node_and_cleared():
    bad = node("h100-sxm-80g", id="n-bad", hostname="gpu-bad")
    good = node("h100-sxm-80g", id="n-good", hostname="gpu-good")
    driver = get_driver(
        "simulated", delay_scale=0, seed=1, failure_rate_scale=0, forced_faults={"n-bad": ["low_bandwidth"]}
    )
    assert not verdict_of(driver.readiness(bad, range(8)), 235)[1].passed
    assert verdict_of(driver.readiness(good, range(8)), 235)[1].passed
    driver.clear_faults("n-bad")
    assert verdict_of(driver.readiness(bad, range(8)), 235)[1].passed
    driver.force("*", "nccl_error")
    assert not verdict_of(driver.readiness(good, range(8)), 235)[1].passed


def test_unknown_fault_is_rejected():
    driver = get_driver("simulated", delay_scale=0)
    with pytest.raises(ValueError):
        driver.readiness(node("h100-sxm-80g"), range(8), forced_faults=["cosmic_ray"])
    assert FAULTS == {"boot_failure", *READINESS_FAULTS}


def test_seed_makes_runs_reproducible():
    a = get_driver("simulated", delay_scale=0, seed=42).readiness(node("h800-sxm-80g"), range(8))
    b = get_driver("simulated", delay_scale=0, seed=42).readiness(node("h800-sxm-80g"), range(8))
    assert a.text == b.text and a.exit_code == b.exit_code


def test_random_failure_injection_rates():
    driver = get_driver("simulated", delay_scale=0, seed=11, failure_rate_scale=1)
    n, failed = 2000, 0
    for _ in range(n):
        failed += not verdict_of(driver.readiness(node("h100-sxm-80g"), range(8)), 235)[1].passed
    # low bandwidth 2 % + data errors 0.5 % ≈ 2.5 %.
    assert 0.01 < failed / n < 0.045


def test_no_random_failures_when_scaled_to_zero():
    driver = get_driver("simulated", delay_scale=0, seed=11, failure_rate_scale=0)
    assert all(
        verdict_of(driver.readiness(node("h100-sxm-80g"), range(8)), 235)[1].passed for _ in range(300)
    )


@pytest.mark.parametrize("accelerator", sorted(FLOORS))
def test_inter_node(accelerator):
    driver = get_driver("simulated", delay_scale=0, seed=5, failure_rate_scale=0)
    nodes = [node(accelerator, id=f"n{i}", hostname=f"node-{i:02d}") for i in range(2)]
    output = driver.inter_node(nodes, 8)
    result, verdict = verdict_of(output, 10)
    assert output.meta["ranks"] == 16 and result.ranks == 16
    assert result.ok_format and verdict.passed, (result.parse_errors, verdict.reasons)
    # 8 × 200 Gbit/s NICs ≈ 200 GB/s line rate: the fabric bounds the result.
    assert result.busbw_largest_gbps <= 200 * 0.92 * 1.01
    faulty = driver.inter_node(nodes, 8, forced_faults=["data_errors"])
    assert not verdict_of(faulty, 10)[1].passed
