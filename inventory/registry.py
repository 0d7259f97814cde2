"""Asking a container registry (the Docker Registry HTTP API v2 / OCI distribution) whether an image exists, what
its digest is and which CPU architectures it was built for, before an organization registers it as a custom image.

A registry that wants credentials answers 401 with WWW-Authenticate: Basic (a private registry) or Bearer (Docker
Hub, Harbor, GHCR: a token from its realm, asked for with the pull credentials). Every refusal is a RegistryError
naming the body field to fix: `reference` (no such repository or tag, a malformed reference, the wrong
architecture, an unreachable registry) or `credentials` (none given where they are needed, or refused).
"""
import base64
import hashlib
import json
import re
import socket
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.utils.translation import gettext

from core.addresses import address_internal, host_addresses

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
DOCKER_HUB = "registry-1.docker.io"
# name components and separators as the distribution spec allows them; a tag, or a digest.
_REFERENCE = re.compile(r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
                        r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


class RegistryError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


@dataclass(frozen=True)
class ImageRef:
    host: str  # e.g. registry.example.com:5000, or registry-1.docker.io
    repository: str  # e.g. team/trainer (library/ added for Docker Hub's official images)
    reference: str  # a tag or a digest

    def __str__(self):
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.host}/{self.repository}{sep}{self.reference}"


@dataclass(frozen=True)
class ManifestInfo:
    digest: str  # sha256:… of the manifest (or index) the reference names now
    architectures: tuple[str, ...]  # e.g. ("amd64", "arm64")
    size_bytes: int | None = None  # config + layers as stored (compressed); None for a multi-architecture index


def reference_parse(text: str) -> ImageRef:
    """`[host[:port]/]repository[:tag][@digest]`, like docker pull; the host is the first part when it has a dot,
    a port, or is localhost, else Docker Hub."""
    text = (text or "").strip()
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DOCKER_HUB, text
    match = _REFERENCE.match(path)
    if not text or len(text) > 255 or match is None:
        raise RegistryError("reference", gettext("Write the image as [registry/]repository[:tag][@sha256:digest], "
                                                 "e.g. registry.example.com/team/trainer:1.0."))
    repo = match["repo"]
    if host == DOCKER_HUB and "/" not in repo:
        repo = f"library/{repo}"
    return ImageRef(host, repo, match["digest"] or match["tag"] or "latest")


def _operator_named(host: str) -> bool:
    """A registry the operator configured (its node-network or test registries may be on internal addresses)."""
    bare = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    named = {*settings.CUSTOM_IMAGE_INSECURE_REGISTRIES, *settings.CUSTOM_IMAGE_REGISTRIES}
    return host in named or bare in {h.rsplit(":", 1)[0] for h in named}


def _address_guard(request: httpx.Request) -> None:
    """Every call (registry, token service, each redirect) goes to a public address unless the operator named the
    host: a customer's reference must not make the platform reach its own network (SSRF)."""
    host, port = request.url.host, request.url.port or (443 if request.url.scheme == "https" else 80)
    if _operator_named(f"{host}:{port}") or _operator_named(host):
        return
    try:
        addresses = host_addresses(host, port)
    except (socket.gaierror, UnicodeError):
        raise RegistryError("reference", gettext("The registry host %(host)s does not resolve.") % {"host": host}) from None
    if not addresses or any(address_internal(a) for a in addresses):
        raise RegistryError("reference", gettext("%(host)s is a loopback, private or link-local address; images come "
                                                 "from public registries or the ones the operator named.")
                            % {"host": host})


def _scheme(host: str) -> str:
    # Plain HTTP only for the registries the operator named (a registry on the node network, or loopback in tests).
    return "http" if host in settings.CUSTOM_IMAGE_INSECURE_REGISTRIES else "https"


def _challenge(header: str) -> tuple[str, dict]:
    scheme, _, params = header.partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


class _Session:
    """GETs against one repository, answering the registry's auth challenge once."""

    def __init__(self, ref: ImageRef, username: str, password: str):
        self.ref, self.auth = ref, (username, password) if username or password else None
        self.base = f"{_scheme(ref.host)}://{ref.host}/v2/{ref.repository}"
        self.client = httpx.Client(timeout=settings.CUSTOM_IMAGE_REGISTRY_TIMEOUT_SECONDS, follow_redirects=True,
                                   event_hooks={"request": [_address_guard]})
        self.headers: dict = {}

    def get(self, path: str, accept: tuple[str, ...] = ()) -> httpx.Response:
        headers = {**self.headers, **({"Accept": ", ".join(accept)} if accept else {})}
        try:
            response = self.client.get(f"{self.base}/{path}", headers=headers)
            if response.status_code == 401 and not self.headers:
                self.headers = self._authorize(response.headers.get("WWW-Authenticate", ""))
                response = self.client.get(f"{self.base}/{path}", headers={**headers, **self.headers})
        except httpx.HTTPError as exc:
            raise RegistryError("reference", gettext("The registry %(host)s did not answer: %(error)s.")
                                    % {"host": self.ref.host, "error": exc}) from None
        if response.status_code == 401:
            raise self._refused()
        return response

    def _refused(self) -> RegistryError:
        if self.auth is None:
            return RegistryError("credentials", gettext("%(host)s needs pull credentials for %(repository)s.")
                                 % {"host": self.ref.host, "repository": self.ref.repository})
        return RegistryError("credentials", gettext("%(host)s refused these credentials for %(repository)s: check the "
                                              "username and the password or token.")
                             % {"host": self.ref.host, "repository": self.ref.repository})

    def _authorize(self, header: str) -> dict:
        scheme, params = _challenge(header)
        if scheme == "basic":
            if self.auth is None:
                raise self._refused()
            basic = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            return {"Authorization": f"Basic {basic}"}
        if scheme == "bearer" and params.get("realm"):
            query = {k: params[k] for k in ("service", "scope") if k in params}
            query.setdefault("scope", f"repository:{self.ref.repository}:pull")
            try:
                answer = self.client.get(params["realm"], params=query, auth=self.auth)
            except httpx.HTTPError as exc:
                raise RegistryError("reference", gettext("%(host)s's token service did not answer: %(error)s.")
                                    % {"host": self.ref.host, "error": exc}) from None
            if answer.status_code in (401, 403):
                raise self._refused()
            try:
                token = answer.json().get("token") or answer.json().get("access_token")
            except ValueError:
                token = None
            if not token:
                raise RegistryError("reference", gettext("%(host)s's token service answered %(status)s without a token.")
                                    % {"host": self.ref.host, "status": answer.status_code})
            return {"Authorization": f"Bearer {token}"}
        raise RegistryError("reference", gettext("%(host)s asks for an authentication this platform does not speak "
                                                 "(%(scheme)s).") % {"host": self.ref.host, "scheme": scheme or "none"})

    def close(self):
        self.client.close()


def _json(response: httpx.Response, what: str, ref: ImageRef) -> dict:
    try:
        return json.loads(response.content)
    except ValueError:
        raise RegistryError("reference", gettext("%(host)s answered a %(what)s that is not JSON.")
                            % {"host": ref.host, "what": what}) from None


def manifest_check(reference: str, *, username: str = "", password: str = "",
                   architecture: str | None = None) -> ManifestInfo:
    """The image's digest and architectures, or RegistryError; with `architecture`, one built for it or an error."""
    ref = reference_parse(reference)
    if settings.CUSTOM_IMAGE_REGISTRIES and not _operator_named(ref.host):
        raise RegistryError("reference", gettext("Images come from %(registries)s on this platform, not %(host)s.")
                            % {"registries": ", ".join(settings.CUSTOM_IMAGE_REGISTRIES), "host": ref.host})
    session = _Session(ref, username, password)
    try:
        response = session.get(f"manifests/{ref.reference}", accept=INDEX_TYPES + MANIFEST_TYPES)
        if response.status_code == 404:
            raise RegistryError("reference", gettext("%(ref)s does not exist (no such repository or tag).") % {"ref": ref})
        if response.status_code != 200:
            raise RegistryError("reference", gettext("%(host)s answered %(status)s for %(ref)s.")
                                % {"host": ref.host, "status": response.status_code, "ref": ref})
        digest = response.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(
            response.content).hexdigest()
        body = _json(response, "manifest", ref)
        media = body.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        if media in INDEX_TYPES or "manifests" in body:
            archs = tuple(sorted({(m.get("platform") or {}).get("architecture", "") for m in body["manifests"]}
                                 - {"", "unknown"}))
            size = None
        else:
            config = (body.get("config") or {}).get("digest")
            if not config:
                raise RegistryError("reference", gettext("%(ref)s is not an image manifest (no config).") % {"ref": ref})
            blob = session.get(f"blobs/{config}")
            if blob.status_code != 200:
                raise RegistryError("reference", gettext("%(ref)s's image config is missing from %(host)s.")
                                    % {"ref": ref, "host": ref.host})
            archs = tuple(a for a in (_json(blob, "image config", ref).get("architecture"),) if a)
            size = sum(int(part.get("size") or 0) for part in [body["config"], *(body.get("layers") or [])])
    finally:
        session.close()
    if architecture and architecture not in archs:
        raise RegistryError("reference", gettext("%(ref)s is built for %(archs)s, not %(architecture)s.")
                            % {"ref": ref, "archs": ", ".join(archs) or gettext("no named architecture"),
                               "architecture": architecture})
    return ManifestInfo(digest, archs, size)
