"""The ids of the boot-verify checks (the test names of smoke_tests/), kept here once, on the ground floor.

The profile schema validates `verify.not_applicable` against them, and tests/unit/judge/test_verify_checks.py
checks that this list equals what pytest collects from smoke_tests/, and that LOG_CHECKS names the log
check registry (vfleet.verify.log.check.REGISTRY, which smoke_tests/test_6_log.py is parametrized by) in
its order. `test_load[C<n>]` stands for one check per `verify.load.levels` entry.
"""

from __future__ import annotations

import re

#: The log checks of smoke_tests/test_6_log.py, in the order they run: the names of
#: vfleet.verify.log.check.REGISTRY (a unit test ties the two; adding a log check adds its name here).
LOG_CHECKS: tuple[str, ...] = ("faults", "attention_backend", "graph_mode", "kv_tokens", "autofit")

LOAD_TEMPLATE = "test_load[C<n>]"
LOAD_ID_RE = re.compile(r"^test_load\[C[1-9][0-9]*\]$")

#: Every check id, in the order the suite runs them.
CHECK_IDS: tuple[str, ...] = (
    "test_health",
    "test_models",
    "test_weights",
    "test_version",
    "test_first_request",
    "test_probes",
    "test_answers",
    "test_prefix_cache_hit",
    "test_prefix_cache_integrity",
    LOAD_TEMPLATE,
    "test_no_error_or_abort_finishes",
    "test_health_after_load",
    *(f"test_log[{c}]" for c in LOG_CHECKS),
    "test_gpu_health",
)


def is_known(check_id: str) -> bool:
    return check_id in CHECK_IDS or bool(LOAD_ID_RE.match(check_id))


def template(check_id: str) -> str:
    """The id as CHECK_IDS writes it (test_load[C32] -> test_load[C<n>])."""
    return LOAD_TEMPLATE if LOAD_ID_RE.match(check_id) else check_id


#: The only checks a production profile may declare not applicable, and only where its serve arguments turn
#: prefix caching off (vllm enable-prefix-caching: false): with no cache there is nothing to hit or to damage.
#: Every other check (health, models, version, probes, load, metrics, the server log, GPU health) runs on
#: every production node: rule production-checks-run (vfleet.profile_floors).
PREFIX_CACHE_CHECKS: tuple[str, ...] = ("test_prefix_cache_hit", "test_prefix_cache_integrity")


def guards_production(check_id: str) -> bool:
    """A check a production profile never declares not applicable (any but the prefix-cache checks)."""
    return template(check_id) not in PREFIX_CACHE_CHECKS
