"""Helpers the tests share: no test module imports another (tests/unit/test_test_imports.py); what two of them
need lives here, one module per subject."""
