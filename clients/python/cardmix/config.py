"""Where `cardmix login` keeps the URL and token: $XDG_CONFIG_HOME/cardmix/config.json, mode 0600.
CARDMIX_TOKEN and CARDMIX_URL override it."""
import json
import os
from pathlib import Path


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "cardmix" / "config.json"


def config_load() -> dict:
    try:
        return json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}


def config_save(*, url: str, token: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    # Created 0600 before anything is written: the token is never readable by others, not even briefly.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token}, f)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def credentials(url: str | None = None, token: str | None = None) -> tuple[str | None, str | None]:
    saved = config_load()
    return (url or os.environ.get("CARDMIX_URL") or saved.get("url"),
            token or os.environ.get("CARDMIX_TOKEN") or saved.get("token"))
