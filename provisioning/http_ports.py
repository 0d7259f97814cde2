"""An instance's HTTP ports and where the platform's proxy finds them.

An instance declares ports: its images' (e.g. 8888 JupyterLab, 6006 TensorBoard) and the ones its users add.
Each is reached at `/proxy/<instance id>/<port>/…`; the upstream sees the same path the browser asked for
(the prefix kept), so an app that builds absolute links is started under that prefix (CARDMIX_PROXY_BASE).

Where a port lives: bare metal and a container on the host network listen on the node itself (node address +
port). A container in its own network has its declared ports published at prepare on node ports
CONTAINER_HTTP_PORT_BASE + first card × HTTP_PORTS_PER_INSTANCE + position (cards are held by one live group at a
time, so two containers never share one); the group keeps that map (NodeGroup.http_ports), so a port added
later is reachable after the next start.

JupyterLab's token is derived from SECRET_KEY and the instance id: the image gets it in its environment, the
proxy adds it to the requests it forwards, the user never sees it.
"""
import hashlib
import secrets

from django.conf import settings
from django.utils.crypto import salted_hmac

from .choices import InstanceKind

JUPYTER_TOKEN_SALT = "cardmix.provisioning.jupyter-token"
# A share link is the port's path with its secret in this query parameter (the proxy turns it into a cookie).
SHARE_PARAM = "cardmix_share"


def proxy_base(instance_id) -> str:
    """The path prefix of the instance's ports on the platform (`/proxy/<id>/`)."""
    return f"/proxy/{instance_id}/"


def port_path(instance_id, port: int) -> str:
    return f"{proxy_base(instance_id)}{port}/"


def jupyter_token(instance_id) -> str:
    """The token the instance's JupyterLab is started with (never shown: the proxy sends it)."""
    return salted_hmac(JUPYTER_TOKEN_SALT, str(instance_id), algorithm="sha256").hexdigest()


def share_url(instance_id, port: int, secret: str) -> str:
    """The path a share link opens (the caller makes it absolute)."""
    return f"{port_path(instance_id, port)}?{SHARE_PARAM}={secret}"


def share_secret() -> str:
    """A new share link's secret (shown once; the row keeps only its hash)."""
    return secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def declared_ports(instance, images) -> list[dict]:
    """[{"port", "name", "source"}]: the images' ports, then the user's, each port once, in that order."""
    ports, seen = [], set()
    for image in images:
        for entry in image.http_ports or ():
            if entry["port"] not in seen:
                seen.add(entry["port"])
                ports.append({"port": entry["port"], "name": entry.get("name", ""), "source": "image"})
    for entry in instance.http_ports or ():
        if entry["port"] not in seen:
            seen.add(entry["port"])
            ports.append({"port": entry["port"], "name": entry.get("name", ""), "source": "user"})
    return ports


def jupyter_port(images) -> int | None:
    """The JupyterLab port of the instance's images (the first that ships one)."""
    return next((image.jupyter_port for image in images if image.jupyter_port), None)


def published_ports(cards, ports: list[int]) -> dict[str, int]:
    """{"<container port>": node port} a container on `cards` publishes its declared ports on."""
    first = settings.CONTAINER_HTTP_PORT_BASE + min(cards) * settings.HTTP_PORTS_PER_INSTANCE
    return {str(port): first + i for i, port in enumerate(ports[:settings.HTTP_PORTS_PER_INSTANCE])}


def http_env(instance, images, cards, *, container: bool) -> dict[str, str]:
    """The instance's environment for its HTTP apps: the proxy prefix, JupyterLab's token and port, and (a
    container) the publishing map the agent applies as `-p node:container` (CARDMIX_HTTP_PORTS)."""
    env = {"CARDMIX_PROXY_BASE": proxy_base(instance.pk)}
    jport = jupyter_port(images)
    if jport:
        env.update(CARDMIX_JUPYTER_TOKEN=jupyter_token(instance.pk), CARDMIX_JUPYTER_PORT=str(jport))
    if container and cards:
        mapping = published_ports(cards, [p["port"] for p in declared_ports(instance, images)])
        env["CARDMIX_HTTP_PORTS"] = ",".join(f"{node}:{port}" for port, node in mapping.items())
    return env


def upstream(kind: str, group, port: int) -> tuple[str, int] | None:
    """(host, port) of the instance's `port` on its head group, or None (not published on this container)."""
    host = group.node.ssh_host or group.node.hostname
    if kind == InstanceKind.CONTAINER and group.ssh_port:  # its own network: the node port it was published on
        node_port = (group.http_ports or {}).get(str(port))
        return (host, node_port) if node_port else None
    return host, port
