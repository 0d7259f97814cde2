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


def test_each_refusal_names_the_field_to_fix(registry, settings):
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
    ]
    down = f"127.0.0.1:{free_port()}"
    settings.CUSTOM_IMAGE_INSECURE_REGISTRIES = [host, down]  # an operator-named registry that does not answer
    cases.append((dict(reference=f"{down}/team/trainer:1.0"), "reference", "did not answer"))
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


@pytest.mark.parametrize("reference", ["127.0.0.1:5000/team/app:1", "localhost:5000/team/app:1", "10.1.2.3/team/app:1",
                                       "169.254.169.254/latest/meta:1", "[::1]:5000/team/app:1",
                                       "[::ffff:192.168.0.1]:5000/a/b:1"])
def test_a_customer_reference_never_reaches_an_internal_address(reference, settings):
    """SSRF: only registries the operator named may sit on loopback, private or link-local addresses."""
    settings.CUSTOM_IMAGE_INSECURE_REGISTRIES = []
    with pytest.raises(RegistryError) as refused:
        manifest_check(reference)
    assert refused.value.field == "reference" and "loopback, private or link-local" in refused.value.message, (
        refused.value.message)


def test_the_operator_may_allow_only_named_registries(settings):
    settings.CUSTOM_IMAGE_REGISTRIES = ["registry.example.com"]
    with pytest.raises(RegistryError) as refused:
        manifest_check("ghcr.io/team/app:1")
    assert "Images come from registry.example.com on this platform, not ghcr.io" in refused.value.message
