"""Provisioning timings, boot failures, health checks and topology of the simulated driver."""

import pytest

from provisioning.drivers import Driver, DriverOutput, NodeRef, driver_names, get_driver
from provisioning.drivers.sim_profiles import DEV, REALISTIC
from provisioning.readiness import parse_device_health

H100 = NodeRef(id="n1", hostname="gpu-a01", accelerator="h100-sxm-80g", vendor="nvidia", collective="nccl")
A800 = NodeRef(id="n3", hostname="gpu-c01", accelerator="a800-sxm-80g", vendor="nvidia", collective="nccl")
ASCEND = NodeRef(id="n2", hostname="npu-a01", accelerator="ascend-910b", vendor="huawei", collective="hccl")
PREPARE = dict(
    image="pytorch-2.3-cuda12.3",
    ssh_keys=["ssh-ed25519 AAAA test"],
    env={"NCCL_DEBUG": "WARN"},
    instance_id="i-1",
)


class RecordingSleep:
    """Stands in for time.sleep and remembers what it was asked to sleep."""

    def __init__(self):
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def never_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s with delay_scale=0")


def test_registry():
    assert "simulated" in driver_names()
    driver = get_driver("simulated", delay_scale=0)
    assert isinstance(driver, Driver) and driver.name == "simulated"
    with pytest.raises(LookupError):
        get_driver("no-such-driver")


def test_dev_profile_is_realistic_divided_by_60():
    assert DEV.delay_fields() == REALISTIC.delay_fields()
    for name in REALISTIC.delay_fields():
        low, high = getattr(REALISTIC, name)
        assert getattr(DEV, name) == pytest.approx((low / 60, high / 60))
    assert (DEV.boot_failure_rate, DEV.low_bandwidth_rate, DEV.data_errors_rate) == (0.01, 0.02, 0.005)


def test_realistic_defaults_match_spec():
    assert REALISTIC.container_start == (20, 60)
    assert REALISTIC.bmc_power_on_post == (120, 240)
    assert REALISTIC.pxe_deploy == (180, 360)
    assert REALISTIC.os_boot == (60, 120)
    assert REALISTIC.readiness == (60, 120)


def test_dev_sleeps_one_sixtieth_of_realistic_for_the_same_seed():
    slept = {}
    for profile in ("realistic", "dev"):
        sleep = RecordingSleep()
        driver = get_driver("simulated", profile=profile, seed=9, sleep=sleep, failure_rate_scale=0)
        driver.prepare(H100, range(8), kind="bare_metal", **PREPARE)
        driver.readiness(H100, range(8))
        slept[profile] = sleep.calls
    assert len(slept["dev"]) == len(slept["realistic"]) == 4
    assert slept["dev"] == pytest.approx([s / 60 for s in slept["realistic"]])
    assert 360 <= sum(slept["realistic"][:3]) <= 720  # POST + PXE + boot: 6–12 min


def test_delay_scale_zero_never_sleeps():
    driver = get_driver("simulated", profile="realistic", delay_scale=0, seed=1, sleep=never_sleep)
    outputs = [
        driver.prepare(H100, range(8), kind="bare_metal", **PREPARE),
        driver.prepare(H100, [0, 1], kind="container", **PREPARE),
        driver.readiness(H100, range(8)),
        driver.health_check(H100, 0),
        driver.inter_node([H100, H100], 8),
        driver.topology(H100),
        driver.release(H100, [0, 1], instance_id="i-1"),
        driver.wipe(H100),
    ]
    assert all(isinstance(o, DriverOutput) and o.duration_s == 0 for o in outputs)
    assert all(o.meta["modeled_s"] > 0 for o in outputs)


def test_delay_scale_multiplies_sleep():
    sleep = RecordingSleep()
    driver = get_driver("simulated", profile="realistic", delay_scale=0.5, seed=2, sleep=sleep)
    output = driver.prepare(H100, [0], kind="container", **PREPARE)
    assert sleep.calls == [pytest.approx(output.duration_s)]
    assert 10 <= output.duration_s <= 30 and output.meta["modeled_s"] == pytest.approx(2 * output.duration_s)


@pytest.mark.parametrize("kind", ["container", "bare_metal"])
def test_prepare_and_boot_failure(kind):
    driver = get_driver("simulated", delay_scale=0, seed=4, failure_rate_scale=0)
    ok = driver.prepare(H100, range(8), kind=kind, **PREPARE)
    assert ok.exit_code == 0 and ok.text
    assert ok.meta["ssh_keys"] == 1 and "ssh-ed25519" not in str(ok.meta)  # keys are not echoed back
    failed = driver.prepare(H100, range(8), kind=kind, forced_faults=["boot_failure"], **PREPARE)
    assert failed.exit_code != 0 and failed.text.strip()


def test_random_boot_failures_about_one_percent():
    driver = get_driver("simulated", delay_scale=0, seed=8)
    failures = sum(driver.prepare(H100, [0], kind="container", **PREPARE).exit_code != 0 for _ in range(3000))
    assert 10 <= failures <= 60


@pytest.mark.parametrize("ref", [H100, ASCEND], ids=["nvidia", "ascend"])
def test_health_check(ref):
    driver = get_driver("simulated", delay_scale=0, seed=1, failure_rate_scale=0)
    ok = driver.health_check(ref, 3)
    assert parse_device_health(ok.text, ok.exit_code).healthy
    assert str(3) in ok.meta["command"]
    for fault in ("data_errors", "timeout", "truncated"):
        bad = driver.health_check(ref, 3, forced_faults=[fault])
        assert not parse_device_health(bad.text, bad.exit_code).healthy, fault


def test_topology():
    driver = get_driver("simulated", delay_scale=0)
    nv = driver.topology(H100)
    assert "NV18" in nv.text and "NVLink" in nv.text and nv.meta["command"] == "nvidia-smi topo -m"
    assert nv.text.count("GPU7") >= 2
    assert "NV8" in driver.topology(A800).text
    hw = driver.topology(ASCEND)
    assert "HCCS" in hw.text and "NPU7" in hw.text and hw.meta["command"] == "npu-smi info -t topo"


def test_release_and_wipe():
    driver = get_driver("simulated", delay_scale=0)
    assert driver.release(H100, [0, 1], instance_id="i-1").exit_code == 0
    assert "power Off" in driver.release(H100, [], instance_id="i-1").text  # bare metal: no cards
    # A container on all eight cards is still a container: removing it must not power the node off.
    whole = driver.release(H100, list(range(8)), instance_id="i-1")
    assert "container for i-1 stopped" in whole.text and "power" not in whole.text
    assert driver.wipe(H100).exit_code == 0
