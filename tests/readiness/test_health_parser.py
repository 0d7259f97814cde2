"""Device health parser for one-card groups."""

from provisioning.drivers.sim_output import ascend_health, nvidia_health
from provisioning.readiness import parse_device_health


def test_nvidia_healthy_and_faulty():
    assert parse_device_health(nvidia_health(0, "NVIDIA H100 80GB HBM3"), 0).healthy
    bad = parse_device_health(nvidia_health(0, "NVIDIA H100 80GB HBM3", uncorrectable=2, pending=True), 0)
    assert not bad.healthy and set(bad.issues) == {"ecc_uncorrectable: 2", "row_remap_pending"}


def test_ascend_healthy_and_alarm():
    assert parse_device_health(ascend_health(3), 0).healthy
    assert parse_device_health(ascend_health(3, "Alarm"), 0).issues == ("npu_health: Alarm",)


def test_unrecognised_or_failed_command():
    assert not parse_device_health("", 0).healthy
    assert not parse_device_health(ascend_health(0), 124).healthy
