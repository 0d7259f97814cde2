"""The hybrid's TCP reachability check: what the probes printed → pass/fail (pure parsing)."""
from provisioning.readiness import parse_reachability

OK = """== npu-1 ==
reach part 0 (10.96.3.10) -> part 1 10.96.3.11:29404 ok 0.42 ms
listen part 0 10.96.3.10:29400: 1 of 1 other part(s) connected
== gpu-1 ==
reach part 1 (10.96.3.11) -> part 0 10.96.3.10:29400 ok 0.38 ms
listen part 1 10.96.3.11:29404: 1 of 1 other part(s) connected
"""


def test_every_pair_reached_with_a_clean_exit_passes():
    result = parse_reachability(OK, 0, parts=2)
    assert result.passed and result.reasons == []
    assert result.rows == [
        {"from": 0, "to": 1, "address": "10.96.3.11", "port": 29404, "ok": True, "ms": 0.42, "error": ""},
        {"from": 1, "to": 0, "address": "10.96.3.10", "port": 29400, "ok": True, "ms": 0.38, "error": ""}]


def test_a_failed_probe_a_missing_pair_and_the_exit_code_each_fail_it():
    failed = OK.replace("-> part 0 10.96.3.10:29400 ok 0.38 ms",
                        "-> part 0 10.96.3.10:29400 FAILED ConnectionRefusedError: [Errno 111] Connection refused")
    result = parse_reachability(failed, 1, parts=2)
    assert not result.passed
    assert result.reasons == ["exit_code: 1", "unreachable: part 1 -> part 0 (10.96.3.10:29400): "
                              "ConnectionRefusedError: [Errno 111] Connection refused"]
    assert not parse_reachability(OK, 1, parts=2).passed
    one_way = "\n".join(line for line in OK.splitlines() if "part 1 (" not in line)
    result = parse_reachability(one_way, 0, parts=2)
    assert result.reasons == ["missing: part 1 -> part 0 was not tested"]
    # A third part nobody probed: both directions to it are missing.
    result = parse_reachability(OK, 0, parts=3)
    assert len(result.reasons) == 4 and all(r.startswith("missing:") for r in result.reasons)


def test_garbage_or_nothing_fails_and_never_raises():
    for text in ("", "\x00\x01garbage", "reach part x -> y"):
        result = parse_reachability(text, 0, parts=2)
        assert not result.passed and result.rows == []
