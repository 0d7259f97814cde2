"""Private images with the docker CLI: a pull with the organization's registry login, and "Save as image" (commit a
container, push it to the operator's registry).

The login comes inside the command that needs it (`registry_auth`: registry, username, password) and never stays on
the node: docker reads it from a config.json in a DOCKER_CONFIG directory of this command's own (0700, in the
agent's state dir), removed when the pull or push ends, whatever happened. Nothing is logged with it, the password
never appears in an argv (`ps` shows those) and is masked in what the command answers."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..programs import run

DOCKER_HUB_KEY = "https://index.docker.io/v1/"  # the key docker's config.json files Docker Hub's login under
# What a commit target or a container may look like (the platform builds both; anything else is refused).
_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,299}$")
_CONTAINER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _mask(text: str, secret: str) -> str:
    return text.replace(secret, "********") if secret else text


class DockerImages:
    """Mixed into DockerRuntime (uses its args and state dir)."""

    @contextmanager
    def registry_login(self, auth: dict | None):
        """→ the environment docker needs to use `auth` ({} without one), the config gone afterwards."""
        if not auth:
            yield {}, ""
            return
        registry = str(auth.get("registry") or "")
        username, password = str(auth.get("username") or ""), str(auth.get("password") or "")
        key = DOCKER_HUB_KEY if registry in ("registry-1.docker.io", "docker.io", "index.docker.io") else registry
        where = Path(tempfile.mkdtemp(prefix="docker-login-", dir=self.state_dir))  # mkdtemp: 0700
        try:
            config = where / "config.json"
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"auths": {key: {"auth": base64.b64encode(f"{username}:{password}".encode()).decode()}}},
                          f)
            yield {"DOCKER_CONFIG": str(where)}, password
        finally:
            shutil.rmtree(where, ignore_errors=True)

    def docker_pull_private(self, image: str, auth: dict | None) -> tuple[str, int]:
        """`docker pull` a private image with its login, before `docker run` (which then finds it on the node)."""
        with self.registry_login(auth) as (env, password):
            text, code = run([self.args.docker, "pull", image], timeout=self.args.prepare_timeout, env=env)
        text = _mask(text, password)
        if code != 0:
            return f"docker pull {image} failed (exit {code}): {text.strip()[-1500:]}\n", code
        return f"pulled {image} with the organization's registry login\n", 0

    def image_save(self, payload: dict) -> tuple[str, int, dict]:
        """Commit the instance's container as `reference` and push it to the operator's registry; the node keeps no
        copy. meta: the reference and the digest the registry answered."""
        container, reference = str(payload.get("container") or ""), str(payload.get("reference") or "")
        if not _CONTAINER.match(container) or not _REFERENCE.match(reference):
            return f"cardmix-agent: refusing to save {container!r} as {reference!r}: not a container and image name\n", \
                2, {}
        timeout = float(payload.get("timeout_s") or self.args.prepare_timeout)
        text, code = run([self.args.docker, "commit", container, reference], timeout=timeout)
        if code != 0:
            return f"docker commit {container} failed (exit {code}): {text.strip()[-1500:]}\n", code, {}
        with self.registry_login(payload.get("registry_auth")) as (env, password):
            pushed, code = run([self.args.docker, "push", reference], timeout=timeout, env=env)
        pushed = _mask(pushed, password)
        removed, _ = run([self.args.docker, "image", "rm", reference], timeout=300)  # best effort
        if code != 0:
            return f"docker push {reference} failed (exit {code}): {pushed.strip()[-1500:]}\n", code, {}
        found = re.findall(r"digest: (sha256:[0-9a-f]{64})", pushed)
        return (f"saved {container} as {reference}\n{pushed.strip()[-1500:]}\n", 0,
                {"reference": reference, **({"digest": found[-1]} if found else {})})
