"""Billing products (SPEC §4): monthly packages, postpaid invoices, sponsorship grants, monthly statements."""
