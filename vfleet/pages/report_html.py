"""report.html: the boot-verify report as one self-contained page, built from a report directory's
report.json and PNG plots (what vfleet.verify.record.report.write leaves there).

The verdict is at the top: PASS only when report.json says `passed` and the run was not partial (-k);
a report that cannot be read, or that lacks its verdict, shows UNKNOWN with the reason. Below it: the
run (server, image, vLLM), what was not verified, every check with its message, the prefix-cache
integrity probe (seed 003), the load figures with their plots, and the server-log families.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vfleet.pages import html
from vfleet.pages.html import Cell

NAME = "report.html"

TEMPLATE = """{% extends "frame.html" %}
{% block body %}
<table id="run">
{% for k, v in run %}<tr><th>{{ k }}</th><td class="mono">{{ v }}</td></tr>
{% endfor %}
</table>
{% if not_verified %}
<h2>Not verified (skipped, not declared not applicable by the profile)</h2>
<ul id="not-verified">{% for u in not_verified %}<li><code>{{ u.id }}</code>: {{ u.message }}</li>{% endfor %}</ul>
{% endif %}
<h2>Checks</h2>
<table id="checks"><tr><th>check</th><th>outcome</th><th>s</th><th>message</th></tr>
{% for c in checks %}<tr data-check="{{ c.id }}" data-outcome="{{ c.outcome.state }}"><td><code>{{ c.id }}</code></td>
<td class="{{ c.outcome.state }}">{{ c.outcome.text }}</td><td>{{ c.seconds }}</td>
<td class="msg">{{ c.message }}</td></tr>
{% endfor %}
</table>
{% if answers %}
<h2>Answers</h2>
<table id="answers">{% for k, v in answers.facts %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}</table>
{% if answers.compared %}
<h3>Against the last promoted run</h3>
<p>{{ answers.compared.baseline }}</p>
<ul id="answers-verdict">{% for v in answers.compared.verdict %}<li>{{ v }}</li>{% endfor %}</ul>
<table id="answers-changed"><tr><th>item</th><th>question</th><th>baseline</th><th>this run</th></tr>
{% for i in answers.compared.changed %}<tr><td>{{ i.id }}</td><td class="msg">{{ i.question }}</td>
<td class="{{ 'ok' if i.baseline_correct else 'bad' }}">{{ i.baseline }}</td>
<td class="{{ 'ok' if i.candidate_correct else 'bad' }}">{{ i.candidate }}</td></tr>{% endfor %}
</table>
{% endif %}
{% endif %}
<h2>Prefix-cache integrity probe (seed 003)</h2>
<table id="integrity">
<tr><th>verdict</th><td class="{{ integrity.verdict.state }}">{{ integrity.verdict.text }}
{% if integrity.verdict.why %}<span class="why">{{ integrity.verdict.why }}</span>{% endif %}</td></tr>
{% for k, v in integrity.facts %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>
{% endfor %}
</table>
{% if integrity.hits %}
<table id="integrity-hits"><tr><th>question</th><th>cached hit / expected</th><th>cache_salt hit (expected 0)</th></tr>
{% for h in integrity.hits %}<tr><td>{{ h.question }}</td><td>{{ h.cached_hit }} / {{ h.cached_expected }}</td>
<td>{{ h.salted_hit }}</td></tr>{% endfor %}
</table>
{% endif %}
{% if integrity.questions %}
<table id="integrity-noise"><tr><th>question</th><th>verdict</th><th>noise (salted vs salted, nats)</th>
<th>noise floor</th><th>gap (cached vs nearer salted, nats)</th><th>allowance</th></tr>
{% for q in integrity.questions %}<tr><td class="msg">{{ q.question }}</td><td>{{ q.verdict }}</td>
<td>{{ q.noise }}</td><td>{{ integrity.floor }}</td><td>{{ q.gap }}</td><td>{{ integrity.allowance }}</td></tr>
{% endfor %}
</table>
{% endif %}
{% if integrity.mismatches %}
<table id="integrity-mismatches"><tr><th>question</th><th>first differing position</th><th>max logprob gap</th>
<th>cached text</th><th>cache_salt text</th></tr>
{% for m in integrity.mismatches %}<tr><td class="msg">{{ m.question }}</td><td>{{ m.first_diff_position }}</td>
<td>{{ m.max_gap }}</td><td class="msg">{{ m.cached_text }}</td><td class="msg">{{ m.salted_text }}</td></tr>
{% endfor %}
</table>
{% endif %}
<h2>Load (fixed output length)</h2>
{% if load %}
<table id="load"><tr><th>C</th><th>requests</th><th>completed</th><th>out tok/s</th><th>TTFT p50 ms</th>
<th>TPOT p50 ms</th><th>latency p50 / p90 ms</th></tr>
{% for r in load %}<tr>{% for v in r %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% else %}<p id="load-missing">No load figures in this report.</p>{% endif %}
{% for p in plots %}<figure><img class="plot" alt="{{ p.name }}" src="{{ p.uri }}">
<figcaption>{{ p.name }}</figcaption></figure>
{% endfor %}
{% for n in plot_notes %}<p class="why">{{ n }}</p>{% endfor %}
{% if log_families %}
<h2>Server log</h2>
<p>Fault families checked (deny by default): {{ log_families }}; excused by the allow-list: {{ log_allowed }}.</p>
{% endif %}
{% endblock %}
"""

ENV = html.environment({NAME: TEMPLATE})


def _fmt(v: Any, spec: str = ".1f") -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int | float):
        return format(v, spec)
    return str(v)


def verdict(report: dict[str, Any]) -> Cell:
    """PASS / FAIL / UNKNOWN of a report, fail-closed: only an explicit `passed: true` of a whole run passes."""
    passed = report.get("passed")
    if not isinstance(passed, bool):
        return html.unknown("report.json holds no verdict (`passed`)", "UNKNOWN")
    if not passed:
        return Cell("FAIL", "bad")
    if report.get("partial"):
        return html.unknown("a partial run (-k) never supports a promotion", "PARTIAL")
    return Cell("PASS", "ok")


def _outcome(check: dict[str, Any]) -> Cell:
    outcome = str(check.get("outcome", "?"))
    if outcome == "passed":
        return Cell("passed", "ok")
    if outcome == "failed":
        return Cell("failed", "bad")
    if outcome == "skipped":
        if check.get("not_applicable"):
            return Cell("not applicable", "info")
        return Cell("skipped: not verified", "bad")
    return html.unknown(f"outcome {outcome!r}", outcome)


def _integrity(report: dict[str, Any]) -> dict[str, Any]:
    checks = {c.get("name"): c for c in report.get("checks") or [] if isinstance(c, dict)}
    check = checks.get("test_prefix_cache_integrity")
    integ = (report.get("figures") or {}).get("integrity")
    if check is None:
        v = html.unknown("the report has no test_prefix_cache_integrity check")
    else:
        v = _outcome(check)
        if v.state != "ok":
            why = str(check.get("not_applicable") or check.get("message") or "")
            v = Cell(v.text, v.state, why if len(why) <= 400 else why[:400] + "… (the whole message: Checks)")
    if not isinstance(integ, dict):
        facts = [("figures", "the probe left no figures (it did not get as far as cycling the pool)")]
        return {"verdict": v, "facts": facts, "hits": [], "mismatches": [], "questions": []}
    facts = [
        ("KV pool", f"{_fmt(integ.get('num_gpu_blocks'), 'd')} blocks x {_fmt(integ.get('block_size'), 'd')} tokens"),
        (
            "cached prompt",
            f"{_fmt(integ.get('prompt_tokens'), 'd')} tokens, {_fmt(integ.get('questions'), 'd')} questions",
        ),
        (
            "fillers",
            f"{_fmt(integ.get('fillers'), 'd')} of {_fmt(integ.get('filler_tokens'), 'd')} tokens "
            f"({_fmt(integ.get('pool_cycles'), 'g')}x the pool)",
        ),
        ("compared", f"token ids and the top {_fmt(integ.get('top_logprobs'), 'd')} logprobs"),
        (
            "max logprob gap",
            f"{_fmt(integ.get('max_logprob_gap'), '.3g')} nats (tolerance {_fmt(integ.get('logprob_tolerance'), 'g')})",
        ),
        ("hits read from", _fmt(integ.get("hit_source"))),
        ("mismatches", str(len(integ.get("mismatches") or []))),
        (
            "noise rule",
            f"allowance {_fmt(integ.get('noise_factor'), 'g')} x floor {_fmt(integ.get('noise_floor'), '.3g')} + "
            f"tolerance = {_fmt(integ.get('allowance'), '.3g')} nats; bound {_fmt(integ.get('noise_bound'), 'g')}; "
            f"{_fmt(integ.get('noise_rounds'), 'd')} confirmation round(s); "
            f"{len(integ.get('too_noisy') or [])} too noisy to judge",
        ),
    ]
    mism = [
        {**m, "max_gap": _fmt(m.get("max_gap"), ".3g"), "first_diff_position": _fmt(m.get("first_diff_position"))}
        for m in integ.get("mismatches") or []
    ]
    questions = [
        {
            "question": _fmt(q.get("question")),
            "verdict": _fmt(q.get("verdict"))
            + (
                f" (its first cached answer departed by {_fmt(q['first_ask_gap'], '.4g')} nats, "
                f"not again over {_fmt(q.get('cached_answers'), 'd')} asks)"
                if q.get("first_ask_gap") is not None
                else ""
            )
            + (
                f" (its cached answer departed by {_fmt(q['hit_path_gap'], '.4g')} nats on every ask, as a cache "
                "hit over fresh blocks did: the hit path's rounding)"
                if q.get("hit_path_gap") is not None
                else ""
            ),
            "noise": _fmt(q.get("noise"), ".4g"),
            "gap": _fmt(q.get("max_gap"), ".4g"),
        }
        for q in integ.get("questions_judged") or []
        if isinstance(q, dict)
    ]
    return {
        "verdict": v,
        "facts": facts,
        "hits": integ.get("hits") or [],
        "mismatches": mism,
        "questions": questions,
        "floor": _fmt(integ.get("noise_floor"), ".4g"),
        "allowance": _fmt(integ.get("allowance"), ".4g"),
    }


def _answers(report: dict[str, Any]) -> dict[str, Any] | None:
    figs = report.get("figures") or {}
    a = figs.get("answers")
    if not isinstance(a, dict):
        return None
    facts = [
        ("question set", f"{_fmt(a.get('questions'))} (sha256 {str(a.get('set_sha256'))[:12]})"),
        (
            "accuracy",
            f"{_fmt(a.get('right'), 'd')} of {_fmt(a.get('items'), 'd')} right: {_fmt(100 * a.get('accuracy', 0))}% "
            f"[{_fmt(100 * a.get('wilson_low', 0))}%, {_fmt(100 * a.get('wilson_high', 0))}%] (Wilson "
            f"{_fmt(100 * a.get('confidence', 0), '.0f')}%)",
        ),
        ("unanswered", _fmt(a.get("unanswered"), "d")),
        ("asked", f"greedy, concurrency {_fmt(a.get('concurrency'), 'd')}, {_fmt(a.get('set_s'))} s"),
        (
            "reference text",
            f"{_fmt(a.get('reference'))}: {len((a.get('logprobs') or {}).get('token_ids') or [])} tokens",
        ),
    ]
    compared = figs.get("answers_compared")
    return {"facts": facts, "compared": compared if isinstance(compared, dict) else None}


def _load(report: dict[str, Any]) -> list[list[str]]:
    rows = [r for r in (report.get("figures") or {}).get("load") or [] if isinstance(r, dict)]
    return [
        [
            _fmt(r.get("concurrency")),
            _fmt(r.get("requests")),
            _fmt(r.get("completed")),
            _fmt(r.get("out_tok_per_s")),
            _fmt(r.get("ttft_p50_ms")),
            _fmt(r.get("tpot_p50_ms"), ".2f"),
            f"{_fmt(r.get('latency_p50_ms'))} / {_fmt(r.get('latency_p90_ms'))}",
        ]
        for r in sorted(rows, key=lambda r: r.get("concurrency") or 0)
    ]


def _plots(report: dict[str, Any], out: Path) -> tuple[list[dict[str, str]], list[str]]:
    plots: list[dict[str, str]] = []
    notes: list[str] = []
    for name in report.get("plots") or []:
        path = out / str(name)
        if Path(str(name)).name != name or path.suffix != ".png":
            notes.append(f"plot {name!r} is not a PNG in the report directory; left out")
        elif not path.is_file():
            notes.append(f"plot {name} is listed in report.json but missing from {out}")
        else:
            plots.append({"name": str(name), "uri": html.png_data_uri(path)})
    if report.get("plots_missing"):
        notes.append(f"no plots: {report['plots_missing']}")
    return plots, notes


def page(out: Path) -> str:
    """The HTML of the report in directory ``out``."""
    src = out / "report.json"
    try:
        report = json.loads(src.read_text())
        if not isinstance(report, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        report = {"plots": []}
        v = html.unknown(f"{src}: cannot be read ({e})", "UNKNOWN")
    else:
        v = verdict(report)
    img = report.get("image") or {}
    c = report.get("counts") or {}
    counts = f"{c.get('passed', '–')} passed, {c.get('failed', '–')} failed, {c.get('skipped', '–')} skipped"
    checks = [
        {
            "id": t.get("id") or t.get("name") or "?",
            "outcome": _outcome(t),
            "seconds": _fmt(t.get("duration_s"), ".2f"),
            "message": t.get("not_applicable") or t.get("message") or "",
        }
        for t in report.get("checks") or []
        if isinstance(t, dict)
    ]
    run = [
        ("profile", _fmt(report.get("profile"))),
        ("server", _fmt(report.get("url"))),
        ("served model", _fmt(report.get("served_model"))),
        ("vLLM (/version)", _fmt(report.get("vllm_version"))),
        ("image", f"{img.get('ref') or '–'} (id {img.get('id') or '–'})"),
        (
            "registry digest",
            f"{img.get('digest') or '–'} ({img.get('source') or 'no image'}: {img.get('reason') or '–'})",
        ),
        ("checks", counts),
        ("API key", _fmt(report.get("api_key"))),
        ("server log", _fmt(report.get("log"))),
        ("started", _fmt(report.get("started"))),
        ("suite wall time", f"{_fmt(report.get('wall_s'))} s"),
    ]
    plots, notes = _plots(report, out)
    figs = report.get("figures") or {}
    allowed = figs.get("log_allowed") or []
    lines = [f"{report.get('profile') or '?'} at {report.get('url') or '?'}: {counts}"]
    if v.why:
        lines.append(v.why)
    return html.render(
        ENV,
        NAME,
        title=f"boot-verify {v.text}: {report.get('profile') or '?'}",
        verdict=Cell(f"Boot-verify {v.text}: {report.get('profile') or '?'}", v.state, v.why),
        verdict_lines=lines,
        run=run,
        not_verified=report.get("unexcused_skips") or [],
        checks=checks,
        integrity=_integrity(report),
        answers=_answers(report),
        load=_load(report),
        plots=plots,
        plot_notes=notes,
        log_families=", ".join(str(f) for f in figs.get("log_families") or []),
        log_allowed=", ".join(f"{a.get('entry')} (line {a.get('line')})" for a in allowed) or "nothing",
    )


def write(out: Path) -> Path:
    """Write ``out``/report.html from ``out``/report.json and its plots; returns its path."""
    return html.write_atomic(out / NAME, page(out))
