"""`cardmix` as a user runs it, against the live server with a real worker moving the instances."""
import os
import stat

import pytest

from tests.factories.provisioning import make_fleet

pytestmark = [pytest.mark.worker, pytest.mark.redis]


def test_up_prints_the_running_instance_with_its_readiness_and_rm_ends_it(cli, catalog):
    make_fleet(h100=1)
    code, body, err = cli("up", "2xH100", "--name", "cli-run", "--json")
    assert code == 0, err
    assert body["state"] == "running" and body["name"] == "cli-run"
    assert body["items"] == [{"accelerator": "h100-sxm-80g", "count": 2, "price_per_card_hour": "1.900000"}]
    [report] = body["readiness"]
    assert report["passed"] and report["busbw_gbps"] >= report["floor_gbps"]
    code, listed, _ = cli("ls", "--json")
    assert code == 0 and [i["name"] for i in listed] == ["cli-run"]
    code, gone, err = cli("rm", "cli-run", "--json")
    assert code == 0, err
    assert gone["state"] in ("terminating", "terminated")


def test_no_capacity_is_a_sentence_and_exit_code_3(cli, catalog):
    make_fleet(h100=1)  # 8 cards
    assert cli("up", "8xH100", "--no-wait", "--json")[0] == 0
    code, out, err = cli("up", "8xH100", "--json")
    assert code == 3, (out, err)
    assert "error:" in err and "Traceback" not in err
    assert len(err.strip().splitlines()[0].split()) > 4  # a sentence, not a code


def test_bad_mix_unknown_card_and_no_login_have_their_codes(cli, catalog):
    make_fleet(h100=1)
    assert cli("up", "8xQ999", "--json")[0] == 2
    assert cli("up", "x8", "--json")[0] == 2
    code, _, err = cli("ls", token=None)
    assert code == 6 and "cardmix login" in err
    assert cli("stop", "no-such-instance")[0] == 5


def test_login_keeps_the_token_private_and_later_commands_use_it(cli, platform, tmp_path):
    url, owner, secret, _ = platform
    code, body, err = cli("login", "--token", secret, "--url", url, "--json", token=None)
    assert code == 0, err
    path = tmp_path / "config" / "cardmix" / "config.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert body["organization"] == owner.organization.name
    code, balance, err = cli("balance", "--json", token=None)  # from the file, no CARDMIX_TOKEN
    assert code == 0 and balance["cash"] == "1000.000000", err
    assert cli("login", "--token", "cmx_wrong", "--url", url, token=None)[0] == 6


def test_catalog_quote_and_usage(cli, catalog):
    make_fleet(h100=1)
    code, accs, _ = cli("catalog", "--json")
    assert code == 0 and {"h100-sxm-80g", "ascend-910b"} <= {a["slug"] for a in accs}
    code, quote, _ = cli("quote", "4xH100", "--json")
    assert code == 0 and quote["available"] is True and quote["price_per_hour"] == "7.600000"  # 4 × 1.90
    code, lines, _ = cli("usage", "--json")
    assert code == 0 and lines == []
    assert cli("usage", "--month", "2026-13")[0] == 2
