# Sourced by bin/test and bin/bench: use DATABASE_URL / REDIS_URL when set; otherwise PostgreSQL on
# 127.0.0.1:5432 and Redis on 127.0.0.1:6379 when they answer (left unset when they do not).
answers() { "$PY" - "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.socket(); s.settimeout(1)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("yes")
except OSError:
    print("no")
PYEOF
}

if [ -z "${DATABASE_URL:-}" ] && [ "$(answers 127.0.0.1 5432)" = yes ]; then
  export DATABASE_URL="postgres://postgres@127.0.0.1:5432/cardmix"
fi
if [ -z "${REDIS_URL:-}" ] && [ "$(answers 127.0.0.1 6379)" = yes ]; then
  export REDIS_URL="redis://127.0.0.1:6379/0"
fi
