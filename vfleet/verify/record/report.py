"""The boot-verify report: report.json (machines), report.xml (JUnit, written by pytest), report.md
with PNG plots (people). `write` is the one place report.json and report.md are written; a writer of
another format reads report.json back with vfleet.verify.record.model.Report.load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vfleet.verify.answers.compare import AnswersCompared
from vfleet.verify.answers.figure import AnswersFigure, summary
from vfleet.verify.record import model
from vfleet.verify.record.model import SCHEMA, CheckResult, Figures, Report
from vfleet.verify.record.plots import fmt as _fmt
from vfleet.verify.record.plots import plot_lines, pyplot

__all__ = ["SCHEMA", "build", "markdown", "write"]

#: Figures the suite keeps for itself (test_4_load's warm-up flag) and never reports.
_INTERNAL_FIGURES = ("load_warmed",)


def build(
    checks: list[CheckResult],
    exitstatus: int,
    figures: dict[str, Any],
    meta: dict[str, Any],
    not_applicable: dict[str, str] | None = None,
    partial: bool = False,
) -> Report:
    """The report. It passes only when the suite ran, nothing failed and every skipped check is one
    the profile declares not applicable (``not_applicable``: check id -> reason); any other skip is
    listed in `unexcused_skips` and fails it. ``partial`` (a run of selected checks, -k) never
    supports a promotion."""
    declared = not_applicable or {}
    checks = [c.model_copy() for c in checks]
    counts = {k: sum(1 for c in checks if c.outcome == k) for k in ("passed", "failed", "skipped")}
    unexcused = [{"id": c.name, "message": c.message} for c in model.unexcused(checks, declared)]
    excused: dict[str, str] = {}
    for c in checks:
        reason = declared.get(c.name)
        if c.outcome == "skipped" and reason:
            c.not_applicable = reason
            excused[c.name] = reason
    passed = not model.verdict_problems(checks, exitstatus, declared)
    figs = Figures.model_validate({k: v for k, v in figures.items() if k not in _INTERNAL_FIGURES})
    return Report.model_validate(
        {
            "schema": SCHEMA,
            "passed": passed,
            **meta,
            "vllm_version": figs.vllm_version,
            "pytest_exitstatus": exitstatus,
            "counts": counts,
            "unexcused_skips": unexcused,
            "not_applicable": excused,
            "checks": checks,
            "figures": figs,
            "partial": partial,
        }
    )


def _plots(report: Report, out: Path) -> list[str]:
    load = report.figures.load or []
    compared = report.figures.answers_compared
    if not load and not (compared and compared.diffs):
        return []
    plt, missing = pyplot()
    if plt is None:
        report.plots_missing = missing
        return []
    made = _drift_plot(plt, report, out) if compared and compared.diffs else []
    if not load:
        return made
    return made + _load_plots(plt, report, out, load)


def _drift_plot(plt: Any, report: Report, out: Path) -> list[str]:
    """The reference text's |log-probability difference| per position against the last promoted run, with
    the profile's A/A allowance (its p99 and mean bounds) where one is measured."""
    c = report.figures.answers_compared
    assert c is not None
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.plot(range(1, len(c.diffs) + 1), c.diffs, lw=0.6, color="tab:blue", label="|this run - baseline| (nats)")
    if c.allowance_p99 is not None:
        ax.axhline(c.allowance_p99, color="tab:red", ls="--", lw=1, label=f"allowance p99 {c.allowance_p99:.3g}")
    if c.allowance_mean_abs is not None:
        ax.axhline(
            c.allowance_mean_abs, color="tab:orange", ls=":", lw=1, label=f"allowance mean {c.allowance_mean_abs:.3g}"
        )
    ax.set_xlabel("position in the reference text")
    ax.set_ylabel("nats")
    ax.set_title("answers gate: log-probability drift against the last promoted run (A/A allowance dashed)")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "answers_drift.png", dpi=110)
    plt.close(fig)
    return ["answers_drift.png"]


def _load_plots(plt: Any, report: Report, out: Path, load: list[Any]) -> list[str]:
    rows = sorted(load, key=lambda r: r.concurrency)
    conc = [r.concurrency for r in rows]
    made: list[str] = []

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.plot(conc, [r.out_tok_per_s for r in rows], "o-", color="tab:blue")
    ax1.set_xlabel("concurrency")
    ax1.set_ylabel("output tokens/s")
    ax1.set_title("throughput")
    ax2.plot(conc, [r.tpot_p50_ms or 0 for r in rows], "s-", color="tab:red", label="p50")
    ax2.plot(conc, [r.tpot_p90_ms or 0 for r in rows], "^--", color="tab:orange", label="p90")
    ax2.set_xlabel("concurrency")
    ax2.set_ylabel("TPOT (ms)")
    ax2.set_title("time per output token")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{report.profile}: load at fixed output length")
    fig.tight_layout()
    fig.savefig(out / "throughput_tpot.png", dpi=110)
    plt.close(fig)
    made.append("throughput_tpot.png")

    fig, ax = plt.subplots(figsize=(6, 3.6))
    data = [r.latencies_ms or [0.0] for r in rows]
    ax.boxplot(data, tick_labels=[f"C{c}" for c in conc])
    ax.set_ylabel("request latency (ms)")
    ax.set_title("latency distribution per concurrency")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    made.append("latency.png")
    return made


def markdown(report: Report) -> str:
    c = report.counts
    verdict = "PASS" if report.passed else "FAIL"
    img = report.image
    lines = [
        f"# Boot-verify {verdict}: {report.profile}",
        "",
        "| | |",
        "|---|---|",
        f"| server | `{report.url}` |",
        f"| served model | `{report.served_model}` |",
        f"| vLLM (/version) | {report.vllm_version} |",
        f"| image | `{img.ref or '–'}` id `{img.id or '–'}` |",
        f"| registry digest | `{img.digest or '–'}` ({img.source or 'no image'}: {img.reason}) |",
        f"| checks | {c.passed} passed, {c.failed} failed, {c.skipped} skipped "
        f"({len(report.unexcused_skips)} not verified) |",
        f"| suite wall time | {_fmt(report.wall_s)} s |",
        "",
    ]
    if report.unexcused_skips:
        lines += ["## Not verified (skipped, not declared not applicable by the profile)", ""]
        lines += [f"- `{u.id}`: {u.message}" for u in report.unexcused_skips]
        lines.append("")
    lines += [
        "## Checks",
        "",
        "| check | outcome | s | detail |",
        "|---|---|---|---|",
    ]
    for t in report.checks:
        outcome: str = t.outcome
        text = t.message
        if outcome == "skipped":
            outcome = "not applicable" if t.not_applicable else "**skipped: not verified**"
            text = t.not_applicable or text
        msg = text.replace("\n", " ").replace("|", "\\|")[:300]
        lines.append(f"| `{t.id}` | {outcome} | {t.duration_s:.2f} | {msg} |")
    f = report.figures
    if f.answers is not None:
        lines += answers_lines(f.answers)
    if f.answers_compared is not None:
        lines += compared_lines(f.answers_compared)
    integ = f.integrity
    if integ:
        lines += [
            "",
            "## Prefix-cache integrity probe (seed 003)",
            "",
            f"KV pool {integ.num_gpu_blocks} blocks x {integ.block_size} tokens = {integ.pool_tokens:,} "
            f"tokens; cached prompt {integ.prompt_tokens} tokens, {integ.questions} questions; "
            f"{integ.fillers} fillers of {integ.filler_tokens} tokens ({integ.pool_cycles}x the pool); "
            f"{integ.hit_tokens_during_compare:.0f} hit tokens while comparing; "
            f"{len(integ.mismatches)} mismatches.",
        ]
        if integ.hits:
            lines += [
                "",
                f"Compared: token ids and the logprobs of the top {integ.top_logprobs} alternatives; "
                f"max logprob gap cached vs cache_salt {integ.max_logprob_gap:.3g} nats, tolerance "
                f"{integ.logprob_tolerance:g} (`verify.integrity.logprob_tolerance`). Prefix-cache hits per "
                f"request ({integ.hit_source}): cached "
                + ", ".join(f"{h['cached_hit']}/{h['cached_expected']}" for h in integ.hits)
                + " (hit/expected), cache_salt "
                + ", ".join(str(h["salted_hit"]) for h in integ.hits)
                + " (expected 0).",
            ]
        if integ.questions_judged:
            lines += [
                "",
                f"Noise rule: allowance {integ.noise_factor:g} x noise floor {integ.noise_floor:.3g} + tolerance "
                f"{integ.logprob_tolerance:g} = {integ.allowance:.3g} nats; noise bound {integ.noise_bound:g}; "
                f"{integ.noise_rounds} confirmation round(s).",
                "",
                "| question | verdict | noise (salted vs salted, nats) | gap (cached vs nearer salted, nats) | "
                "salted answers |",
                "|---|---|---|---|---|",
            ]
            for q in integ.questions_judged:
                name = str(q["question"]).replace("|", "\\|")
                lines.append(
                    f"| {name} | {q['verdict']} | {q['noise']:.4g} | {q['max_gap']:.4g} | {q['salted_answers']} |"
                )
            lines += [
                f"\n{q['question']}: its first cached answer departed by {q['first_ask_gap']:.4g} nats and the "
                f"same cached prefix asked again ({q['cached_answers']} asks in all) did not; damage stored in the "
                "cache would have departed again, so this was not counted as a fault."
                for q in integ.questions_judged
                if q.get("first_ask_gap") is not None
            ]
            lines += [
                f"\n{q['question']}: its cached answer departed by {q['hit_path_gap']:.4g} nats on every ask "
                f"({q['cached_answers']} asks), and a salted copy asked twice departed the same way on its second "
                "ask, a cache hit over fresh blocks: the cache-hit path's rounding, not damage stored in the cycled "
                "blocks, so this was not counted as a fault."
                for q in integ.questions_judged
                if q.get("hit_path_gap") is not None
            ]
    if f.log_families:
        allowed = f.log_allowed or []
        lines += [
            "",
            "## Server log",
            "",
            f"Fault families checked (deny by default, vfleet/verify/log/rules.py): {', '.join(f.log_families)}; "
            f"excused by the allow-list: "
            + (", ".join(f"{a.entry} (line {a.line})" for a in allowed) if allowed else "nothing")
            + ".",
        ]
    if f.log_warnings is not None:
        nw = f.new_warnings
        new = set(nw.new) if nw else set()
        lines += ["", "## Warnings (WARNING records and stderr lines, as templates)", ""]
        lines.append((nw.note if nw else "not compared with a promoted report") + ".")
        if nw and nw.new:
            lines += ["", "New since the last promoted report:", ""]
            lines += [f"- `{x}`" for x in nw.new]
        if nw and nw.excused:
            lines += ["", "New, excused by the profile's verify.warnings.allow:", ""]
            lines += [f"- `{x}`: {why}" for x, why in nw.excused.items()]
        lines += ["", "| new | count | first line | template |", "|---|---|---|---|"]
        for w in f.log_warnings:
            name = w.template.replace("|", "\\|").replace("`", "'")
            lines.append(f"| {'NEW' if w.template in new else ''} | {w.count} | {w.first_line} | {name} |")
    if f.load:
        lines += [
            "",
            "## Load (fixed output length)",
            "",
            "| C | requests | completed | out tok/s | TTFT p50 ms | TPOT p50 ms | latency p50/p90 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in sorted(f.load, key=lambda r: r.concurrency):
            lines.append(
                f"| {r.concurrency} | {r.requests} | {r.completed} | {_fmt(r.out_tok_per_s)} | "
                f"{_fmt(r.ttft_p50_ms)} | {_fmt(r.tpot_p50_ms, '.2f')} | "
                f"{_fmt(r.latency_p50_ms)} / {_fmt(r.latency_p90_ms)} |"
            )
    lines += plot_lines(report.plots, report.plots_missing)
    return "\n".join(lines) + "\n"


def answers_lines(fig: AnswersFigure) -> list[str]:
    """report.md's answers section: the run's accuracy with its interval and every item answered wrong (every
    item's answer is in report.json); the comparison with the promoted build is promotion's."""
    wrong = [a for a in fig.record.get("items", []) if not a.get("correct")]
    lines = [
        "",
        "## Answers (docs/answers.md)",
        "",
        summary(fig) + ".",
        "",
        f"Answered wrong or not at all: {len(wrong)} items.",
        "",
        "| item | response | finish | error |",
        "|---|---|---|---|",
    ]
    for a in wrong:
        said = str(a.get("response", "")).replace("\n", " ").replace("|", "\\|")[:80]
        lines.append(f"| {a.get('id')} | {said} | {a.get('finish_reason')} | {str(a.get('error', ''))[:80]} |")
    return lines


def compared_lines(c: AnswersCompared) -> list[str]:
    """report.md's view of the answers run against the last promoted one (promotion judges it again)."""
    lines = ["", f"### Against the last promoted run: {c.baseline}", ""]
    lines += [f"- {v}" for v in c.verdict]
    lines += ["", f"Items whose answer changed: {len(c.changed)}.", ""]
    if c.changed:
        lines += ["| item | question | baseline | this run |", "|---|---|---|---|"]
        for i in c.changed:
            cell = [x.replace("|", "\\|").replace("\n", " ") for x in (i.question, i.baseline, i.candidate)]
            mark = ["right" if i.baseline_correct else "wrong", "right" if i.candidate_correct else "wrong"]
            lines.append(f"| {i.id} | {cell[0]} | {cell[1]} ({mark[0]}) | {cell[2]} ({mark[1]}) |")
    return lines


def write(report: Report, out: Path) -> Path:
    """Write DIR/report.json, report.md and its plots (the one place they are written); returns the
    path of report.json."""
    out.mkdir(parents=True, exist_ok=True)
    report.plots = _plots(report, out)
    (out / "report.json").write_text(report.to_json())
    (out / "report.md").write_text(markdown(report))
    from vfleet.pages import report_html  # jinja2 only where a report is written, not at CLI load  # noqa: PLC0415

    report_html.write(out)
    return out / "report.json"
