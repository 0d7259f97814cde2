"""Check characters of the two Chinese identity codes the platform reads, so a typo is caught before it is stored.

- The unified social credit code (统一社会信用代码, GB 32100-2015): 18 characters whose last is a check character;
  a company's identity for real-name verification and the taxpayer id (纳税人识别号) on fapiao, where a typo makes
  the fapiao unusable for the buyer's tax deduction.
- The citizen identification number (公民身份号码, GB 11643-1999): 6 digits of region, 8 of birth date, 3 of
  sequence and an ISO 7064 MOD 11-2 check character (0-9 or X); a person's real-name verification.
"""
import datetime

from django.utils.translation import gettext

# GB 32100: digits and capitals without I, O, Z, S, V (31 characters, each worth its index).
CHARSET = "0123456789ABCDEFGHJKLMNPQRTUWXY"
WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)  # 3^i mod 31


def uscc_check_char(first17: str) -> str:
    """The 18th character of a code that starts with these 17."""
    total = sum(CHARSET.index(c) * w for c, w in zip(first17, WEIGHTS, strict=True))
    return CHARSET[(31 - total % 31) % 31]


def uscc_error(code: str) -> str:
    """Why `code` is not a valid unified social credit code ("" when it is)."""
    if len(code) != 18:
        return gettext("A unified social credit code has 18 characters.")
    bad = sorted({c for c in code if c not in CHARSET})
    if bad:
        return gettext("A unified social credit code uses digits and capitals other than I, O, Z, S, V; not "
                       "%(characters)s.") % {"characters": "".join(bad)}
    if uscc_check_char(code[:17]) != code[17]:
        return gettext("The check character does not match: a character was mistyped.")
    return ""


# GB 11643: weight of digit i is 2^(17-i) mod 11; the check character of a sum s is CHECK[s mod 11].
ID_WEIGHTS = tuple(pow(2, 17 - i, 11) for i in range(17))
ID_CHECK = "10X98765432"


def id_check_char(first17: str) -> str:
    """The 18th character of a citizen identification number that starts with these 17 digits."""
    return ID_CHECK[sum(int(c) * w for c, w in zip(first17, ID_WEIGHTS, strict=True)) % 11]


def id_number_error(number: str) -> str:
    """Why `number` is not a valid 18-character citizen identification number ("" when it is)."""
    if len(number) != 18:
        return gettext("An identification number has 18 characters.")
    if not number[:17].isdigit() or not number[:17].isascii() or number[17] not in "0123456789X":
        return gettext("An identification number is 17 digits and a last digit or X.")
    if number[:2] == "00":
        return gettext("The first six digits are not a region code.")
    try:
        born = datetime.date(int(number[6:10]), int(number[10:12]), int(number[12:14]))
    except ValueError:
        return gettext("Digits 7 to 14 are not a date of birth (YYYYMMDD).")
    if born.year < 1900 or born > datetime.date.today():
        return gettext("Digits 7 to 14 are not a possible date of birth.")
    if id_check_char(number[:17]) != number[17]:
        return gettext("The check character does not match: a digit was mistyped.")
    return ""


def id_number_masked(number: str) -> str:
    """What is shown of an identification number: its first and last four characters."""
    return f"{number[:4]}{'*' * (len(number) - 8)}{number[-4:]}"
