"""2.5: load at the profile's concurrency levels with a fixed output length."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from vfleet.verify.client import stream_completion
from vfleet.verify.probe.load import make_prompt, run_level
from vfleet.verify.target import Target


def _baseline(path: str, level: int) -> float | None:
    data = json.loads(Path(path).read_text())
    for row in (data.get("figures") or {}).get("load", []):
        if row.get("concurrency") == level:
            return float(row["out_tok_per_s"])
    return None


def test_load(target: Target, figures: dict[str, Any], load_level: int) -> None:
    spec = target.profile.verify.load
    if not figures.get("load_warmed"):
        for i in range(2):  # warm up, so a cold first request does not dominate C1
            stream_completion(target.client, make_prompt(f"warm-{i}", spec.prompt_tokens, i), spec.output_tokens)
        figures["load_warmed"] = True
    n = spec.requests_per_level or max(8, 2 * load_level)
    res = run_level(target.client, load_level, n, spec.prompt_tokens, spec.output_tokens, f"load-{time.time_ns()}")
    figures.setdefault("load", []).append(res.as_dict())
    assert not res.problems, (
        f"expected all {n} requests at C{load_level} to stream {spec.output_tokens} tokens (ignore_eos) to their "
        f"end (finish_reason length, usage, [DONE]); {len(res.problems)} did not: " + "; ".join(res.problems[:5])
    )
    floor = spec.min_output_tok_per_s.get(load_level)
    if floor is not None:
        assert res.out_tok_per_s >= floor, (
            f"expected >= {floor:.1f} output tok/s at C{load_level} (profile); saw {res.out_tok_per_s:.1f}"
        )
    if spec.baseline:
        base = _baseline(spec.baseline, load_level)
        if base is not None:
            allowed = base * (1 - spec.max_regression)
            assert res.out_tok_per_s >= allowed, (
                f"expected >= {allowed:.1f} output tok/s at C{load_level} (baseline {base:.1f} from "
                f"{spec.baseline}, {spec.max_regression:.0%} allowed regression); saw {res.out_tok_per_s:.1f}"
            )
