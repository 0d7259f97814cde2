"""Headless Chromium on the instance page: open the terminal, type `echo hello`, see `hello` (a real sshd as the
instance's); open JupyterLab from its button (a real JupyterLab behind the proxy); no CSP violation on the way."""
import os

import pytest

from provisioning.http_ports import jupyter_token, port_path
from provisioning.platform_keys import platform_public_key
from tests.access.world import SSHD, loopback_instance, start_jupyter, start_sshd, stop
from tests.e2e.conftest import Shots
from tests.factories.tenancy import session_key_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240), pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0,
                                 reason="needs openssh-server (bin/system-deps) and root")]
HELLO_ROW = ("() => [...document.querySelectorAll('#terminal .xterm-rows > div')]"
             ".some(r => r.textContent.trim() === 'hello')")


def test_the_terminal_echoes_hello_and_jupyterlab_opens_from_its_button(e2e_env, asgi_server, chromium,
                                                                       member_factory, tmp_path):
    from django.conf import settings

    member = member_factory(role="member")
    instance = loopback_instance(member.organization, ssh_port=1)  # a container in its own network
    sshd, ssh_port = start_sshd(tmp_path, platform_public_key(instance))
    jupyter, jupyter_port = start_jupyter(tmp_path, base_url=port_path(instance.pk, 8888),
                                          token=jupyter_token(instance.pk))
    instance.groups.update(ssh_port=ssh_port, http_ports={"8888": jupyter_port})
    try:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session_key_for(member),
                              "url": asgi_server.url}])
        page = context.new_page()
        violations = []
        page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
        shots = Shots(page, "access")
        page.goto(f"{asgi_server.url}/instances/{instance.pk}/")
        page.click("#terminal-open")
        page.wait_for_selector("#terminal[data-connected='1']", timeout=30_000)
        page.click("#terminal .terminal-screen")
        page.keyboard.type("echo hello")
        page.keyboard.press("Enter")
        page.wait_for_function(HELLO_ROW, timeout=20_000)
        shots("terminal")
        assert violations == []

        with context.expect_page() as opened:
            page.click("#open-jupyter")
        lab = opened.value
        lab.wait_for_selector("#jp-main-dock-panel", timeout=90_000)  # JupyterLab's shell rendered
        assert lab.url.startswith(f"{asgi_server.url}{port_path(instance.pk, 8888)}lab")
        assert "token" not in lab.url  # the proxy sent it; the user never saw it
        Shots(lab, "access")("jupyterlab")
    finally:
        stop(sshd)
        stop(jupyter)


class Relay:
    """The browser's network: a TCP relay in front of the server. `down()` drops every connection through it and
    refuses new ones (each attempt's time is kept) until `up()` — a network blip, as the browser sees one."""

    def __init__(self, target_port: int):
        import socket
        import threading

        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.open: set = set()
        self.refused_at: list[float] = []
        self.is_down = False
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading
        import time

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.is_down:
                self.refused_at.append(time.monotonic())
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            self._drop(s)

    def _drop(self, s):
        import socket

        with self.lock:
            self.open.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def down(self):
        self.is_down = True
        with self.lock:
            cut = list(self.open)
        for s in cut:
            self._drop(s)

    def up(self):
        self.is_down = False

    def close(self):
        self.listener.close()
        self.down()


def _row(text: str) -> str:
    return ("() => [...document.querySelectorAll('#terminal .xterm-rows > div')]"
            f".some(r => r.textContent.trim() === {text!r})")


def test_the_terminal_reconnects_after_a_network_blip_to_the_same_shell(e2e_env, asgi_server, chromium,
                                                                       member_factory, tmp_path):
    import time

    from django.conf import settings

    member = member_factory(role="member")
    instance = loopback_instance(member.organization, ssh_port=1)
    sshd, ssh_port = start_sshd(tmp_path, platform_public_key(instance))
    instance.groups.update(ssh_port=ssh_port)
    relay = Relay(asgi_server.port)
    try:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session_key_for(member),
                              "url": relay.url}])
        page = context.new_page()
        page.goto(f"{relay.url}/instances/{instance.pk}/")
        page.click("#terminal-open")
        page.wait_for_selector("#terminal[data-connected='1'][data-shell='new']", timeout=30_000)
        page.click("#terminal .terminal-screen")
        page.keyboard.type("export MARK=kept$((6 * 7)); echo marked")
        page.keyboard.press("Enter")
        page.wait_for_function(_row("marked"), timeout=20_000)
        page.keyboard.type("sleep 3; echo while-away-$((40 + 2))")
        page.keyboard.press("Enter")
        time.sleep(0.3)

        relay.down()  # the network goes: the socket drops, and reconnecting fails for a while
        page.wait_for_selector("#terminal:not([data-connected='1'])", timeout=10_000)
        assert "reconnecting" in page.inner_text("#terminal .terminal-status")
        time.sleep(4)
        relay.up()
        page.wait_for_selector("#terminal[data-connected='1'][data-shell='reattached']", timeout=30_000)
        assert page.inner_text("#terminal .terminal-status") == "Reconnected to the same shell"
        # Backoff: 0.5 s, 1 s, 2 s… between the attempts the network refused.
        # (Chromium may try a refused connection twice at once: tries within 0.3 s are one attempt.)
        refused = [t for i, t in enumerate(relay.refused_at) if i == 0 or t - relay.refused_at[i - 1] > 0.3]
        assert len(refused) >= 3, relay.refused_at
        gaps = [b - a for a, b in zip(refused, refused[1:], strict=False)]
        assert all(later > 1.5 * earlier for earlier, later in zip(gaps, gaps[1:], strict=False)), gaps

        page.wait_for_function(_row("while-away-42"), timeout=20_000)  # printed while the page was away
        page.click("#terminal .terminal-screen")
        page.keyboard.type("echo mark=$MARK")
        page.keyboard.press("Enter")
        page.wait_for_function(_row("mark=kept42"), timeout=20_000)  # the variable of the shell before the blip
        Shots(page, "access")("terminal-reconnected")
    finally:
        relay.close()
        stop(sshd)
