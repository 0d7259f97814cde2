# Sourced by bin/test and bin/bench: use DATABASE_URL / REDIS_URL when set; otherwise PostgreSQL on
# 127.0.0.1:5432 and Redis on 127.0.0.1:6379 when they answer. With no PostgreSQL answering, the embedded one
# in var/postgres/ (core/embedded_postgres.py) serves: started here, and EMBEDDED_STARTED=1 says so, so the
# caller can stop it at the end (one that was already running, e.g. `make run`'s, is left running).
answers() { "$PY" - "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.socket(); s.settimeout(1)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("yes")
except OSError:
    print("no")
PYEOF
}

EMBEDDED_STARTED=0
if [ -z "${DATABASE_URL:-}" ] && [ "$(answers 127.0.0.1 5432)" = yes ]; then
  export DATABASE_URL="postgres://postgres@127.0.0.1:5432/cardmix"
fi
if [ -z "${DATABASE_URL:-}" ]; then
  "$PY" manage.py dbserver status >/dev/null 2>&1 || EMBEDDED_STARTED=1
  DATABASE_URL="$("$PY" manage.py dbserver start | tail -n 1)"
  export DATABASE_URL
fi
if [ -z "${REDIS_URL:-}" ] && [ "$(answers 127.0.0.1 6379)" = yes ]; then
  export REDIS_URL="redis://127.0.0.1:6379/0"
fi
