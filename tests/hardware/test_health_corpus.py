"""The health corpus: real-format outputs of nvidia-smi, the kernel log and npu-smi, each parsed and classified by
hardware/health (pure functions: no database). expected.json names each sample's section and class."""
import json
from pathlib import Path

import pytest

from hardware.health import classes, parse_probe, worst
from hardware.health.parsers import bus_id

CORPUS = Path(__file__).resolve().parent / "health_corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
# The cards' bus ids as the health query of the healthy H100 sample reports them: Xid lines name cards by these.
HEALTHY_GPU = (CORPUS / "nvidia_gpu-healthy-h100.txt").read_text()


def _probe(section: str, text: str) -> dict:
    probe = {section: {"output": text, "exit_code": 0}}
    if section in ("kernel_xid", "nvidia_remap"):
        probe["nvidia_gpu"] = {"output": HEALTHY_GPU, "exit_code": 0}
    return probe


def test_the_corpus_covers_the_issue():
    assert len(EXPECTED) >= 20
    xids = {int(name.split("-")[1]) for name in EXPECTED if name.startswith("kernel_xid-") and "unknown" not in name}
    assert xids == {13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95}
    wanted = {"healthy", "info", "degraded", "failed", "unparsed"}
    assert {e["class"] for e in EXPECTED.values()} == wanted
    assert set(EXPECTED) == {p.name for p in CORPUS.glob("*.txt")}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_parses_to_its_class(name):
    expected = EXPECTED[name]
    signals = parse_probe(_probe(expected["section"], (CORPUS / name).read_text()))
    got = worst(s.klass for s in signals if s.klass != classes.UNPARSED)
    if expected["class"] == "unparsed":
        assert [s for s in signals if s.klass == classes.UNPARSED], signals  # logged as unparsed…
        assert got is None or got != "healthy"  # …and never read as healthy
        return
    assert [s for s in signals if s.klass == classes.UNPARSED] == []
    assert (got or "healthy") == expected["class"], signals
    if "kinds" in expected:
        assert sorted({s.kind for s in signals}) == sorted(expected["kinds"])
        assert {s.card for s in signals} == {expected["card"]}


def test_xid_names_its_code_and_message():
    [signal] = parse_probe(_probe("kernel_xid", (CORPUS / "kernel_xid-79-dmesg.txt").read_text()))[-1:]
    assert (signal.kind, signal.code, signal.card, signal.klass) == ("xid", 79, 2, "failed")
    assert "fallen off the bus" in signal.detail


def test_an_xid_line_seen_again_keeps_its_fingerprint_and_a_new_one_differs():
    line = (CORPUS / "kernel_xid-79-dmesg.txt").read_text()
    later = line.replace("8712.", "9013.")
    first, again, new = (parse_probe(_probe("kernel_xid", t))[-1] for t in (line, line, later))
    assert first.fingerprint == again.fingerprint != new.fingerprint


def test_rising_error_count_is_a_new_signal():
    one = parse_probe(_probe("nvidia_gpu", (CORPUS / "nvidia_gpu-ecc-dbe-volatile.txt").read_text()))
    more = parse_probe(_probe("nvidia_gpu", (CORPUS / "nvidia_gpu-ecc-dbe-volatile.txt").read_text()
                              .replace(", 2, 2,", ", 3, 3,")))
    assert one[0].fingerprint != more[0].fingerprint


def test_failed_tool_and_unknown_section_are_unparsed():
    signals = parse_probe({"nvidia_gpu": {"output": "NVIDIA-SMI has failed", "exit_code": 9}, "dcgm": {}})
    assert {s.klass for s in signals} == {classes.UNPARSED}
    assert len(signals) == 2


def test_an_xid_on_a_bus_no_card_reports_names_no_card():
    [signal] = [s for s in parse_probe(_probe("kernel_xid", "NVRM: Xid (PCI:0000:ee:00): 79, pid=1, x, GPU has "
                                                           "fallen off the bus.\n")) if s.kind == "xid"]
    assert signal.card is None and signal.klass == "failed"


@pytest.mark.parametrize(("text", "want"), [("00000000:3B:00.0", "0000:3b:00"), ("0000:3b:00", "0000:3b:00"),
                                             ("0000:DB:00.0", "0000:db:00")])
def test_bus_ids_of_both_tools_match(text, want):
    assert bus_id(text) == want


def test_every_class_in_the_table_is_known():
    known = {classes.INFO, classes.DEGRADED, classes.FAILED}
    assert set(classes.XID_CLASSES.values()) <= known and set(classes.SIGNAL_CLASSES.values()) <= known
