"""The instance page's Slurm card: partition, account, nodes and a ready-to-copy sbatch header for a hybrid that owns
its nodes; why there is none on shared nodes; the failure in words. (The partition on a real slurmctld:
tests/hardware/test_slurm_partitions.py.)"""
import html

import pytest

from console.views.instance_slurm import SHARED_NODES
from hardware import slurm
from provisioning.models import NodeGroup
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db
ITEMS = [{"accelerator": "h100-sxm-80g", "count": 8, "rate": 1_900_000},
         {"accelerator": "ascend-910b", "count": 8, "rate": 2_400_000}]


def _hybrid(owner, fleet, *, kind, cards, **kw):
    h100, _, ascend = fleet
    inst = InstanceFactory(organization=owner.organization, kind=kind, state="running", items=ITEMS,
                           images={"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}, **kw)
    for index, node in enumerate((h100, ascend)):
        NodeGroup.objects.create(instance=inst, item_index=index, accelerator=node.accelerator.slug, node=node,
                                 card_indices=list(range(cards)), card_ids=[], state="checked")
    return inst


def test_an_owned_hybrid_shows_its_partition_and_sbatch_header(web, owner, fleet, settings):
    settings.SLURM_SCONTROL = "scontrol"  # on; the page runs no command
    inst = _hybrid(owner, fleet, kind="bare_metal", cards=8)
    page = web.get(f"/instances/{inst.pk}/").content.decode()
    name, account = slurm.partition_name(inst.pk), slurm.account_name(owner.organization_id)
    assert f'<code id="slurm-partition">{name}</code>' in page and f'<code id="slurm-account">{account}</code>' in page
    nodes = sorted(slurm.slurm_node_name(n.hostname) for n in (fleet[0], fleet[2]))
    assert f'<span id="slurm-nodes">{", ".join(nodes)}</span>' in page
    header = html.unescape(page.split('<pre id="sbatch-header">')[1].split("</pre>")[0]).splitlines()
    assert header == ["#!/bin/bash", f"#SBATCH --job-name={name}-job",  # the Ascend component first
                      f"#SBATCH --partition={name} --account={account} --nodes=1 --gres=npu:8 --ntasks-per-node=8",
                      "#SBATCH hetjob",
                      f"#SBATCH --partition={name} --account={account} --nodes=1 --gpus-per-node=8 --ntasks-per-node=8"]
    assert 'data-copy="#sbatch-header"' in page and 'id="slurm-failed"' not in page


def test_a_hybrid_on_shared_nodes_says_why_it_has_no_partition(web, owner, fleet, settings):
    settings.SLURM_SCONTROL = "scontrol"
    inst = _hybrid(owner, fleet, kind="container", cards=4)
    page = web.get(f"/instances/{inst.pk}/").content.decode()
    assert 'id="slurm-none"' in page and html.escape(SHARED_NODES) in page
    assert "#SBATCH" not in page


def test_a_failed_partition_is_said_in_words(web, owner, fleet, settings):
    settings.SLURM_SCONTROL = "scontrol"
    name = "hybrid-0123abcd"
    inst = _hybrid(owner, fleet, kind="bare_metal", cards=8,
                   state_reason=f"slurm_partition_failed: create {name}: slurm_load_partitions: connect failure")
    page = web.get(f"/instances/{inst.pk}/").content.decode()
    assert ('<div class="small muted" id="state-reason">Running, but its Slurm partition could not be created yet; '
            "Cardmix tries again automatically.</div>") in page
    assert 'id="slurm-failed"' in page and "connect failure" not in page  # the controller's answer is for operators


def test_no_slurm_card_when_slurm_is_off(web, owner, fleet, settings):
    settings.SLURM_SCONTROL = ""
    inst = _hybrid(owner, fleet, kind="bare_metal", cards=8)
    page = web.get(f"/instances/{inst.pk}/").content.decode()
    assert 'id="slurm"' not in page and "#SBATCH" not in page


def test_slurm_failures_in_words():
    from console.state_reasons import reason_for_people

    assert reason_for_people("slurm_partition_failed: delete hybrid-0123abcd: Access/permission denied",
                             "bare_metal") == "Its Slurm partition could not be removed yet; Cardmix tries again automatically."
    assert reason_for_people("slurm_partition_failed: create hybrid-0123abcd: x", "container").startswith(
        "Running, but its Slurm partition could not be created yet")
