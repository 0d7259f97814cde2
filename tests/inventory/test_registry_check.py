"""inventory/registry.py against a real registry on loopback (Debian's docker-registry, htpasswd auth): an image
pushed with plain HTTP calls is found with its digest and architecture; a missing tag, a wrong architecture,
missing and wrong credentials are each an error naming the field to fix."""
import pytest

from inventory.registry import RegistryError, manifest_check, reference_parse
from tests.registry_server import AVAILABLE, RegistryServer, free_port, push

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="needs docker-registry and apache2-utils")


@pytest.fixture
def registry(tmp_path, settings):
    """(host:port, auth) of a registry that wants user `puller`, password `right-pass`."""
    server = RegistryServer(tmp_path / "registry")
    settings.CUSTOM_IMAGE_INSECURE_REGISTRIES = [server.host]
    yield server.host, server.auth
    server.stop()


def _push(host, auth, repository, tag, architecture) -> str:
    return push(host, auth, repository, tag, architecture)[0]


def test_a_pushed_image_is_found_with_its_digest_and_architecture(registry):
    host, auth = registry
    digest, size = push(host, auth, "team/trainer", "1.0", "amd64")
    info = manifest_check(f"{host}/team/trainer:1.0", username=auth[0], password=auth[1], architecture="amd64")
    assert info.digest == digest and info.architectures == ("amd64",) and info.size_bytes == size
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
        (dict(reference=f"127.0.0.1:{free_port()}/team/trainer:1.0"), "reference", "did not answer"),
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
