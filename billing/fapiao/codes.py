"""The unified social credit code (统一社会信用代码, GB 32100-2015): 18 characters whose last is a check character.

Used as the taxpayer id (纳税人识别号) on fapiao; a typo in it makes the fapiao unusable for the buyer's tax
deduction, so it is checked before anything is stored.
"""
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
        return "A unified social credit code has 18 characters."
    bad = sorted({c for c in code if c not in CHARSET})
    if bad:
        return f"A unified social credit code uses digits and capitals other than I, O, Z, S, V; not {''.join(bad)}."
    if uscc_check_char(code[:17]) != code[17]:
        return "The check character does not match: a character was mistyped."
    return ""
