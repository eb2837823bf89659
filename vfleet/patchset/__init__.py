"""The vfleet patch set: pins, fetch, apply (no fuzz, all-or-nothing), status (rebase report), checker."""
