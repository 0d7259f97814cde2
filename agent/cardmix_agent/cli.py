"""The command line (the same options since the agent was one file) and main."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from pathlib import Path

from .agent import Agent
from .constants import ENROLL_ARG, EXIT_CONFIG, VERSION, log
from .enroll import enroll, enroll_secret_of, token_file_check


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Cardmix node agent")
    p.add_argument("--report", action="store_true",
                   help="print the heartbeat this host would send (JSON) and exit: 0 healthy, 1 degraded; "
                        "needs no server or token")
    p.add_argument("--server", default=os.environ.get("CARDMIX_SERVER", ""),
                   help="platform URL, e.g. https://cardmix.example.com; default $CARDMIX_SERVER")
    p.add_argument("--token", default=os.environ.get("CARDMIX_AGENT_TOKEN", ""),
                   help="node token (cmxn_…); default $CARDMIX_AGENT_TOKEN")
    p.add_argument("--token-file", help="read the node token from this file (0600, the agent's own); an enrolling "
                                        "agent writes the token it gets there")
    p.add_argument("--kernel-cmdline", default="/proc/cmdline",
                   help="where the deploy boot's one-time enrollment secret (cardmix.enroll=cmxe_…) is looked for")
    p.add_argument("--enroll-retry-seconds", type=float, default=600.0,
                   help="keep retrying the enrollment this long through network errors and 5xx")
    p.add_argument("--runtime", choices=["docker", "process"], default="docker")
    p.add_argument("--vendor", choices=["auto", "nvidia", "huawei"], default="auto")
    p.add_argument("--readiness-bin", default="", help="all_reduce_perf / all_reduce_test, or their directory")
    p.add_argument("--readiness-timeout", type=float, default=1800.0)
    p.add_argument("--prepare-timeout", type=float, default=1800.0, help="docker run (image pull included)")
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    p.add_argument("--npu-smi", default="npu-smi")
    p.add_argument("--dmesg", default="dmesg", help="reads the kernel log's Xid lines (else journalctl -k)")
    p.add_argument("--journalctl", default="journalctl")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--docker", default="docker")
    p.add_argument("--ip", default="ip", help="iproute2's ip (cluster VXLAN interfaces)")
    p.add_argument("--bridge", default="bridge", help="iproute2's bridge (VXLAN flood entries)")
    p.add_argument("--nsenter", default="nsenter", help="runs the cluster probe in a container's network namespace")
    p.add_argument("--rdma-dir", default="/dev/infiniband", help="RDMA devices given to containers when present")
    p.add_argument("--cluster-dir", default="/etc/cardmix", help="bare metal: where the cluster hostfile goes")
    p.add_argument("--shm-size", default="32g",
                   help="each container's own /dev/shm (a cap, not a reservation: tmpfs pages are charged as used); "
                        "NCCL needs about 1g, the rest is for data loader workers")
    p.add_argument("--authorized-keys", default="/root/.ssh/authorized_keys", help="bare metal: where keys go")
    p.add_argument("--process-command", default="", help="process runtime: what stands in for the container")
    p.add_argument("--cgroup-root", default="auto",
                   help="process runtime: cgroup v2 mount for CPU and memory limits ('auto': found in "
                        "/proc/self/mounts; 'none': rlimits only)")
    p.add_argument("--storage-root", default="/mnt/cardmix-storage",
                   help="the zone's shared storage root (NFS, CephFS, JuiceFS, Lustre…) mounted at the same path on "
                        "every node; volumes live in its volumes/, datasets in datasets/ (a prepare may name another)")
    p.add_argument("--storage-quota", choices=["auto", "xfs", "ext4", "ceph", "none"], default="auto",
                   help="how a volume's size is enforced: a project quota (xfs_quota, setquota -P), CephFS's "
                        "ceph.quota.max_bytes, or none (usage over size is flagged); auto: by the root's filesystem")
    p.add_argument("--xfs-quota", default="xfs_quota")
    p.add_argument("--setquota", default="setquota")
    p.add_argument("--chattr", default="chattr")
    p.add_argument("--usage-interval", type=float, default=300.0,
                   help="seconds between walks of a volume's usage (the heartbeat reports the last one)")
    p.add_argument("--wipe-disk", action="append", default=[], help="scratch disk to blkdiscard on wipe")
    p.add_argument("--state-dir", default="/var/lib/cardmix-agent")
    p.add_argument("--hostname", default="")
    p.add_argument("--heartbeat-interval", type=float, default=0.0, help="seconds; 0 = what the platform says")
    p.add_argument("--poll-interval", type=float, default=2.0)
    p.add_argument("--http-timeout", type=float, default=30.0)
    p.add_argument("--result-retry-seconds", type=float, default=900.0,
                   help="keep retrying a command's result this long (longer than the platform's command timeout)")
    p.add_argument("--start-retry-seconds", type=float, default=60.0,
                   help="keep retrying a command's start acknowledgement this long (its lease ends it sooner)")
    p.add_argument("--ca-file", default="", help="CA bundle for a private platform certificate")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    if args.report:
        return args
    if not args.server:
        p.error("the platform URL is required: --server or $CARDMIX_SERVER")
    args.enroll_secret = enroll_secret_of(args.kernel_cmdline)
    if args.token_file and os.path.exists(args.token_file):
        problem = token_file_check(Path(args.token_file))
        if problem:
            p.error(problem)
        args.token = Path(args.token_file).read_text().strip()
    if not args.token.startswith("cmxn_") and not args.enroll_secret:
        p.error("a node token (cmxn_…) is required: --token, --token-file or $CARDMIX_AGENT_TOKEN "
                f"(or an enrollment secret, {ENROLL_ARG}cmxe_…, on the deploy boot's kernel command line)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    agent = Agent(args)
    if args.report:
        report = agent.report()
        report.pop("smi_output")  # what was parsed is the point; the raw text is in the heartbeat
        print(json.dumps(report, indent=2))
        return 0 if report["health"] == "ok" and report["devices"] else 1

    def shutdown(signum, frame):
        agent.stop.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if args.enroll_secret:
        agent.token = enroll(args) or args.token
        if not agent.token.startswith("cmxn_"):
            log.error("no node token: the enrollment was refused and --token-file holds none")
            return EXIT_CONFIG
    log.info("cardmix-agent %s: server %s, runtime %s", VERSION, agent.server, args.runtime)
    return agent.serve()
