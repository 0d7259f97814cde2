"""Property tests: mutated fixtures never make a parser raise (SPEC §3: failed result, never an exception)."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioning.readiness import evaluate, parse_hccl_test, parse_nccl_tests

from .fixture_files import all_fixtures, load

TEXTS = [load(name) for name in all_fixtures()]


@st.composite
def mutated(draw):
    """A fixture after a few deletions, insertions, byte flips, truncations or line shuffles."""
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "flip", "truncate", "shuffle", "dup_line"]))
        n = len(text)
        if op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            text = text[:i] + text[i + draw(st.integers(1, 40)) :]
        elif op == "insert":
            i = draw(st.integers(0, n))
            chunk = draw(
                st.one_of(
                    st.text(max_size=20),
                    st.sampled_from(
                        [
                            "|",
                            "#",
                            " N/A ",
                            "\n",
                            "1e999",
                            "nan",
                            "-1",
                            " 0 ",
                            "*",
                            "\x00",
                            "# Out of bounds values : ",
                            "data_size(Bytes): |",
                            " 99999999999999999999 ",
                        ]
                    ),
                )
            )
            text = text[:i] + chunk + text[i:]
        elif op == "flip" and n:
            i = draw(st.integers(0, n - 1))
            text = text[:i] + chr(ord(text[i]) ^ (1 << draw(st.integers(0, 6)))) + text[i + 1 :]
        elif op == "truncate":
            text = text[: draw(st.integers(0, n))]
        elif op == "shuffle":
            lines = text.splitlines()
            text = "\n".join(draw(st.permutations(lines)))
        elif op == "dup_line":
            lines = text.splitlines() or [""]
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
    return text


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated(), ranks=st.integers(-1, 64))
def test_mutations_never_raise(text, ranks):
    for result in (
        parse_nccl_tests(text),
        parse_nccl_tests(text, ranks=ranks or None),
        parse_hccl_test(text, ranks),
    ):
        assert not any("internal parser error" in e for e in result.parse_errors), result.parse_errors
        json.dumps(result.to_dict(), allow_nan=False)
        verdict = evaluate(result, 100.0, 0)
        # A result with anything malformed can never pass.
        assert not (verdict.passed and result.parse_errors)
        assert verdict.passed == (not verdict.reasons)
