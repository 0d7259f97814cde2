"""Headless Chromium on the instance page: open the terminal, type `echo hello`, see `hello` (a real sshd as the
instance's); open JupyterLab from its button (a real JupyterLab behind the proxy); no CSP violation on the way."""
import os

import pytest

from provisioning.http_ports import jupyter_token, port_path
from provisioning.platform_keys import platform_public_key
from tests.access.world import SSHD, loopback_instance, start_jupyter, start_sshd, stop
from tests.e2e.conftest import Shots
from tests.factories.tenancy import session_key_for

pytestmark = [pytest.mark.pg, pytest.mark.browser, pytest.mark.timeout(240), pytest.mark.django_db(transaction=True),
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
