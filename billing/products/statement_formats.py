"""A statement as API JSON (6-decimal strings) and as CSV (exact 6-decimal amounts, parseable back)."""
import csv
import io
from zoneinfo import ZoneInfo

from core.money import format_ucny

from .statements import Statement

CSV_COLUMNS = ["section", "date", "ref", "detail", "accelerator", "cards", "rate", "seconds", "account", "amount"]


def _iso(dt) -> str | None:
    return dt.isoformat().replace("+00:00", "Z") if dt is not None else None


def _local_date(dt, tz: str) -> str:
    """The date in the statement's time zone, like every other dated line (the UTC date can be a day off)."""
    return dt.astimezone(ZoneInfo(tz)).date().isoformat() if dt is not None else ""


def _money(d: dict, *keys) -> dict:
    return {k: (format_ucny(v) if k in keys else v) for k, v in d.items()}


def statement_json(st: Statement) -> dict:
    """The API body: every amount a 6-decimal string, times ISO-8601 UTC."""
    from datetime import UTC

    return {
        "organization": st.organization_id,
        "month": st.month,
        "time_zone": st.time_zone,
        "period_start": _iso(st.period_start.astimezone(UTC)),
        "period_end": _iso(st.period_end.astimezone(UTC)),
        "accounts": [_money(a, "opening", "credits", "debits", "closing") for a in st.accounts],
        "usage": [_money(u, "rate", "amount", "written_off") for u in st.usage],
        "packages": [{**_money(p, "amount"), "starts_at": _iso(p["starts_at"]), "ends_at": _iso(p["ends_at"]),
                      "items": [_money(i, "rate") for i in p["items"]]} for p in st.packages],
        "other_charges": [_money(c, "amount") for c in st.other_charges],
        "credits_used": {k: format_ucny(v) for k, v in st.credits_used.items()},
        "topups": [_money(t, "amount") for t in st.topups],
        "movements": [_money(m, "amount") for m in st.movements],
        "write_offs": [_money(w, "amount") for w in st.write_offs],
        "totals": {k: format_ucny(v) for k, v in st.totals.items()},
    }


def statement_rows(st: Statement) -> list[list[str]]:
    """CSV rows (without the header), in a fixed order."""
    rows: list[list] = []

    def add(section, *, date="", ref="", detail="", accelerator="", cards="", rate="", seconds="", account="",
            amount=0):
        rows.append([section, date, ref, detail, accelerator, cards, format_ucny(rate) if rate != "" else "",
                     seconds, account, format_ucny(amount)])

    for a in st.accounts:
        add("opening_balance", account=a["account"], amount=a["opening"])
    for u in st.usage:
        add("usage", ref=u["meter_id"], detail=u["instance_id"], accelerator=u["accelerator"], cards=u["cards"],
            rate=u["rate"], seconds=u["seconds"], amount=u["amount"])
    for p in st.packages:
        add("package", date=_local_date(p["starts_at"], st.time_zone), ref=p["package_id"],
            detail=f"{p['instance_id']} period {p['period']}", amount=p["amount"])
    for c in st.other_charges:
        add("charge", date=c["date"], ref=c["transfer_id"], detail=c["code"], account=c["account"], amount=c["amount"])
    for kind, amount in st.credits_used.items():
        add("credits_used", account=kind, amount=amount)
    for t in st.topups:
        add("topup", date=t["date"], ref=t["transfer_id"], detail=t["reference"], account=t["account"],
            amount=t["amount"])
    for m in st.movements:
        add("movement", date=m["date"], ref=m["transfer_id"], detail=f"{m['code']} {m['direction']}",
            account=m["account"], amount=m["amount"] if m["direction"] == "credit" else -m["amount"])
    for w in st.write_offs:
        add("write_off", ref=w["meter_id"], seconds=w["seconds"], amount=w["amount"])
    for a in st.accounts:
        add("closing_balance", account=a["account"], amount=a["closing"])
    for k, v in st.totals.items():
        add(f"total_{k}", amount=v)
    return rows


def statement_csv(st: Statement) -> bytes:
    """UTF-8 CSV, \\r\\n line ends (RFC 4180), identical bytes for identical statements."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(statement_rows(st))
    return out.getvalue().encode()
