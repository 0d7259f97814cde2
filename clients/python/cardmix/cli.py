"""`cardmix`: the command line on the SDK. Every command takes --json for scripts.

Exit codes (also in README.md):
  0 done · 1 any other API error · 2 bad usage or input (validation_error) · 3 insufficient capacity
  4 insufficient funds or quota · 5 not found · 6 not logged in, bad token or not allowed
  7 the instance failed or did not get there in time · a launched task's own non-zero status otherwise
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from datetime import date

import typer
from rich.console import Console
from rich.table import Table

from . import errors
from .client import DEFAULT_URL, Client
from .config import config_save, credentials
from .resources import InstanceFailed
from .spec import image_default, items_of

EXIT = {errors.ValidationError: 2, errors.InsufficientCapacity: 3, errors.InsufficientFunds: 4,
        errors.QuotaExceeded: 4, errors.NotFound: 5, errors.NotAuthenticated: 6, errors.PermissionDenied: 6,
        errors.WaitTimeout: 7, InstanceFailed: 7, errors.VerificationRequired: 8}

app = typer.Typer(help="Cardmix GPU cloud from the command line.", no_args_is_help=True, add_completion=False)
out = Console()
err = Console(stderr=True)
JSON = typer.Option(False, "--json", help="Print JSON for scripts instead of tables.")


def client() -> Client:
    url, token = credentials()
    if not token:
        raise errors.NotAuthenticated("Not logged in: run `cardmix login` or set CARDMIX_TOKEN.")
    return Client(token=token, base_url=url or DEFAULT_URL)


def emit(data, as_json: bool, table=None) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    elif table is not None:
        out.print(table)


def _table(columns, rows) -> Table:
    t = Table(*columns, show_edge=False, header_style="bold")
    for r in rows:
        t.add_row(*[("" if v is None else str(v)) for v in r])
    return t


@app.command()
def login(token: str = typer.Option(None, help="An API token (cmx_…); asked for when not given."),
          url: str = typer.Option(None, help=f"The platform's address (default {DEFAULT_URL})."),
          json_out: bool = JSON):
    """Check a token and keep it (mode 0600) for the next commands."""
    token = token or typer.prompt("API token", hide_input=True)
    url = (url or os.environ.get("CARDMIX_URL") or DEFAULT_URL).rstrip("/")
    with Client(token=token, base_url=url) as c:
        org = c.request("GET", "organizations/current/")
    path = config_save(url=url, token=token)
    emit({"organization": org.get("name"), "role": org.get("role"), "config": str(path)}, json_out)
    if not json_out:
        out.print(f"Logged in to {url} as {org.get('role')} of {org.get('name')}; token kept in {path}.")


@app.command()
def catalog(json_out: bool = JSON):
    """Accelerators with price and stock."""
    accs = client().catalog.accelerators()
    emit([a.to_dict() for a in accs], json_out, _table(
        ["slug", "name", "CNY/card-hour", "available", "total"],
        [(a.slug, a.name, a.price_per_card_hour, a.available_cards, a.total_cards) for a in accs]))


def _create_fields(cards, kind, image, zone, volume, dataset, ssh_key, waitlist, c) -> dict:
    accelerators = c.catalog.accelerators()
    items = items_of(cards, accelerators)
    body = {"items": items, "kind": kind, "zone": zone,
            **({"image": image} if image else image_default(items, accelerators, c.catalog.images()))}
    if volume:
        body["volumes"] = [dict(zip(("volume", "mount_path"), v.split(":", 1), strict=False)) for v in volume]
    if dataset:
        body["datasets"] = list(dataset)
    if ssh_key:
        body["ssh_key_ids"] = list(ssh_key)
    if waitlist:
        body["waitlist"] = True
    return body


@app.command()
def quote(cards: str = typer.Argument(..., help="e.g. 8xH100 or 4xH100+4xAscend"),
          kind: str = typer.Option("container"), image: str = typer.Option(None), zone: str = typer.Option(None),
          json_out: bool = JSON):
    """What a card mix would cost and whether it fits now."""
    c = client()
    q = c.quotes.create(**_create_fields(cards, kind, image, zone, None, None, None, False, c))
    emit(q.to_dict(), json_out, _table(["accelerator", "count", "CNY/card-hour"],
                                       [(i["accelerator"], i["count"], i["price_per_card_hour"]) for i in q.items]))
    if not json_out:
        out.print(f"{q.price_per_hour} CNY/hour · {'available now' if q.available else 'not available now'}")


@app.command()
def up(cards: str = typer.Argument(..., help="e.g. 8xH100 or 4xH100+4xAscend"),
       name: str = typer.Option(None, help="Default: cards and date."), kind: str = typer.Option("container"),
       image: str = typer.Option(None), zone: str = typer.Option(None),
       volume: list[str] = typer.Option(None, help="VOLUME_ID[:/mount/path], repeatable."),
       dataset: list[str] = typer.Option(None, help="Dataset slug, repeatable."),
       ssh_key: list[str] = typer.Option(None, "--ssh-key", help="SSH key id, repeatable."),
       waitlist: bool = typer.Option(False, help="Queue when no capacity now instead of failing."),
       wait: bool = typer.Option(True, help="Wait until running."), timeout: float = typer.Option(900.0),
       json_out: bool = JSON):
    """Create an instance and follow it: placed → provisioning → readiness → running."""
    c = client()
    fields = _create_fields(cards, kind, image, zone, volume, dataset, ssh_key, waitlist, c)
    name = name or f"{cards.lower().replace('+', '-')}-{date.today():%m%d}"
    progress = err.status("creating…") if not json_out else None
    if progress:
        progress.start()

    def on_state(inst):
        if progress:
            progress.update(f"{inst.name}: {inst.state} {inst.state_reason}".strip())

    try:
        inst = c.instances.create(name=name, wait="running" if wait else None, timeout=timeout, on_state=on_state,
                                  **fields)
    finally:
        if progress:
            progress.stop()
    reports = c.instances.readiness(inst.id) if inst.state == "running" else []
    emit({**inst.to_dict(), "readiness": [r.to_dict() for r in reports]}, json_out)
    if not json_out:
        out.print(f"[bold]{inst.name}[/] ({inst.id}) is {inst.state} · {inst.price_per_hour} CNY/hour")
        for r in reports:
            out.print(f"  readiness {r.tool} on {r.node}: busbw {r.busbw_gbps} GB/s (floor {r.floor_gbps}) "
                      f"{'passed' if r.passed else 'FAILED'}")
        for s in inst.ssh:
            out.print(f"  {s['command']}")


@app.command(name="ls")
def list_(state: str = typer.Option(None, help="e.g. running,stopped"), json_out: bool = JSON):
    """Your organization's instances."""
    rows = list(client().instances.list(state=state))
    emit([i.to_dict() for i in rows], json_out, _table(
        ["name", "id", "state", "cards", "CNY/hour", "cost so far"],
        [(i.name, i.id, i.state, i.cards, i.price_per_hour, i.cost_so_far) for i in rows]))


def _action(verb: str, name: str, json_out: bool) -> None:
    c = client()
    inst = c.instances.get(name)
    inst = getattr(c.instances, verb)(inst.id)
    emit(inst.to_dict(), json_out)
    if not json_out:
        out.print(f"{inst.name}: {inst.state}")


@app.command()
def stop(name: str, json_out: bool = JSON):
    """Stop an instance (billing stops; see the console for what a stop keeps)."""
    _action("stop", name, json_out)


@app.command()
def start(name: str, json_out: bool = JSON):
    """Start a stopped instance again."""
    _action("start", name, json_out)


@app.command()
def rm(name: str, json_out: bool = JSON):
    """Terminate an instance and release its cards."""
    _action("delete", name, json_out)


@app.command()
def ssh(name: str, command: list[str] = typer.Argument(None, help="A command to run instead of a shell."),
        print_only: bool = typer.Option(False, "--print", help="Print the ssh command instead of running it."),
        json_out: bool = JSON):
    """Open a shell on an instance (through the platform's SSH gateway where it has one)."""
    inst = client().instances.get(name)
    argv = ssh_argv(inst) + list(command or [])
    if print_only or json_out:
        emit({"argv": argv}, json_out)
        if not json_out:
            print(shlex.join(argv))
        return
    os.execvp(argv[0], argv)


def ssh_argv(inst) -> list[str]:
    """The ssh command of an instance: its gateway form when the API gives one, else the first node port."""
    command = (inst.ssh_gateway or {}).get("command") or (inst.ssh[0]["command"] if inst.ssh else None)
    if not command:
        raise errors.InvalidState(f"{inst.name} has no SSH endpoint while {inst.state}.")
    return shlex.split(command)


@app.command()
def balance(json_out: bool = JSON):
    """Balances and how long they last."""
    b = client().billing.balance()
    emit(b.to_dict(), json_out, _table(["available", "cash", "trial", "compensation", "burn/hour", "runs out"],
                                       [(b.available, b.cash, b.trial, b.compensation, b.burn_rate_per_hour,
                                         b.exhausts_at or "—")]))


@app.command()
def usage(month: str = typer.Option(None, help="YYYY-MM (default: this month)"), json_out: bool = JSON):
    """Usage lines of a month, per meter."""
    month = month or f"{date.today():%Y-%m}"
    try:
        y, m = (int(x) for x in month.split("-"))
        first = date(y, m, 1)
    except ValueError as exc:
        raise errors.ValidationError(f"Write the month as YYYY-MM, not {month!r}.") from exc
    nxt = date(y + (m == 12), m % 12 + 1, 1)
    lines = list(client().billing.usage(start=first.isoformat(), end=nxt.isoformat()))
    emit([u.to_dict() for u in lines], json_out, _table(
        ["instance", "accelerator", "cards", "seconds", "amount"],
        [(u.instance_id, u.accelerator, u.cards, u.seconds, u.amount) for u in lines]))


@app.command()
def launch(task: str = typer.Argument(..., help="A task file (SkyPilot's shape: resources, setup, run)."),
           keep: bool = typer.Option(False, help="Keep the instance running afterwards."),
           name: str = typer.Option(None), timeout: float = typer.Option(900.0), json_out: bool = JSON):
    """Create the instance(s) a task needs, run its setup and run over SSH, stream the output, stop at the end."""
    from .launch import launch_task, task_load

    status = launch_task(client(), task_load(task), name=name, keep=keep, timeout=timeout,
                         echo=(lambda line: None) if json_out else (lambda line: print(line, flush=True)),
                         report=(lambda data: emit(data, True)) if json_out else None)
    raise typer.Exit(status)


def main() -> None:
    try:
        # Without standalone mode click returns a command's typer.Exit code instead of exiting.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except errors.CardmixError as exc:
        err.print(f"[red]error:[/] {exc.message}")
        for field, messages in (exc.details or {}).items():
            err.print(f"  {field}: {'; '.join(map(str, messages if isinstance(messages, list) else [messages]))}")
        sys.exit(next((code for cls, code in EXIT.items() if isinstance(exc, cls)), 1))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click's usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
