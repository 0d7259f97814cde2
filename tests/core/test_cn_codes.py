"""GB 32100 unified social credit codes, the taxpayer id on a fapiao: real companies' codes pass, and every single
mistyped character is caught (31 is prime and no weight is 0 mod 31, so a substitution always moves the sum)."""
import pytest

from core.cn_codes import CHARSET, uscc_check_char, uscc_error

# Published codes (business licences of Alibaba (China), Huawei Technologies, China Mobile, Tencent (Shenzhen)).
REAL = ["91330100716105852F", "914403001922038216", "91110000100010433L", "9144030071526726XG"]


@pytest.mark.parametrize("code", REAL)
def test_real_codes_are_valid(code):
    assert uscc_error(code) == "" and uscc_check_char(code[:17]) == code[17]


@pytest.mark.parametrize("code", REAL)
def test_every_single_substitution_is_refused(code):
    for i in range(18):
        for c in CHARSET:
            if c != code[i]:
                typo = code[:i] + c + code[i + 1:]
                assert uscc_error(typo), typo


def test_length_and_letters_outside_the_charset_are_named():
    assert "18 characters" in uscc_error("9133010071610585")
    assert "not IO" in uscc_error("91330100716105I5O2")
    assert "not" in uscc_error("91330100716105852f")  # lower case is not in GB 32100 (the service upper-cases)
