"""An instance's HTTP ports and where the platform's proxy finds them.

An instance declares ports: its images' (e.g. 8888 JupyterLab, 6006 TensorBoard) and the ones its users add.
Each is reached at `/proxy/<instance id>/<port>/…` or, in subdomain mode (settings.PROXY_MODE), at
`<port>-<instance id hex>.<PROXY_BASE_DOMAIN>/…`; either way the upstream sees the path under that prefix, so an
app that builds absolute links is started under it (CARDMIX_PROXY_BASE) and works in both modes.

Where a port lives: bare metal and a container on the host network listen on the node itself (node address +
port). A container in its own network has its declared ports published at prepare on node ports
CONTAINER_HTTP_PORT_BASE + first card × HTTP_PORTS_PER_INSTANCE + position (cards are held by one live group at a
time, so two containers never share one); the group keeps that map (NodeGroup.http_ports). A port added while
it runs is not published (Docker fixes a container's port bindings when it is created): the proxy reaches it through
the container's sshd instead (console/port_tunnels.py), and the next start publishes it.

JupyterLab's token is derived from SECRET_KEY and the instance id: the image gets it in its environment, the
proxy adds it to the requests it forwards, the user never sees it.
"""
import hashlib
import re
import secrets
import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.crypto import salted_hmac

from .choices import InstanceKind

JUPYTER_TOKEN_SALT = "cardmix.provisioning.jupyter-token"
# A share link is the port's path with its secret in this query parameter (the proxy turns it into a cookie).
SHARE_PARAM = "cardmix_share"
PORT_LABEL = re.compile(r"(?P<port>[0-9]{1,5})-(?P<hex>[0-9a-f]{32})")


def proxy_base(instance_id) -> str:
    """The path prefix of the instance's ports on the platform (`/proxy/<id>/`)."""
    return f"/proxy/{instance_id}/"


def port_path(instance_id, port: int) -> str:
    return f"{proxy_base(instance_id)}{port}/"


def subdomain_mode() -> bool:
    """The operator's choice (settings.PROXY_MODE): each port on a host of its own rather than a path."""
    return settings.PROXY_MODE == "subdomain"


def port_host(instance_id, port: int) -> str:
    """`<port>-<instance id, 32 hex>.<PROXY_BASE_DOMAIN>`: one origin per port. The whole id, not its 8-character
    short form, so two instances never share an origin (and a cookie jar)."""
    return f"{port}-{uuid.UUID(str(instance_id)).hex}.{settings.PROXY_BASE_DOMAIN}"


def parse_port_host(host: str) -> tuple[str, int] | None:
    """(instance id, port) a request's Host names in subdomain mode, or None for any other host."""
    name = host.lower().rsplit(":", 1)[0]
    base = settings.PROXY_BASE_DOMAIN.rsplit(":", 1)[0]
    label, dot, rest = name.partition(".")
    if not dot or rest != base:
        return None
    found = PORT_LABEL.fullmatch(label)
    if not found or not 1 <= int(found["port"]) <= 65535:
        return None
    return str(uuid.UUID(found["hex"])), int(found["port"])


def port_url(instance_id, port: int) -> str:
    """Where a browser opens the port: the path on the platform, or (subdomain mode) its own origin."""
    if subdomain_mode():
        return f"{urlsplit(settings.SITE_URL).scheme or 'https'}://{port_host(instance_id, port)}/"
    return port_path(instance_id, port)


def upstream_path(instance_id, port: int, path: str) -> str:
    """The path the instance's app gets: always under its prefix (its apps were started with CARDMIX_PROXY_BASE),
    which a subdomain's address may leave out (`/lab` there is `/proxy/<id>/<port>/lab` upstream)."""
    prefix = port_path(instance_id, port)
    return path if path.startswith(prefix) else prefix + path.lstrip("/")


def jupyter_token(instance_id) -> str:
    """The token the instance's JupyterLab is started with (never shown: the proxy sends it)."""
    return salted_hmac(JUPYTER_TOKEN_SALT, str(instance_id), algorithm="sha256").hexdigest()


def share_url(instance_id, port: int, secret: str) -> str:
    """The address a share link opens (a path in path mode: the caller makes it absolute)."""
    return f"{port_url(instance_id, port)}?{SHARE_PARAM}={secret}"


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
