"""The Redfish driver against a real Redfish service (sushy-emulator --fake, htpasswd auth) plus a real
agent process for the booted node: one-time PXE + power on, release = power off, then node cleaning."""
import threading

import pytest
import sushy
from django.db import connection

from hardware.models import AgentCommand, BmcCredential
from inventory.choices import NodeState
from inventory.services import node_set_state
from provisioning.drivers import get_driver
from provisioning.services.cleaning import node_clean
from provisioning.services.fleet import node_ref
from tenancy.models import AuditEvent
from tests.factories.hardware import agent_node, bmc_credential

from .conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]
FAST = {"power_timeout_s": 30, "agent_timeout_s": 30, "poll_s": 0.2, "agent_options": {"poll_s": 0.05,
                                                                                        "timeout_s": 30}}


def emulator_system(emu, index):
    root = sushy.Sushy(emu["url"], username=emu["username"], password=emu["password"], verify=False)
    return root.get_system(f"/redfish/v1/Systems/{emu['systems'][index]['uuid']}")


def redfish_node(emu, index, hostname, credential="bmc-emulator"):
    node, token = agent_node(driver="redfish", hostname=hostname,
                             bmc_address=f"{emu['url']}/redfish/v1/Systems/{emu['systems'][index]['uuid']}",
                             bmc_credentials_ref=credential)
    return node, token


def test_pxe_boot_power_on_agent_prepare_power_off_and_cleaning(live_server, sushy_emulator, start_agent,
                                                                settings):
    settings.AGENT_COMMAND_POLL_SECONDS = 0.05
    settings.REDFISH_POWER_TIMEOUT_SECONDS, settings.REDFISH_AGENT_TIMEOUT_SECONDS = 30, 30
    bmc_credential(name="bmc-emulator", username=sushy_emulator["username"], password=sushy_emulator["password"])
    assert sushy_emulator["password"].encode() not in bytes(BmcCredential.objects.get().password_encrypted)
    node, token = redfish_node(sushy_emulator, 1, "bm-node-01.test")
    driver = get_driver("redfish", **FAST)
    ref = node_ref(node)
    result = {}

    def prepare():
        try:
            result["out"] = driver.prepare(ref, list(range(8)), kind="bare_metal", image="pytorch-2.3-cuda12.3",
                                           ssh_keys=["ssh-ed25519 AAAAC3Nza test@cardmix"],
                                           env={"NCCL_DEBUG": "WARN"}, instance_id="bm-instance-1")
        finally:
            connection.close()

    worker = threading.Thread(target=prepare)
    worker.start()
    system = emulator_system(sushy_emulator, 1)

    def booted():
        system.refresh(force=True)
        return system.power_state == sushy.PowerState.ON and system.boot.target == sushy.BootSource.PXE

    wait_for(booted, timeout=30, interval=0.3, what="the emulated system to boot from PXE")
    # (The emulator stores the target but ignores BootSourceOverrideEnabled: it always reports Continuous.)
    assert worker.is_alive()  # waiting for the agent of the freshly booted node
    other = emulator_system(sushy_emulator, 0)
    assert other.power_state == sushy.PowerState.OFF  # only the node's own system was touched

    agent = start_agent(live_server.url, token)
    worker.join(timeout=60)
    out = result["out"]
    assert out.exit_code == 0, out.text + agent.log_tail()
    assert "boot override Pxe once" in out.text and "power On after" in out.text
    assert "agent registered after boot" in out.text and "bare metal ready for bm-instance-1" in out.text
    assert sushy_emulator["password"] not in out.text

    released = driver.release(ref, [], instance_id="bm-instance-1")
    assert released.exit_code == 0, released.text
    system.refresh(force=True)
    assert system.power_state == sushy.PowerState.OFF

    node_set_state(node=node, state=NodeState.CLEANING, reason="cleaning after a bare-metal instance")
    cleaned = node_clean(node=node, previous_state=NodeState.AVAILABLE)  # deploy image again; the agent wipes
    assert cleaned.state == NodeState.AVAILABLE, cleaned.state_reason
    steps = list(AuditEvent.objects.filter(target_id=str(node.pk), action__startswith="node.")
                 .exclude(action__startswith="node.agent").order_by("created_at").values_list("action", flat=True))
    assert steps[-2:] == ["node.cleaning", "node.available"]


def test_wrong_credentials_and_unknown_system_fail_cleanly(sushy_emulator, settings):
    bmc_credential(name="bmc-wrong", username=sushy_emulator["username"], password="not-the-password")
    bmc_credential(name="bmc-right", username=sushy_emulator["username"], password=sushy_emulator["password"])
    wrong, _ = redfish_node(sushy_emulator, 0, "bm-wrong.test", credential="bmc-wrong")
    driver = get_driver("redfish", **FAST)
    out = driver.prepare(node_ref(wrong), list(range(8)), kind="bare_metal", image="x", ssh_keys=[],
                         env={}, instance_id="i-1")
    assert out.exit_code != 0
    assert "AccessError" in out.text and "401" in out.text, out.text
    assert "not-the-password" not in out.text

    unknown, _ = agent_node(driver="redfish", hostname="bm-unknown.test", bmc_credentials_ref="bmc-right",
                            bmc_address=f"{sushy_emulator['url']}/redfish/v1/Systems/no-such-system")
    out = driver.release(node_ref(unknown), [], instance_id="i-2")
    assert out.exit_code != 0
    assert "ResourceNotFoundError" in out.text and "404" in out.text, out.text

    missing, _ = agent_node(driver="redfish", hostname="bm-nocred.test", bmc_address=sushy_emulator["url"],
                            bmc_credentials_ref="nope")
    out = driver.wipe(node_ref(missing))
    assert out.exit_code == 78 and "BMC credential 'nope' not found" in out.text
    assert emulator_system(sushy_emulator, 0).power_state == sushy.PowerState.OFF


def test_a_container_on_every_card_is_removed_by_the_agent_and_the_node_stays_on(live_server, sushy_emulator,
                                                                                  start_agent, settings):
    settings.AGENT_COMMAND_POLL_SECONDS = 0.05
    bmc_credential(name="bmc-emulator", username=sushy_emulator["username"], password=sushy_emulator["password"])
    node, token = redfish_node(sushy_emulator, 2, "bm-node-02.test")
    system = emulator_system(sushy_emulator, 2)
    system.reset_system(sushy.ResetType.ON)
    wait_for(lambda: system.refresh(force=True) or system.power_state == sushy.PowerState.ON, timeout=30,
             interval=0.3, what="the emulated system to power on")
    start_agent(live_server.url, token)
    driver = get_driver("redfish", **FAST)
    ref = node_ref(node)
    prepared = driver.prepare(ref, list(range(8)), kind="container", image="pytorch-2.3-cuda12.3", ssh_keys=[],
                              env={}, instance_id="ctr-1", ssh_port=30000)
    assert prepared.exit_code == 0, prepared.text
    # All eight cards, but a container: before, "every card" was read as bare metal and the node powered off.
    released = driver.release(ref, list(range(8)), instance_id="ctr-1")
    assert released.exit_code == 0, released.text
    assert AgentCommand.objects.filter(node=node, kind="release", payload__name="cardmix-ctr-1-0").exists()
    system.refresh(force=True)
    assert system.power_state == sushy.PowerState.ON
