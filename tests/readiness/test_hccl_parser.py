"""hccl_test parser and verdict."""

import pytest

from provisioning.readiness import evaluate, parse_hccl_test, parse_output

from .fixture_files import load

G8 = 8 * 1024**3


def test_910b_pass_computes_bus_bandwidth():
    result = parse_hccl_test(load("hccl_910b_8x_pass.txt"), ranks=8)
    assert result.ok_format and result.tool == "hccl_test"
    assert len(result.rows) == 4
    last = result.rows[-1]
    assert last["size_bytes"] == G8 and last["check"] == "success"
    assert last["out_of_place"]["algbw_gbps"] == 101.71
    assert last["out_of_place"]["busbw_gbps"] == pytest.approx(101.71 * 1.75)
    assert last["in_place"] is None
    assert result.busbw_largest_gbps == pytest.approx(177.9925)
    assert evaluate(result, 100, 0).passed


def test_bus_bandwidth_depends_on_ranks():
    four = parse_hccl_test(load("hccl_910b_8x_pass.txt"), ranks=4)
    assert four.busbw_largest_gbps == pytest.approx(101.71 * 1.5)


def test_check_failed_is_a_data_error():
    result = parse_hccl_test(load("hccl_910b_8x_check_failed.txt"), ranks=8)
    assert result.data_errors == 2
    assert [r["out_of_place"]["wrong"] for r in result.rows] == [0, 0, 1, 1]
    verdict = evaluate(result, 100, 0)
    assert verdict.codes == ("data_errors",)


def test_null_means_not_checked():
    result = parse_hccl_test(load("hccl_910b_8x_null.txt"), ranks=8)
    assert result.rows[0]["check"] == "NULL" and result.rows[0]["out_of_place"]["wrong"] is None
    assert result.data_errors == 0 and result.warnings
    assert evaluate(result, 100, 0).passed


def test_avg_time_spelling_from_spec_is_accepted():
    text = load("hccl_910b_8x_pass.txt").replace("aveg_time(us):", "avg_time(us):")
    assert parse_hccl_test(text, ranks=8).ok_format


def test_real_vm_output():
    result = parse_hccl_test(load("real_hccl_vm_2mb_16rank.txt"), ranks=16)
    assert result.ok_format and result.rows[0]["size_bytes"] == 2097152
    assert result.busbw_largest_gbps == pytest.approx(2.09715 * 2 * 15 / 16, rel=1e-4)


def test_error_lines_and_truncation():
    text = load("hccl_910b_8x_pass.txt") + "[ERROR] HCCL(123,all_reduce_test): EI0002 notify wait times out\n"
    result = parse_hccl_test(text, ranks=8)
    assert len(result.error_lines) == 1
    assert "error_lines" in evaluate(result, 100, 0).codes
    truncated = load("hccl_910b_8x_pass.txt")[:-12]
    result = parse_hccl_test(truncated, ranks=8)
    assert result.parse_errors and not evaluate(result, 100, 0).passed


@pytest.mark.parametrize("name", ["garbage.txt", "empty.txt", "nccl_h100_8x_pass.txt"])
def test_not_hccl_output(name):
    result = parse_hccl_test(load(name), ranks=8)
    assert not result.rows and not evaluate(result, 100, 0).passed


def test_bad_ranks_is_a_parse_error():
    result = parse_hccl_test(load("hccl_910b_8x_pass.txt"), ranks=0)
    assert result.parse_errors and not result.rows


def test_parse_output_dispatch():
    assert parse_output(load("hccl_910b_8x_pass.txt"), tool="hccl_test", ranks=8).ok_format
    assert parse_output(load("nccl_h100_8x_pass.txt"), tool="nccl-tests").ok_format
    assert parse_output("x", tool="mccl").parse_errors
