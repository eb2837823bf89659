"""The A/B report: ab.json (machines), ab.md with a PNG plot of the per-round ratios and the interval
(people). Named ab.* so that `vfleet promote`'s search for boot-verify report.json files never reads it."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

from vfleet.ab.run import AbRun
from vfleet.ab.stats import METRICS
from vfleet.verify.record.plots import fmt as _fmt
from vfleet.verify.record.plots import plot_lines, pyplot

SCHEMA = 1
JSON_NAME = "ab.json"
MD_NAME = "ab.md"
PLOT_NAME = "ab_ratios.png"


def build(run: AbRun, meta: dict[str, Any], images: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report; ``images`` (arm -> vfleet.verify.record.image.ImageRecord.as_dict()) says what each arm runs."""
    comps = [c.as_dict() for c in run.comparisons]
    arms = {name: {**arm.as_dict(), "image": (images or {}).get(name)} for name, arm in run.arms.items()}
    verdicts = {f"{c['metric']}@C{c['level']}": c["verdict"] for c in comps}
    not_worse = {f"{c['metric']}@C{c['level']}": c["not_worse"] for c in comps}
    seen = [c["detectable"] for c in comps if c["detectable"] is not None]
    return {
        "schema": SCHEMA,
        "kind": "vfleet-ab",
        "mode": "A/A" if run.aa else "A/B",
        "status": "broken" if run.broken else "complete",
        "broken": run.broken,
        **meta,
        "arms": arms,
        "settings": run.settings.model_dump(),
        "order": "rounds alternate A B, B A, ...: round k runs A first when k is even, B first when k is odd",
        "wall_s": round(run.wall_s, 2),
        "verdicts": verdicts,
        # Non-inferiority (vfleet.ab.stats.non_inferior): every comparison's worse bound within the margin.
        "margin": run.settings.min_effect,
        "not_worse_by_metric": not_worse,
        "not_worse": bool(comps) and not run.broken and all(not_worse.values()),
        # The power: the smallest regression the run could have shown, over all its comparisons (the
        # largest of their `detectable`); None when no comparison has an interval.
        "detectable": max(seen) if seen and len(seen) == len(comps) else None,
        "false_verdicts": [f"{c.metric}@C{c.level}" for c in run.false_verdicts] if run.aa else None,
        "comparisons": comps,
        "measurements": [vars(m) for m in run.measurements],
        "warmup": [vars(m) for m in run.warmup],
    }


def _plot(report: dict[str, Any], out: Path) -> list[str]:
    comps = report["comparisons"]
    if not comps:
        return []
    plt, missing = pyplot()
    if plt is None:
        report["plots_missing"] = missing
        return []
    levels = sorted({c["level"] for c in comps})
    keys = [m.key for m in METRICS]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.8), squeeze=False)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for ax, key in zip(axes[0], keys, strict=True):
        rows = [c for c in comps if c["metric"] == key]
        for i, c in enumerate(sorted(rows, key=lambda c: c["level"])):
            x0 = levels.index(c["level"])
            n = len(c["ratios"])
            xs = [x0 - 0.25 + 0.5 * (j / max(1, n - 1)) for j in range(n)]
            color = colors[i % len(colors)]
            ax.scatter(xs, c["ratios"], s=14, color=color, alpha=0.7, label=f"C{c['level']} rounds")
            if c["low"] is not None and c["ratio"] is not None:
                ax.errorbar(
                    [x0], [c["ratio"]], yerr=[[c["ratio"] - c["low"]], [c["high"] - c["ratio"]]],
                    fmt="D", color="black", capsize=6, markersize=5,
                )  # fmt: skip
                ax.annotate(c["verdict"], (x0, c["high"]), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=8)  # fmt: skip
        eff = rows[0]["min_effect"] if rows else 0.05
        ax.axhline(1.0, color="grey", lw=1)
        for y in (1 - eff, 1 + eff):
            ax.axhline(y, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(levels)), [f"C{lv}" for lv in levels])
        ax.set_xlim(-0.6, len(levels) - 0.4)
        ax.set_title(f"{rows[0]['label'] if rows else key} ({rows[0]['direction'] if rows else ''})", fontsize=9)
        ax.set_ylabel("B/A per round; estimate and interval")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{report['mode']} {report['arms']['A']['model']}: B/A per paired round (dashes: 1 ± minimum effect)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out / PLOT_NAME, dpi=110)
    plt.close(fig)
    return [PLOT_NAME]


def _pct(v: float | None) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{(v - 1) * 100:+.1f}%"


def markdown(report: dict[str, Any], plots: list[str]) -> str:
    a, b = report["arms"]["A"], report["arms"]["B"]
    s = report["settings"]
    lines = [
        f"# {report['mode']} {report['status']}: {a['model']}",
        "",
        "| | |",
        "|---|---|",
        f"| A | `{a['url']}` (vLLM {a.get('vllm_version')}, max_model_len {a.get('max_model_len')}) |",
        f"| B | `{b['url']}` (vLLM {b.get('vllm_version')}, max_model_len {b.get('max_model_len')}) |",
        *(
            f"| image {name} | `{arm['image'].get('ref')}` digest `{arm['image'].get('digest')}` |"
            for name, arm in (("A", a), ("B", b))
            if arm.get("image")
        ),
        f"| profile | {report.get('profile') or '–'} |",
        f"| rounds | {s['rounds']} (A B, B A, ...), levels {', '.join(f'C{x}' for x in s['levels'])}, "
        f"{s['prompt_tokens']}-token prompts, {s['output_tokens']} output tokens |",
        f"| statistics | 20%-trimmed geometric mean of per-round B/A; paired bootstrap intervals ({s['n_resamples']} "
        f"resamples), family-wise {s['confidence']:.0%}"
        + (
            f" (each at {report['comparisons'][0]['confidence']:.2%}, Bonferroni over {len(report['comparisons'])})"
            if report["comparisons"]
            else ""
        )
        + f"; minimum effect {s['min_effect']:.0%} |",
        f"| wall time | {_fmt(report.get('wall_s'))} s |",
        "",
    ]
    if report["broken"]:
        lines += [f"**No verdict: the run broke.** {report['broken']}", ""]
    if report["mode"] == "A/A" and report["comparisons"]:
        fv = report["false_verdicts"] or []
        lines += [
            f"A/A: both arms are the same build, so every verdict other than inconclusive is false: "
            f"{len(fv)} of {len(report['comparisons'])} ({', '.join(fv) or 'none'}).",
            "",
        ]
    if report["comparisons"] and not report["broken"]:
        det = report.get("detectable")
        lines += [
            f"**Not worse within the {s['min_effect']:.0%} margin on every metric: "
            f"{'yes' if report.get('not_worse') else 'NO'}** (non-inferiority: each interval's worse bound within "
            f"1 ± {s['min_effect']:.2f}; inconclusive is not a pass). **Power:** the smallest regression this run "
            f"could have shown is {'–' if det is None else f'{det:.1%}'} (the widest interval's half-width in log "
            "terms); a smaller one would have looked like noise.",
            "",
        ]
    if report["comparisons"]:
        lines += [
            "| level | metric | A median | B median | B/A | interval | change | verdict | not worse | detectable "
            "| why |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in report["comparisons"]:
            am = sorted(c["a"])[len(c["a"]) // 2] if c["a"] else None
            bm = sorted(c["b"])[len(c["b"]) // 2] if c["b"] else None
            iv = f"[{c['low']:.3f}, {c['high']:.3f}]" if c["low"] is not None else "–"
            lines.append(
                f"| C{c['level']} | {c['label']} ({c['direction']}) | {_fmt(am, '.2f')} | {_fmt(bm, '.2f')} | "
                f"{_fmt(c['ratio'], '.3f')} | {iv} | {_pct(c['ratio'])} | **{c['verdict']}** | "
                f"{'yes' if c['not_worse'] else '**no**'} | "
                f"{'–' if c['detectable'] is None else format(c['detectable'], '.1%')} | "
                f"{c['reason'].replace('|', '/')}; {c['not_worse_reason'].replace('|', '/')} |"
            )
    lines += plot_lines(plots, report.get("plots_missing"), "plot")
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plots = _plot(report, out)
    report["plots"] = plots
    (out / JSON_NAME).write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / MD_NAME).write_text(markdown(report, plots))
    return out / JSON_NAME


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
