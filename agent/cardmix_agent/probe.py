"""The readiness TCP probe a cluster's parts run (see cluster.Cluster.do_reachability)."""

# The readiness TCP probe, run in a part's network namespace (nsenter into a container's, or the host's): listen
# on the part's address and probe port, connect to every other part's (retrying while they come up), print one
# line per probe, and stay up until every other part has connected or the time is up.
PROBE = r"""
import json, socket, sys, threading, time
cfg = json.loads(sys.argv[1])
me, others = cfg["me"], cfg["others"]
deadline = time.monotonic() + float(cfg["timeout_s"])
def banner(part):
    return ("cardmix-probe %s part %s\n" % (cfg["instance_id"], part)).encode()
head = "part %s %s:%s" % (me["part"], me["address"], me["probe_port"])
inbound, ok = [0], True
try:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((me["address"], int(me["probe_port"])))
    srv.listen(64)
    srv.settimeout(0.2)
except OSError as exc:
    print("listen %s FAILED %s: %s" % (head, type(exc).__name__, exc), flush=True)
    srv, ok = None, False
def serve():
    while srv is not None and inbound[0] < len(others) and time.monotonic() < deadline:
        try:
            conn, _ = srv.accept()
        except OSError:
            continue
        with conn:
            conn.sendall(banner(me["part"]))
        inbound[0] += 1
listener = threading.Thread(target=serve, daemon=True)
listener.start()
for peer in others:
    line = "reach part %s (%s) -> part %s %s:%s " % (me["part"], me["address"], peer["part"], peer["address"],
                                                   peer["probe_port"])
    error = "no attempt"
    while True:
        started = time.monotonic()
        try:
            with socket.create_connection((peer["address"], int(peer["probe_port"])), timeout=2) as conn:
                conn.settimeout(5)
                got = conn.recv(200)
            if got == banner(peer["part"]):
                print(line + "ok %.2f ms" % ((time.monotonic() - started) * 1000), flush=True)
                break
            error = "answered %r, not part %s's probe" % (got[:60], peer["part"])
        except OSError as exc:
            error = "%s: %s" % (type(exc).__name__, exc)
        if time.monotonic() >= deadline:
            print(line + "FAILED " + error, flush=True)
            ok = False
            break
        time.sleep(0.2)
listener.join(max(0.0, deadline - time.monotonic()))
print("listen %s: %d of %d other part(s) connected" % (head, inbound[0], len(others)), flush=True)
sys.exit(0 if ok and inbound[0] >= len(others) else 1)
"""
