"""`manage.py ssh_gateway`: the platform's SSH gateway in the foreground (provisioning/gateway/); SIGTERM or
Ctrl-C closes its sessions (each audited) and stops it."""
import asyncio
import signal

from django.conf import settings
from django.core.management.base import BaseCommand

from provisioning.gateway.server import Gateway, host_key


class Command(BaseCommand):
    help = "Run the SSH gateway: one address and port for every instance's sshd."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default=settings.SSH_GATEWAY_ADDR)
        parser.add_argument("--port", type=int, default=settings.SSH_GATEWAY_PORT)
        parser.add_argument("--host-key", default=settings.SSH_GATEWAY_HOST_KEY)

    def handle(self, *args, addr, port, host_key, **options):
        asyncio.run(self._serve(addr, port, host_key))

    async def _serve(self, addr: str, port: int, key_path: str) -> None:
        gateway = Gateway(key=host_key(key_path), recheck_seconds=settings.SSH_GATEWAY_RECHECK_SECONDS)
        await gateway.start(addr, port)
        self.stdout.write(f"SSH gateway listening on {addr}:{port}", ending="\n")
        self.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        recheck = asyncio.ensure_future(gateway.recheck_forever())
        await stop.wait()
        recheck.cancel()
        await gateway.stop()
