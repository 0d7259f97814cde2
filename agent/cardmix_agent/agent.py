"""The Agent: one object holding the options and state dir, made of the parts each module defines."""
from __future__ import annotations

import argparse
import ssl
import threading
from pathlib import Path

from .checks import Checks
from .client import PlatformClient
from .cluster import Cluster
from .commands import CommandLoop
from .files import make_private_dir
from .health import HealthProbe
from .host import HostReport
from .instances import Instances
from .journal import Journal
from .keys import BareMetalKeys
from .runtime import RUNTIMES
from .volumes import Volumes


class Agent(PlatformClient, HostReport, HealthProbe, CommandLoop, Journal, Instances, BareMetalKeys, Cluster, Checks,
            Volumes):
    """Heartbeats in one thread, commands in the other."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.server = args.server.rstrip("/")
        self.token = args.token
        self.state_dir = Path(args.state_dir)
        self.journal_dir = self.state_dir / "journal"  # one file per command started and not yet answered
        if not getattr(args, "report", False):  # a report only reads: it must work unprivileged
            # Only the agent reads its state (journal, the operator's saved keys): 0700, whatever it was.
            make_private_dir(self.state_dir)
            self.state_dir.chmod(0o700)
            (self.state_dir / "instances").mkdir(parents=True, exist_ok=True)
            self.journal_dir.mkdir(parents=True, exist_ok=True)
        self.stop = threading.Event()
        self.heartbeat_interval = args.heartbeat_interval or 15.0
        self.vendor = args.vendor
        self.ssl_context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
        # An Agent built on hand-made args (tests) may name no runtime: docker, the command line's default.
        self.runtime = RUNTIMES[getattr(args, "runtime", "docker")](self)
