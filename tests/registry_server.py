"""A real container registry on loopback for the custom-image tests: Debian's `docker-registry` (distribution) with
htpasswd auth, and pushes through its HTTP API (blob uploads, manifest PUT), so it truly holds the images."""
import hashlib
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

REGISTRY = shutil.which("docker-registry")
HTPASSWD = shutil.which("htpasswd")
AVAILABLE = bool(REGISTRY and HTPASSWD)
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
USER, PASSWORD = "puller", "right-pass"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RegistryServer:
    """`docker-registry serve` in `root`, wanting USER / PASSWORD; `.host` is its host:port."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.auth = root, (USER, PASSWORD)
        subprocess.run([HTPASSWD, "-Bbc", str(root / "htpasswd"), USER, PASSWORD], check=True, capture_output=True)
        port = free_port()
        self.host = f"127.0.0.1:{port}"
        (root / "config.yml").write_text(json.dumps({  # YAML is a superset of JSON
            "version": 0.1, "log": {"level": "error"},
            "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
            "auth": {"htpasswd": {"realm": "test", "path": str(root / "htpasswd")}}}))
        self.log = open(root / "registry.log", "wb")  # noqa: SIM115 - the child writes it until stop()
        self.proc = subprocess.Popen([REGISTRY, "serve", str(root / "config.yml")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                httpx.get(f"http://{self.host}/v2/", timeout=2)
                break
            except httpx.HTTPError:
                assert self.proc.poll() is None and time.time() < deadline, (root / "registry.log").read_text()
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()

    def push(self, repository: str, tag: str, architecture: str = "amd64", layer: bytes = b"not really a tarball"):
        """A one-layer image; → (manifest digest, config + layer size in bytes)."""
        return push(self.host, self.auth, repository, tag, architecture, layer)

    def manifest(self, repository: str, tag: str) -> httpx.Response:
        return httpx.get(f"http://{self.host}/v2/{repository}/manifests/{tag}", auth=self.auth,
                         headers={"Accept": OCI_MANIFEST})


def push(host: str, auth, repository: str, tag: str, architecture: str = "amd64",
         layer: bytes = b"not really a tarball") -> tuple[str, int]:
    """Push a one-layer image through the registry API (plain HTTP); → (manifest digest, config + layer bytes)."""
    base = f"http://{host}/v2/{repository}"

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        started = httpx.post(f"{base}/blobs/uploads/", auth=auth)
        assert started.status_code == 202, started.text
        location = httpx.URL(started.headers["Location"])
        location = location if location.is_absolute_url else httpx.URL(f"http://{host}").join(location)
        done = httpx.put(location.copy_merge_params({"digest": digest}), content=data, auth=auth,
                         headers={"Content-Type": "application/octet-stream"})
        assert done.status_code == 201, done.text
        return {"digest": digest, "size": len(data)}

    config = json.dumps({"architecture": architecture, "os": "linux", "rootfs": {"type": "layers",
                                                                               "diff_ids": []}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       **blob(layer)}]}).encode()
    put = httpx.put(f"{base}/manifests/{tag}", content=manifest, auth=auth, headers={"Content-Type": OCI_MANIFEST})
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(manifest).hexdigest(), len(config) + len(layer)


@pytest.fixture
def image_registry(tmp_path_factory, settings):
    """A RegistryServer for one test, asked over plain HTTP (CUSTOM_IMAGE_INSECURE_REGISTRIES); import the fixture
    into a conftest to use it."""
    if not AVAILABLE:
        pytest.skip("needs docker-registry and apache2-utils (bin/system-deps)")
    server = RegistryServer(tmp_path_factory.mktemp("registry"))
    settings.CUSTOM_IMAGE_INSECURE_REGISTRIES = [server.host]
    yield server
    server.stop()
