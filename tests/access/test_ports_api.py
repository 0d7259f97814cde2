"""The ports and share-link endpoints, the proxy's role check (Django test client: refusals never reach an
upstream), the instance's environment for its apps, and the agent publishing a container's ports."""
import pytest
from django.conf import settings

from provisioning.http_ports import http_env, jupyter_token, published_ports
from provisioning.models import PortShare
from tenancy.models import AuditEvent
from tests.access.world import loopback_instance
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import login_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(member_factory, catalog):
    member = member_factory(role="member")
    return member, InstanceFactory(organization=member.organization, state="running")


def test_ports_list_the_images_then_the_users_and_refuse_bad_ones(running, token_client_for):
    member, instance = running
    client = token_client_for(member)
    url = f"/api/v1/instances/{instance.pk}/ports/"
    body = client.get(url).json()["results"]
    assert [(p["port"], p["source"], p["jupyter"]) for p in body] == [(8888, "image", True), (6006, "image", False)]
    assert body[0]["path"] == f"/proxy/{instance.pk}/8888/"
    added = client.post(url, {"port": 7860, "name": "gradio"}, format="json")
    assert added.status_code == 201 and added.json()["results"][-1] == {
        "port": 7860, "name": "gradio", "source": "user", "path": f"/proxy/{instance.pk}/7860/",
        "url": f"/proxy/{instance.pk}/7860/", "jupyter": False}
    assert AuditEvent.objects.filter(action="instance.port_added").count() == 1
    assert client.post(url, {"port": 7860}, format="json").status_code == 409  # already declared
    assert client.post(url, {"port": 8888}, format="json").status_code == 409  # the image's
    refused = client.post(url, {"port": 22}, format="json")
    assert refused.status_code == 400 and "port" in refused.json()["error"]["details"]
    unknown = client.post(url, {"port": 9000, "colour": "red"}, format="json")
    assert unknown.status_code == 400 and "colour" in str(unknown.json()["error"]["details"])
    assert client.post(url, {"port": 70000}, format="json").status_code == 400
    assert client.delete(f"{url}6006/").status_code == 404  # an image's port stays
    assert [p["port"] for p in client.delete(f"{url}7860/").json()["results"]] == [8888, 6006]


def test_an_instance_declares_at_most_the_configured_number_of_ports(running, token_client_for):
    member, instance = running
    client = token_client_for(member)
    url = f"/api/v1/instances/{instance.pk}/ports/"
    for port in range(9000, 9000 + settings.HTTP_PORTS_PER_INSTANCE - 2):
        assert client.post(url, {"port": port}, format="json").status_code == 201
    over = client.post(url, {"port": 9999}, format="json")
    assert over.status_code == 400 and "port" in over.json()["error"]["details"]


def test_a_share_link_is_shown_once_listed_and_revoked(running, token_client_for):
    member, instance = running
    client = token_client_for(member)
    made = client.post(f"/api/v1/instances/{instance.pk}/ports/8888/shares/", {"expires_in_hours": 2}, format="json")
    assert made.status_code == 201
    share = made.json()
    assert f"/proxy/{instance.pk}/8888/?cardmix_share=" in share["url"]
    secret = share["url"].split("cardmix_share=")[1]
    assert secret not in str(PortShare.objects.values().get())  # only its hash is kept
    listed = client.get(f"/api/v1/instances/{instance.pk}/ports/8888/shares/").json()["results"]
    assert [s["id"] for s in listed] == [share["id"]] and listed[0]["url"] is None
    assert client.post(f"/api/v1/instances/{instance.pk}/ports/5000/shares/", {}, format="json").status_code == 404
    too_long = client.post(f"/api/v1/instances/{instance.pk}/ports/8888/shares/", {"expires_in_hours": 10_000},
                           format="json")
    assert too_long.status_code == 400 and "expires_in_hours" in too_long.json()["error"]["details"]
    revoked = client.delete(f"/api/v1/instances/{instance.pk}/shares/{share['id']}/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    again = client.delete(f"/api/v1/instances/{instance.pk}/shares/{share['id']}/").json()
    assert again["revoked_at"] == revoked.json()["revoked_at"]  # stays revoked at its first time


@pytest.mark.parametrize("role,allowed", [("owner", True), ("admin", True), ("member", True), ("billing", False),
                                          ("viewer", False)])
def test_the_proxy_lets_in_the_roles_that_use_instances(role, allowed, member_factory, catalog):
    member = member_factory(role=role)
    instance = loopback_instance(member.organization, kind="bare_metal")  # nothing listens on 127.0.0.1:8888…
    response = login_client(member).get(f"/proxy/{instance.pk}/8888/api/status")
    assert response.status_code == (502 if allowed else 404)  # …so an allowed caller gets the upstream's silence
    assert login_client(member).get(f"/proxy/{instance.pk}/5000/").status_code == 404  # not a declared port


@pytest.mark.parametrize("role,allowed", [("owner", True), ("admin", True), ("member", True), ("billing", False),
                                          ("viewer", False)])
def test_the_open_hand_off_lets_in_the_roles_that_use_instances_in_both_modes(role, allowed, member_factory, catalog,
                                                                           settings):
    member = member_factory(role=role)
    instance = loopback_instance(member.organization, kind="bare_metal")
    url = f"/instances/{instance.pk}/ports/8888/open/"
    path_mode = login_client(member).get(url, {"next": "lab"})
    assert path_mode.status_code == (302 if allowed else 404)
    if allowed:
        assert path_mode["Location"] == f"/proxy/{instance.pk}/8888/lab"
        # A `next` that a browser would read as another host is dropped.
        assert login_client(member).get(url, {"next": "/\\evil.example"})["Location"] == f"/proxy/{instance.pk}/8888/"
    settings.PROXY_MODE, settings.PROXY_BASE_DOMAIN = "subdomain", "ports.example.net"
    handed = login_client(member).get(url, {"next": "lab"})
    assert handed.status_code == (302 if allowed else 404)
    if allowed:
        assert handed["Location"].startswith(f"http://8888-{instance.pk.hex}.ports.example.net/__cardmix_auth__?ticket=")
        page = login_client(member).get(f"/instances/{instance.pk}/").content.decode()
        assert f'href="/instances/{instance.pk}/ports/8888/open/?next=lab"' in page  # Open JupyterLab
        assert f"http://6006-{instance.pk.hex}.ports.example.net/" in page  # the ports list shows their hosts
    assert login_client(member).get(f"/proxy/{instance.pk}/8888/").status_code == 404  # no port on this origin
    other = member_factory(role="owner")
    assert login_client(other).get(url).status_code == 404


def test_the_proxy_answers_404_for_a_stopped_instance_and_an_unpublished_port(member_factory, catalog):
    member = member_factory(role="owner")
    instance = loopback_instance(member.organization, ssh_port=30001, http_ports={"8888": 31000})
    client = login_client(member)
    # Declared, not published on the container: reached through its sshd, which does not answer here.
    unpublished = client.get(f"/proxy/{instance.pk}/6006/")
    assert unpublished.status_code == 502 and b"through its sshd" in unpublished.content
    type(instance).objects.filter(pk=instance.pk).update(state="stopped")
    assert client.get(f"/proxy/{instance.pk}/8888/").status_code == 404


def test_the_instance_page_shows_access_with_a_strict_csp(member_factory, catalog):
    member = member_factory(role="member")
    instance = loopback_instance(member.organization, kind="bare_metal")
    response = login_client(member).get(f"/instances/{instance.pk}/")
    page = response.content.decode()
    assert f'href="/proxy/{instance.pk}/8888/lab"' in page and 'id="terminal-open"' in page
    csp = response["Content-Security-Policy"]
    assert "unsafe-inline" not in csp and "'nonce-" in csp
    nonce = csp.split("'nonce-")[1].split("'")[0]
    assert f'<meta name="csp-style-nonce" content="{nonce}">' in page
    viewer = member_factory(role="viewer", organization=member.organization)
    assert 'id="access"' not in login_client(viewer).get(f"/instances/{instance.pk}/").content.decode()


def test_the_environment_gives_jupyter_its_token_prefix_and_a_containers_ports(running):
    _, instance = running
    from inventory.selectors import images_named

    images = images_named(instance.images.values())
    env = http_env(instance, images, [3], container=True)
    first = settings.CONTAINER_HTTP_PORT_BASE + 3 * settings.HTTP_PORTS_PER_INSTANCE
    assert env == {"CARDMIX_PROXY_BASE": f"/proxy/{instance.pk}/", "CARDMIX_JUPYTER_TOKEN": jupyter_token(instance.pk),
                   "CARDMIX_JUPYTER_PORT": "8888", "CARDMIX_HTTP_PORTS": f"{first}:8888,{first + 1}:6006"}
    assert published_ports([3, 4], [8888, 6006]) == {"8888": first, "6006": first + 1}
    assert "CARDMIX_HTTP_PORTS" not in http_env(instance, images, [3], container=False)
    assert jupyter_token(instance.pk) != jupyter_token(InstanceFactory().pk)


def test_the_agent_publishes_a_containers_http_ports_in_its_own_network_only(tmp_path):
    from agent.cardmix_agent.instances import http_ports_of
    from tests.hardware.test_units import make_agent

    env = {"CARDMIX_HTTP_PORTS": "31024:8888,31025:6006,bad,1:99999"}
    assert http_ports_of({"env": env}) == {"8888": 31024, "6006": 31025}
    runtime = make_agent(tmp_path).runtime
    own = runtime.docker_run_argv({"instance_id": "i1", "cards": [3], "image": "x", "vendor": "nvidia",
                                   "collective": "nccl", "ssh_port": 30003, "env": env}, tmp_path / "keys")
    published = [own[i + 1] for i, a in enumerate(own) if a == "-p"]
    assert published == ["30003:22", "31024:8888", "31025:6006"]
    host = runtime.docker_run_argv({"instance_id": "i2", "cards": [3], "image": "x", "vendor": "nvidia",
                                    "collective": "nccl", "env": env}, tmp_path / "keys")
    assert "-p" not in host and "--network" in host  # the host's network: its ports are the node's already


def test_operators_set_an_images_ports_and_jupyter_port(member_factory, token_client_for, catalog):
    operator = member_factory(role="owner")
    operator.user.is_staff = True
    operator.user.save(update_fields=["is_staff"])
    client = token_client_for(operator)
    made = client.post("/api/v1/admin-api/images/", {"slug": "comfyui", "name": "ComfyUI", "vendors": ["nvidia"],
                                                     "http_ports": [{"port": 8188, "name": "ComfyUI"}]}, format="json")
    assert made.status_code == 201 and made.json()["http_ports"] == [{"port": 8188, "name": "ComfyUI"}]
    assert made.json()["jupyter_port"] is None
    bad = client.post("/api/v1/admin-api/images/", {"slug": "x", "name": "x", "vendors": ["nvidia"],
                                                    "http_ports": [{"port": 0, "nmae": "typo"}]}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()["error"]["details"]) == {"http_ports.0.port", "http_ports.0.nmae"}
    listed = {i["slug"]: i for i in client.get("/api/v1/images/").json()["results"]}
    assert listed["pytorch-2.3-cuda12.3"]["jupyter_port"] == 8888


def test_an_instance_cannot_set_the_platforms_cookies_or_cookies_outside_its_port():
    from django.http import HttpResponse

    from console.proxy_access import cookie_header_without_platform
    from console.views.proxy import _upstream_cookies

    response = HttpResponse()
    _upstream_cookies(response, [f"{settings.SESSION_COOKIE_NAME}=stolen; Path=/", "_xsrf=abc; Path=/",
                                 "ok=1; Path=/proxy/i/8888/lab", "bad cookie \\x00"], prefix="/proxy/i/8888/")
    assert set(response.cookies) == {"_xsrf", "ok"}
    assert response.cookies["_xsrf"]["path"] == "/proxy/i/8888/"
    assert response.cookies["ok"]["path"] == "/proxy/i/8888/lab"
    header = f"{settings.SESSION_COOKIE_NAME}=s; {settings.CSRF_COOKIE_NAME}=c; cardmix_share=x; _xsrf=abc"
    assert cookie_header_without_platform(header) == "_xsrf=abc"
