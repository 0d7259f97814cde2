"""nccl-tests parser and verdict against hand-written and real fixtures."""

import pytest

from provisioning.readiness import evaluate, parse_nccl_tests

from .fixture_files import load

G8 = 8 * 1024**3


def test_h100_pass_single_row():
    result = parse_nccl_tests(load("nccl_h100_8x_pass.txt"))
    assert result.ok_format and result.tool == "nccl-tests"
    assert result.ranks == 8
    assert len(result.rows) == 1
    row = result.rows[0]
    assert row["size_bytes"] == G8 and row["count"] == G8 // 4
    assert (row["type"], row["redop"], row["root"]) == ("float", "sum", -1)
    assert row["out_of_place"]["algbw_gbps"] == 246.40
    assert row["out_of_place"]["busbw_gbps"] == 431.20
    assert row["in_place"]["busbw_gbps"] == 430.69
    assert row["out_of_place"]["wrong"] == 0
    # Gate on the slower half at the largest size.
    assert result.busbw_largest_gbps == 430.69
    assert result.busbw_peak_gbps == 431.20
    assert result.out_of_bounds == 0 and result.avg_busbw_footer == 430.94
    assert result.warnings == []
    verdict = evaluate(result, 235, 0)
    assert verdict.passed and verdict.reasons == ()


def test_h800_pass():
    result = parse_nccl_tests(load("nccl_h800_8x_pass.txt"))
    assert result.busbw_largest_gbps == pytest.approx(207.59)
    assert evaluate(result, 150, 0).passed


def test_low_bandwidth_fails_floor():
    result = parse_nccl_tests(load("nccl_h100_8x_low_bandwidth.txt"))
    assert result.ok_format
    assert result.busbw_largest_gbps == pytest.approx(141.84)
    verdict = evaluate(result, 235, 0)
    assert not verdict.passed and verdict.codes == ("below_floor",)


def test_wrong_results_are_data_errors():
    result = parse_nccl_tests(load("nccl_h100_8x_data_errors.txt"))
    assert result.rows[0]["in_place"]["wrong"] == 128
    assert result.data_errors == 128 and result.out_of_bounds == 128
    verdict = evaluate(result, 235, 0)
    assert not verdict.passed
    assert set(verdict.codes) == {"data_errors", "out_of_bounds"}


def test_nccl_error_lines():
    result = parse_nccl_tests(load("nccl_h100_8x_nccl_error.txt"))
    assert len(result.error_lines) == 4
    assert any("NCCL WARN" in line for line in result.error_lines)
    assert any("Test NCCL failure common.cu:1005" in line for line in result.error_lines)
    assert any(line.startswith(".. gpu-a04 pid 48211: Test failure") for line in result.error_lines)
    verdict = evaluate(result, 235, 3)
    assert {"no_data", "error_lines", "exit_code"} <= set(verdict.codes)


def test_error_lines_fail_even_with_good_numbers_and_exit_zero():
    text = load("nccl_h100_8x_pass.txt") + "gpu-a01:1:2 [0] NCCL WARN NET/IB : peer closed connection\n"
    verdict = evaluate(parse_nccl_tests(text), 235, 0)
    assert verdict.codes == ("error_lines",)


def test_timeout():
    result = parse_nccl_tests(load("nccl_h100_8x_timeout.txt"))
    assert result.error_lines == ["gpu-a05: Test timeout (1800s) common.cu:420 all_reduce did not complete"]
    assert not evaluate(result, 235, 124).passed


def test_truncated_mid_table():
    result = parse_nccl_tests(load("nccl_h100_8x_truncated.txt"))
    assert len(result.rows) == 3  # complete rows are kept for display
    assert not result.ok_format
    assert any("malformed data row" in e for e in result.parse_errors)
    assert any("footer" in e for e in result.parse_errors)
    verdict = evaluate(result, 235, 0)
    assert not verdict.passed and "parse_error" in verdict.codes


def test_truncated_after_last_row_is_still_a_failure():
    lines = load("nccl_h100_8x_pass.txt").splitlines()
    text = "\n".join(line for line in lines if "Out of bounds" not in line and "Avg bus" not in line)
    result = parse_nccl_tests(text)
    assert result.rows and not result.ok_format
    assert not evaluate(result, 235, 0).passed


@pytest.mark.parametrize("name", ["garbage.txt", "empty.txt"])
def test_garbage(name):
    result = parse_nccl_tests(load(name))
    assert result.rows == [] and result.parse_errors
    assert not result.ok_format
    verdict = evaluate(result, 235, 0)
    assert not verdict.passed and "no_data" in verdict.codes


def test_old_format_with_error_column_and_bare_footer():
    result = parse_nccl_tests(load("nccl_a800_8x_old_format.txt"))
    assert result.ok_format, result.parse_errors
    assert len(result.rows) == 4 and result.ranks == 8
    row = result.rows[-1]
    assert row["root"] is None and row["redop"] == "sum"
    assert row["out_of_place"]["wrong"] is None and row["out_of_place"]["error"] == 2e-07
    assert result.busbw_largest_gbps == pytest.approx(200.20)
    assert result.out_of_bounds == 0 and result.avg_busbw_footer == 194.2
    assert evaluate(result, 150, 0).passed


def test_old_format_asterisk_marks_a_data_error():
    text = load("nccl_a800_8x_old_format.txt").replace("200.20  2e-07", "200.20  3e-02*")
    result = parse_nccl_tests(text)
    assert result.data_errors == 1
    assert "data_errors" in evaluate(result, 150, 0).codes


def test_sweep_gates_on_largest_size_not_footer_average():
    result = parse_nccl_tests(load("nccl_h100_8x_sweep_avg_below_floor.txt"))
    assert len(result.rows) == 31
    assert result.avg_busbw_footer < 235 < result.busbw_largest_gbps
    assert result.largest_size_bytes == G8
    verdict = evaluate(result, 235, 0)
    assert verdict.passed, verdict.reasons


def test_real_h100_two_nodes():
    result = parse_nccl_tests(load("real_h100_16rank_gcp_a3mega.txt"))
    assert result.ok_format and result.ranks == 16 and len(result.rows) == 31
    assert result.busbw_largest_gbps == 337.35 and result.busbw_peak_gbps == 338.82
    assert result.avg_busbw_footer == 70.742
    assert result.warnings == []  # busbw = algbw × 2·15/16 holds on every row
    assert evaluate(result, 235, 0).passed


def test_real_old_format_k80_with_interleaved_nccl_info():
    result = parse_nccl_tests(load("real_k80_4x_old_format_azureml.txt"))
    assert result.ok_format and result.ranks == 4 and len(result.rows) == 7
    assert result.busbw_largest_gbps == 2.56
    assert result.warnings == []
    verdict = evaluate(result, 235, 0)
    assert verdict.codes == ("below_floor",)


def test_real_allgather_without_device_lines():
    result = parse_nccl_tests(load("real_h200_16rank_allgather_gke.txt"))
    assert result.ok_format and result.ranks is None and len(result.rows) == 24
    assert result.rows[0]["redop"] == "none"
    assert result.busbw_largest_gbps == 376.40


def test_mpi_tag_output_prefix_is_stripped():
    text = "".join(f"[1,0]<stdout>:{line}\n" for line in load("nccl_h100_8x_pass.txt").splitlines())
    result = parse_nccl_tests(text)
    assert result.ok_format and result.busbw_largest_gbps == 430.69


def test_na_wrong_is_none_not_an_error():
    text = load("nccl_h100_8x_pass.txt").replace("430.69      0", "430.69    N/A")
    result = parse_nccl_tests(text)
    assert result.rows[0]["in_place"]["wrong"] is None
    assert result.data_errors == 0 and evaluate(result, 235, 0).passed


def test_busbw_cross_check_warns_on_rank_mismatch():
    result = parse_nccl_tests(load("nccl_h100_8x_pass.txt"), ranks=4)
    assert result.ranks == 4
    assert result.warnings and "2(n-1)/n" in result.warnings[0]
    assert evaluate(result, 235, 0).passed  # a warning alone does not fail the run


def test_non_zero_exit_fails_a_clean_output():
    verdict = evaluate(parse_nccl_tests(load("nccl_h100_8x_pass.txt")), 235, 1)
    assert verdict.codes == ("exit_code",)


def test_floor_is_inclusive():
    result = parse_nccl_tests(load("nccl_h100_8x_pass.txt"))
    assert evaluate(result, 430.69, 0).passed
    assert not evaluate(result, 430.70, 0).passed


def test_to_dict_is_json_safe():
    import json

    data = parse_nccl_tests(load("real_h100_16rank_gcp_a3mega.txt")).to_dict()
    assert json.loads(json.dumps(data, allow_nan=False))["ok_format"] is True
