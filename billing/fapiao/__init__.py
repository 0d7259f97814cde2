"""Fapiao (发票) requests: validators, the amount an organization may still invoice, the request/issue/reject
services, refunds after issue flagged for a red-letter reversal, the API and the operators' admin."""
