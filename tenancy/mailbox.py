"""The mailbox an address delivers to, for the one-trial-per-mailbox rule (not for logins: an account's email
stays as typed, normalised by `normalize_email`).

Only rules a provider documents, so two real people's mailboxes never share a key (README, "One trial per
mailbox"):

- Google (gmail.com, googlemail.com): one mailbox for both domains; dots in the local part are ignored and
  everything from `+` on is a tag.
- Microsoft (outlook.com, hotmail.com, live.com, msn.com): `+tag` plus addressing; dots count, and each domain
  is its own mailbox.
- Proton (proton.me, protonmail.com, protonmail.ch, pm.me): `+tag` plus addressing.
- The Chinese providers (QQ Mail: qq.com, vip.qq.com, foxmail.com; NetEase: 163.com, 126.com, yeah.net; Sina,
  Sohu, Aliyun, 139.com): none documents plus addressing or ignored dots, so none is applied. Their aliases (a QQ
  number, its English alias and its foxmail.com name) reach one mailbox, but nothing in the address says which
  alias belongs to which number, so they cannot be joined here.
"""
import hashlib
import hmac

from django.conf import settings

from .models import normalize_email

GOOGLE = "gmail.com"
ALIAS_DOMAINS = {"googlemail.com": GOOGLE}
DOTS_IGNORED = frozenset({GOOGLE})
PLUS_TAGS = frozenset({GOOGLE, "outlook.com", "hotmail.com", "live.com", "msn.com",
                       "proton.me", "protonmail.com", "protonmail.ch", "pm.me"})


def mailbox_key(email: str) -> str:
    """`A.da+1@GoogleMail.com` → `ada@gmail.com`: the address with the provider's documented aliases folded."""
    email = normalize_email(email)
    local, at, domain = email.rpartition("@")
    if not at:
        return email
    domain = ALIAS_DOMAINS.get(domain, domain)
    if domain in PLUS_TAGS:
        local = local.split("+", 1)[0]
    if domain in DOTS_IGNORED:
        local = local.replace(".", "")
    return f"{local}@{domain}" if local else email  # "+x@gmail.com": no mailbox name to fold to


def mailbox_erased(key: str) -> str:
    """What a trial claim keeps of a mailbox once its account is deleted (privacy/deletion.py): a keyed digest, so
    the address is gone but the same mailbox still never earns a second trial."""
    digest = hmac.new(settings.SECRET_KEY.encode(), key.encode(), hashlib.sha256).hexdigest()
    return f"erased-{digest[:48]}@erased.invalid"
