"""Leaving Cardmix (PIPL / GDPR): an organization's export of everything it has, and account deletion."""
