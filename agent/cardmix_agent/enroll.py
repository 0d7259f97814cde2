"""Bare metal: the token file's checks, and trading the deploy boot's enrollment secret for a node token."""
from __future__ import annotations

import argparse
import json
import os
import ssl
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path

from .constants import ENROLL_ARG, TRANSIENT_ERRORS, VERSION, log
from .files import atomic_put, make_private_dir


def enroll_secret_of(cmdline_path: str) -> str | None:
    """The one-time enrollment secret on the kernel command line (the deploy boot's), if any."""
    try:
        words = Path(cmdline_path).read_text().split()
    except OSError:
        return None
    for word in words:
        if word.startswith(ENROLL_ARG) and word[len(ENROLL_ARG):].startswith("cmxe_"):
            return word[len(ENROLL_ARG):]
    return None


def token_file_check(path: Path) -> str | None:
    """The token file must be this agent's (root's, under systemd) and readable by nobody else: a looser mode is
    tightened to 0600; another owner is refused (→ the reason), since whoever owns it can swap the token."""
    st = path.stat()
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this agent's ({os.geteuid()}): refusing to use it"
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o600)
        log.warning("%s was mode %o; now 0600", path, stat.S_IMODE(st.st_mode))
    return None


def enroll(args: argparse.Namespace) -> str | None:
    """Trade the deploy boot's one-time enrollment secret for a node token (POST /api/v1/agent/enroll/, no token
    sent), retried through network errors, 5xx, 408 and 429 for --enroll-retry-seconds; the token goes to
    --token-file (0600, replaced atomically). → the token, or None when refused (used already: an agent restarted
    in the same deploy boot; or expired): the token file then holds the one this boot got."""
    ssl_context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    body = json.dumps({"secret": args.enroll_secret}).encode()
    give_up, pause = time.monotonic() + args.enroll_retry_seconds, 1.0
    while True:
        req = urllib.request.Request(f"{args.server.rstrip('/')}/api/v1/agent/enroll/", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": f"cardmix-agent/{VERSION}"})
        try:
            with urllib.request.urlopen(req, timeout=args.http_timeout, context=ssl_context) as resp:
                token = str(json.loads(resp.read() or b"{}").get("token") or "")
            if token.startswith("cmxn_"):
                break
            status = "no token in the answer"
        except urllib.error.HTTPError as exc:
            status = exc.code
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                log.warning("enrollment refused (%s): the secret was used or expired", exc.code)
                return None
        except TRANSIENT_ERRORS as exc:
            status = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= give_up:
            log.error("enrollment failed: %s", status)
            return None
        log.warning("enrollment failed (%s); retrying", status)
        time.sleep(pause)
        pause = min(30.0, pause * 2)
    if args.token_file:
        target = Path(args.token_file)
        make_private_dir(target.parent)
        atomic_put(target, data=(token + "\n").encode(), mode=0o600)
    log.info("enrolled: node token %s… issued for this boot", token[:13])
    return token
