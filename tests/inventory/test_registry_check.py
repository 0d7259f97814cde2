"""inventory/registry.py against a real registry on loopback (Debian's docker-registry, htpasswd auth): an image
pushed with plain HTTP calls is found with its digest and architecture; a missing tag, a wrong architecture,
missing and wrong credentials are each an error naming the field to fix."""
import hashlib
import json
import shutil
import socket
import subprocess
import time

import httpx
import pytest

from inventory.registry import RegistryError, manifest_check, reference_parse

REGISTRY = shutil.which("docker-registry")
HTPASSWD = shutil.which("htpasswd")
pytestmark = pytest.mark.skipif(not (REGISTRY and HTPASSWD), reason="needs docker-registry and apache2-utils")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def registry(tmp_path, settings):
    """(host:port, auth) of a registry that wants user `puller`, password `right-pass`."""
    subprocess.run([HTPASSWD, "-Bbc", str(tmp_path / "htpasswd"), "puller", "right-pass"], check=True,
                   capture_output=True)
    port = _free_port()
    (tmp_path / "config.yml").write_text(json.dumps({  # YAML is a superset of JSON
        "version": 0.1, "log": {"level": "error"},
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"},
        "auth": {"htpasswd": {"realm": "test", "path": str(tmp_path / "htpasswd")}}}))
    log = open(tmp_path / "registry.log", "wb")  # noqa: SIM115 - the child writes it until the end
    proc = subprocess.Popen([REGISTRY, "serve", str(tmp_path / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    host = f"127.0.0.1:{port}"
    settings.CUSTOM_IMAGE_INSECURE_REGISTRIES = [host]
    deadline = time.time() + 30
    while True:
        try:
            httpx.get(f"http://{host}/v2/", timeout=2)
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "registry.log").read_text()
            time.sleep(0.2)
    yield host, ("puller", "right-pass")
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


def _push(host, auth, repository, tag, architecture) -> str:
    """A one-layer image through the API's blob uploads and manifest PUT; the manifest's digest."""
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
                                       **blob(b"not really a tarball")}]}).encode()
    put = httpx.put(f"{base}/manifests/{tag}", content=manifest, auth=auth, headers={"Content-Type": OCI_MANIFEST})
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def test_a_pushed_image_is_found_with_its_digest_and_architecture(registry):
    host, auth = registry
    digest = _push(host, auth, "team/trainer", "1.0", "amd64")
    info = manifest_check(f"{host}/team/trainer:1.0", username=auth[0], password=auth[1], architecture="amd64")
    assert info.digest == digest and info.architectures == ("amd64",)
    by_digest = manifest_check(f"{host}/team/trainer@{digest}", username=auth[0], password=auth[1])
    assert by_digest.digest == digest


def test_each_refusal_names_the_field_to_fix(registry):
    host, auth = registry
    _push(host, auth, "team/trainer", "1.0", "arm64")
    cases = [
        (dict(reference=f"{host}/team/trainer:2.0", username=auth[0], password=auth[1]), "reference",
         "does not exist"),
        (dict(reference=f"{host}/team/nothing:1.0", username=auth[0], password=auth[1]), "reference",
         "does not exist"),
        (dict(reference=f"{host}/team/trainer:1.0", username=auth[0], password=auth[1], architecture="amd64"),
         "reference", "built for arm64, not amd64"),
        (dict(reference=f"{host}/team/trainer:1.0", username=auth[0], password="wrong"), "credentials",
         "refused these credentials"),
        (dict(reference=f"{host}/team/trainer:1.0"), "credentials", "needs pull credentials"),
        (dict(reference=f"{host}/Team/UPPER:1.0"), "reference", "Write the image as"),
        (dict(reference=f"127.0.0.1:{_free_port()}/team/trainer:1.0"), "reference", "did not answer"),
    ]
    for kwargs, field, says in cases:
        with pytest.raises(RegistryError) as refused:
            manifest_check(kwargs.pop("reference"), **kwargs)
        assert (refused.value.field, says in refused.value.message) == (field, True), (kwargs, refused.value.message)


def test_references_parse_like_docker_pull():
    assert str(reference_parse("ubuntu")) == "registry-1.docker.io/library/ubuntu:latest"
    assert str(reference_parse("pytorch/pytorch:2.3")) == "registry-1.docker.io/pytorch/pytorch:2.3"
    assert str(reference_parse("localhost:5000/a/b")) == "localhost:5000/a/b:latest"
    ref = reference_parse("reg.example.com/team/app@sha256:" + "a" * 64)
    assert (ref.host, ref.repository, ref.reference) == ("reg.example.com", "team/app", "sha256:" + "a" * 64)
    for bad in ("", "UPPER/case", "a b", "reg.example.com/", "x" * 300):
        with pytest.raises(RegistryError) as refused:
            reference_parse(bad)
        assert refused.value.field == "reference"
