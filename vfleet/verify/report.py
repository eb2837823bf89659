"""The boot-verify report: report.json (machines), report.xml (JUnit, written by pytest), report.md
with PNG plots (people)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vfleet.pages import report_html

#: 2: `passed` fails closed on unexcused skips (`unexcused_skips`, `not_applicable`); `image` holds the
#: image id and the registry manifest digest with its source (vfleet.verify.image.ImageRecord).
SCHEMA = 2


def build(
    results: dict[str, Any],
    figures: dict[str, Any],
    meta: dict[str, Any],
    not_applicable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The report. It passes only when the suite ran, nothing failed and every skipped check is one
    the profile declares not applicable (``not_applicable``: check id -> reason); any other skip is
    listed in `unexcused_skips` and fails it."""
    declared = not_applicable or {}
    tests: list[dict[str, Any]] = results.get("tests", [])
    counts = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "skipped")}
    unexcused: list[dict[str, str]] = []
    excused: dict[str, str] = {}
    for t in tests:
        if t["outcome"] != "skipped":
            continue
        reason = declared.get(t["name"])
        if reason:
            t["not_applicable"] = reason
            excused[t["name"]] = reason
        else:
            unexcused.append({"id": t["name"], "message": t.get("message") or ""})
    exitstatus = int(results.get("exitstatus", 1))
    passed = exitstatus == 0 and counts["failed"] == 0 and counts["passed"] > 0 and not unexcused
    figs = {k: v for k, v in figures.items() if k not in ("load_warmed",)}
    for row in figs.get("load", []):
        row.pop("latencies_ms_full", None)
    return {
        "schema": SCHEMA,
        "passed": passed,
        **meta,
        "vllm_version": figures.get("vllm_version"),
        "pytest_exitstatus": exitstatus,
        "counts": counts,
        "unexcused_skips": unexcused,
        "not_applicable": excused,
        "checks": tests,
        "figures": figs,
    }


def pyplot(report: dict[str, Any]) -> Any | None:
    """matplotlib.pyplot on the Agg backend, or None with ``report["plots_missing"]`` saying why."""
    try:
        import matplotlib
    except ImportError:
        report["plots_missing"] = "matplotlib is not installed: pip install 'vfleet[report]'"
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plots(report: dict[str, Any], out: Path) -> list[str]:
    load = report["figures"].get("load") or []
    if not load:
        return []
    plt = pyplot(report)
    if plt is None:
        return []

    rows = sorted(load, key=lambda r: r["concurrency"])
    conc = [r["concurrency"] for r in rows]
    made: list[str] = []

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.plot(conc, [r["out_tok_per_s"] for r in rows], "o-", color="tab:blue")
    ax1.set_xlabel("concurrency")
    ax1.set_ylabel("output tokens/s")
    ax1.set_title("throughput")
    ax2.plot(conc, [r["tpot_p50_ms"] or 0 for r in rows], "s-", color="tab:red", label="p50")
    ax2.plot(conc, [r["tpot_p90_ms"] or 0 for r in rows], "^--", color="tab:orange", label="p90")
    ax2.set_xlabel("concurrency")
    ax2.set_ylabel("TPOT (ms)")
    ax2.set_title("time per output token")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{report.get('profile')}: load at fixed output length")
    fig.tight_layout()
    fig.savefig(out / "throughput_tpot.png", dpi=110)
    plt.close(fig)
    made.append("throughput_tpot.png")

    fig, ax = plt.subplots(figsize=(6, 3.6))
    data = [r.get("latencies_ms") or [0.0] for r in rows]
    ax.boxplot(data, tick_labels=[f"C{c}" for c in conc])
    ax.set_ylabel("request latency (ms)")
    ax.set_title("latency distribution per concurrency")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    made.append("latency.png")
    return made


def _fmt(v: Any, spec: str = ".1f") -> str:
    if v is None:
        return "–"
    if isinstance(v, int | float):
        return format(v, spec)
    return str(v)


def markdown(report: dict[str, Any], plots: list[str]) -> str:
    c = report["counts"]
    verdict = "PASS" if report["passed"] else "FAIL"
    img = report.get("image") or {}
    lines = [
        f"# Boot-verify {verdict}: {report.get('profile')}",
        "",
        "| | |",
        "|---|---|",
        f"| server | `{report.get('url')}` |",
        f"| served model | `{report.get('served_model')}` |",
        f"| vLLM (/version) | {report.get('vllm_version')} |",
        f"| image | `{img.get('ref') or '–'}` id `{img.get('id') or '–'}` |",
        f"| registry digest | `{img.get('digest') or '–'}` ({img.get('source') or 'no image'}: {img.get('reason')}) |",
        f"| checks | {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped "
        f"({len(report.get('unexcused_skips') or [])} not verified) |",
        f"| suite wall time | {_fmt(report.get('wall_s'))} s |",
        "",
    ]
    if report.get("unexcused_skips"):
        lines += ["## Not verified (skipped, not declared not applicable by the profile)", ""]
        lines += [f"- `{u['id']}`: {u['message']}" for u in report["unexcused_skips"]]
        lines.append("")
    lines += [
        "## Checks",
        "",
        "| check | outcome | s | detail |",
        "|---|---|---|---|",
    ]
    for t in report["checks"]:
        outcome, text = t["outcome"], t.get("message") or ""
        if outcome == "skipped":
            outcome = "not applicable" if t.get("not_applicable") else "**skipped: not verified**"
            text = t.get("not_applicable") or text
        msg = text.replace("\n", " ").replace("|", "\\|")[:300]
        lines.append(f"| `{t['id']}` | {outcome} | {t['duration_s']:.2f} | {msg} |")
    f = report["figures"]
    integ = f.get("integrity")
    if integ:
        lines += [
            "",
            "## Prefix-cache integrity probe (seed 003)",
            "",
            f"KV pool {integ['num_gpu_blocks']} blocks x {integ['block_size']} tokens = {integ['pool_tokens']:,} "
            f"tokens; cached prompt {integ['prompt_tokens']} tokens, {integ['questions']} questions; "
            f"{integ['fillers']} fillers of {integ['filler_tokens']} tokens ({integ['pool_cycles']}x the pool); "
            f"{integ['hit_tokens_during_compare']:.0f} hit tokens while comparing; "
            f"{len(integ['mismatches'])} mismatches.",
        ]
        hits = integ.get("hits") or []
        if hits:
            lines += [
                "",
                f"Compared: token ids and the logprobs of the top {integ['top_logprobs']} alternatives; "
                f"max logprob gap cached vs cache_salt {integ['max_logprob_gap']:.3g} nats, tolerance "
                f"{integ['logprob_tolerance']:g} (`verify.integrity.logprob_tolerance`). Prefix-cache hits per "
                f"request ({integ['hit_source']}): cached "
                + ", ".join(f"{h['cached_hit']}/{h['cached_expected']}" for h in hits)
                + " (hit/expected), cache_salt "
                + ", ".join(str(h["salted_hit"]) for h in hits)
                + " (expected 0).",
            ]
    families = f.get("log_families")
    if families:
        allowed = f.get("log_allowed") or []
        lines += [
            "",
            "## Server log",
            "",
            f"Fault families checked (deny by default, vfleet/verify/logrules.py): {', '.join(families)}; "
            f"excused by the allow-list: "
            + (", ".join(f"{a['entry']} (line {a['line']})" for a in allowed) if allowed else "nothing")
            + ".",
        ]
    load = f.get("load") or []
    if load:
        lines += [
            "",
            "## Load (fixed output length)",
            "",
            "| C | requests | completed | out tok/s | TTFT p50 ms | TPOT p50 ms | latency p50/p90 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in sorted(load, key=lambda r: r["concurrency"]):
            lines.append(
                f"| {r['concurrency']} | {r['requests']} | {r['completed']} | {_fmt(r['out_tok_per_s'])} | "
                f"{_fmt(r['ttft_p50_ms'])} | {_fmt(r['tpot_p50_ms'], '.2f')} | "
                f"{_fmt(r['latency_p50_ms'])} / {_fmt(r['latency_p90_ms'])} |"
            )
    for p in plots:
        lines += ["", f"![{p}]({p})"]
    if report.get("plots_missing"):
        lines += ["", f"(no plots: {report['plots_missing']})"]
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(report, out)
    report["plots"] = plots
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "report.md").write_text(markdown(report, plots))
    report_html.write(out)
    return out / "report.json"
