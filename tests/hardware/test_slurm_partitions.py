"""A hybrid's Slurm partition over its lifecycle, against a real slurmctld (with munged): only over nodes the
instance owns, open only to its organization's account, shown in the API and the console, removed when it stops,
and a failing controller surfaced on the instance (state reason, email) and retried by the reconciler."""
import subprocess

import pytest

from hardware import slurm
from inventory.catalog_seed import seed_catalog
from provisioning.models import Instance
from provisioning.services.reconciler import reconcile
from provisioning.services.slurm_partitions import SLURM_FAILURE
from provisioning.stop_keeps import stop_reason
from provisioning.tasks import instance_advance
from tests.factories.inventory import NodeFactory, ZoneFactory, accelerator
from tests.factories.provisioning import funded

pytestmark = [pytest.mark.django_db, pytest.mark.slurm]
URL = "/api/v1/instances/"
IMAGES = {"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}


def hybrid(kind: str, cards: int) -> dict:
    return {"name": f"{kind}-hybrid", "kind": kind, "images": IMAGES,
            "items": [{"accelerator": "ascend-910b", "count": cards}, {"accelerator": "h800-sxm-80g", "count": cards}]}


def _fleet_on(controller, settings, monkeypatch) -> dict:
    """The fleet of the controller's Slurm nodes: gpu-a01/02 (H800) and npu-a01/02 (910B), 8 cards each."""
    monkeypatch.setenv("SLURM_CONF", str(controller["conf"]))
    settings.SLURM_SCONTROL = controller["scontrol"]
    settings.SIMULATOR_FAILURE_SCALE = 0
    settings.SIMULATOR_DELAY_SCALE = 0
    seed_catalog()
    zone = ZoneFactory(slug="zone-a", name="zone-a")
    for prefix, slug in (("gpu", "h800-sxm-80g"), ("npu", "ascend-910b")):
        for i in (1, 2):
            NodeFactory(zone=zone, accelerator=accelerator(slug), hostname=f"{prefix}-a{i:02d}.test", card_count=8)
    return controller


@pytest.fixture
def cluster(slurm_cluster, settings, monkeypatch):
    """A real controller without accounting, and the fleet of its nodes."""
    return _fleet_on(slurm_cluster, settings, monkeypatch)


@pytest.fixture
def tenant(member_factory, session_client_for):
    """new() → (membership, logged-in client) of a funded owner of a new organization."""
    def new():
        member = funded(member_factory(role="owner"))
        return member, session_client_for(member)
    return new


def partition(cluster, name) -> dict | None:
    """The controller's fields of a partition, or None when it has none of that name."""
    shown = subprocess.run([cluster["scontrol"], "--oneliner", "show", "partition", name], env=cluster["env"],
                           capture_output=True, text=True)
    if shown.returncode:
        assert "not found" in (shown.stdout + shown.stderr).lower(), shown.stderr
        return None
    return dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f)


def hostnames(cluster, nodes: str) -> list[str]:
    out = subprocess.run([cluster["scontrol"], "show", "hostnames", nodes], env=cluster["env"], capture_output=True,
                         text=True, check=True).stdout
    return sorted(out.split())


def run(client, body) -> dict:
    created = client.post(URL, body, format="json")
    assert created.status_code == 201, created.json()
    assert instance_advance(created.json()["id"]) == "running"
    return client.get(f"{URL}{created.json()['id']}/").json()


def test_partition_covers_only_owned_nodes_for_the_org_account_and_goes_on_stop(cluster, tenant,
                                                                               django_capture_on_commit_callbacks):
    owner_a, client_a = tenant()
    owner_b, client_b = tenant()
    bare = run(client_a, hybrid("bare_metal", 8))
    account_a = slurm.account_name(owner_a.organization_id)
    own_nodes = sorted(n["node"].split(".")[0] for n in bare["nodes"])
    assert len(own_nodes) == 2
    assert bare["slurm_partition"]["account"] == account_a
    assert bare["slurm_partition"]["nodes"] == own_nodes
    name = bare["slurm_partition"]["name"]
    shown = partition(cluster, name)
    assert hostnames(cluster, shown["Nodes"]) == own_nodes  # the instance's nodes and no other
    assert shown["AllowAccounts"] == account_a and shown["State"] == "UP"

    # B's container hybrid takes half of each remaining node: other tenants may get the rest, so no partition.
    shared = run(client_b, hybrid("container", 4))
    assert {n["node"].split(".")[0] for n in shared["nodes"]}.isdisjoint(own_nodes)
    assert shared["slurm_partition"] is None
    shared_name = slurm.partition_name(shared["id"])
    assert partition(cluster, shared_name) is None
    page = client_b.get(f"/instances/{shared['id']}/").content.decode()
    assert 'id="slurm-none"' in page and "share nodes with other tenants" in page and "#SBATCH" not in page
    # One made for it before this rule (AllowAccounts=ALL) is removed by the reconciler's pass, A's is kept.
    made = subprocess.run([cluster["scontrol"], "create", f"PartitionName={shared_name}", "Nodes=gpu-a02,npu-a02"],
                          env=cluster["env"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    with django_capture_on_commit_callbacks(execute=True):
        stats = reconcile()
    assert stats.get("slurm_deleted") == 1 and not stats.get("slurm_failed"), stats
    assert partition(cluster, shared_name) is None
    assert partition(cluster, name)["AllowAccounts"] == account_a
    # Another tenant's console never shows A's partition: A's instance is not theirs (404).
    assert client_b.get(f"/instances/{bare['id']}/").status_code == 404

    assert client_a.post(f"{URL}{bare['id']}/stop/").status_code == 202
    assert instance_advance(bare["id"]) == "stopped"
    assert partition(cluster, name) is None
    assert client_a.get(f"{URL}{bare['id']}/").json()["slurm_partition"] is None


def test_container_hybrid_on_whole_nodes_gets_a_partition_shown_with_its_header(cluster, tenant):
    owner, client = tenant()
    body = run(client, hybrid("container", 8))
    info = body["slurm_partition"]
    assert info is not None and info["account"] == slurm.account_name(owner.organization_id)
    shown = partition(cluster, info["name"])
    assert hostnames(cluster, shown["Nodes"]) == info["nodes"] and shown["AllowAccounts"] == info["account"]
    page = client.get(f"/instances/{body['id']}/").content.decode()
    assert f'<code id="slurm-partition">{info["name"]}</code>' in page
    assert (f"#SBATCH --partition={info['name']} --account={info['account']} --nodes=1 --gpus-per-node=8"
            in page)
    assert f"--account={info['account']} --nodes=1 --gres=npu:8" in page
    assert client.delete(f"{URL}{body['id']}/").status_code == 202
    assert instance_advance(body["id"]) == "terminated"
    assert partition(cluster, info["name"]) is None


def test_a_failing_create_is_a_state_reason_and_one_email_and_the_reconciler_retries(
        cluster, tenant, settings, tmp_path, mailoutbox, django_capture_on_commit_callbacks):
    failing = tmp_path / "scontrol"
    failing.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
    failing.chmod(0o755)
    settings.SLURM_SCONTROL = str(failing)
    owner, client = tenant()
    created = client.post(URL, hybrid("bare_metal", 8), format="json").json()
    with django_capture_on_commit_callbacks(execute=True):
        assert instance_advance(created["id"]) == "running"  # Slurm never holds the instance back
    name = slurm.partition_name(created["id"])
    body = client.get(f"{URL}{created['id']}/").json()
    assert body["state"] == "running"
    assert body["state_reason"] == (f"{SLURM_FAILURE}: create {name}: slurm_load_partitions: Unable to contact "
                                    "slurm controller")
    assert len(mailoutbox) == 1 and mailoutbox[0].to == [owner.user.email]
    assert name in mailoutbox[0].body and "could not be created" in mailoutbox[0].subject
    page = client.get(f"/instances/{created['id']}/").content.decode()
    assert "its Slurm partition could not be created yet; Cardmix tries again automatically." in page
    assert 'id="slurm-failed"' in page

    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile().get("slurm_unreadable") == 1  # still failing: nothing changed, no second email
    assert len(mailoutbox) == 1

    settings.SLURM_SCONTROL = cluster["scontrol"]  # the controller answers again
    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile().get("slurm_created") == 1
    assert partition(cluster, name)["AllowAccounts"] == slurm.account_name(owner.organization_id)
    assert Instance.objects.get(pk=created["id"]).state_reason == "readiness passed"
    assert len(mailoutbox) == 1


def test_a_failing_delete_is_shown_on_the_stopped_instance_until_a_pass_removes_it(
        cluster, tenant, settings, tmp_path, mailoutbox, django_capture_on_commit_callbacks):
    owner, client = tenant()
    body = run(client, hybrid("bare_metal", 8))
    name = body["slurm_partition"]["name"]
    refusing = tmp_path / "scontrol"  # the real scontrol, except that it refuses to delete
    refusing.write_text(f'#!/bin/sh\nif [ "$1" = delete ]; then echo "Access/permission denied" >&2; exit 1; fi\n'
                        f'exec {cluster["scontrol"]} "$@"\n')
    refusing.chmod(0o755)
    settings.SLURM_SCONTROL = str(refusing)
    assert client.post(f"{URL}{body['id']}/stop/").status_code == 202
    assert instance_advance(body["id"]) == "stopped"
    assert partition(cluster, name) is not None
    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile().get("slurm_failed") == 1
    inst = Instance.objects.get(pk=body["id"])
    assert inst.state == "stopped"
    assert inst.state_reason == f"{SLURM_FAILURE}: delete {name}: Access/permission denied"
    assert len(mailoutbox) == 1 and "could not be removed" in mailoutbox[0].subject
    assert mailoutbox[0].to == [owner.user.email]

    settings.SLURM_SCONTROL = cluster["scontrol"]
    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile().get("slurm_deleted") == 1
    assert partition(cluster, name) is None
    # Back to the stop's own reason (what a bare-metal stop keeps), from the instance's latest event.
    assert Instance.objects.get(pk=body["id"]).state_reason == stop_reason("bare_metal")
    assert len(mailoutbox) == 1


def test_with_slurmdbd_only_the_org_account_can_submit_to_its_partition(slurm_accounting_cluster, settings,
                                                                       monkeypatch, tenant, tmp_path):
    """With accounting, as a production controller runs: Cardmix adds the organization's account (SLURM_SACCTMGR)
    and the partition allows only it. A user associated with that account submits the header the API shows; the
    same user under another organization's account, or under root's, is refused by slurmctld on submission."""
    cluster = _fleet_on(slurm_accounting_cluster, settings, monkeypatch)
    settings.SLURM_SACCTMGR = cluster["sacctmgr"]
    env = cluster["env"]
    owner_a, client_a = tenant()
    owner_b, _ = tenant()
    body = run(client_a, hybrid("bare_metal", 8))
    info = body["slurm_partition"]
    account_a, account_b = slurm.account_name(owner_a.organization_id), slurm.account_name(owner_b.organization_id)
    assert partition(cluster, info["name"])["AllowAccounts"] == account_a
    shown = subprocess.run([cluster["sacctmgr"], "-n", "-P", "show", "account", account_a, "format=account"],
                           env=env, capture_output=True, text=True)
    assert shown.stdout.split() == [account_a], shown  # made by Cardmix before the partition
    assert slurm.account_ensure(account_a).ok  # again: it exists, which is done
    assert slurm.account_ensure(account_b).ok
    for account in (account_a, account_b):  # the submitting user (root here) may use either account
        added = subprocess.run([cluster["sacctmgr"], "-i", "add", "user", "root", f"account={account}"], env=env,
                               capture_output=True, text=True)
        assert added.returncode == 0, added.stdout + added.stderr

    script = tmp_path / "job.sh"
    script.write_text(info["sbatch_header"] + "hostname\n")
    ours = subprocess.run(["sbatch", "--hold", "--parsable", str(script)], env=env, capture_output=True, text=True)
    assert ours.returncode == 0, ours.stderr
    job = ours.stdout.strip().split(";")[0]
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%P|%a"], env=env, capture_output=True, text=True)
    assert sorted(queued.stdout.split()) == [f"{info['name']}|{account_a}"] * 2, queued.stdout
    for other in (account_b, "root"):
        theirs = subprocess.run(["sbatch", "--hold", f"--account={other}", "-p", info["name"], "--nodes=1",
                                 "--wrap=hostname"], env=env, capture_output=True, text=True)
        assert theirs.returncode != 0, theirs.stdout
        assert "Invalid account or account/partition combination" in theirs.stderr, theirs.stderr
    subprocess.run(["scancel", job], env=env)
