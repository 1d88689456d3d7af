"""``python -m unified.view RUN [--out FILE.html]``: one self-contained HTML page of an eval run.

    python -m unified.view runs/eval/warmup                       # -> runs/eval/warmup/view.html
    python -m unified.view runs/eval/sft runs/eval/warmup         # -> runs/eval/index.html + each run's view.html
    python -m unified.view --compare runs/eval/sft runs/eval/warmup   # -> runs/eval/warmup/compare.html

The page holds the run's summary tables (``summary.md``, rendered from ``summary.json`` by
:func:`unified.eval.report.render_markdown`; each benchmark's row links to its episodes) and, per episode,
its transcript: the messages (system prompts and reasoning folded), each step's prompt as the model saw it
(chat template and tool block, folded, with its prompt and completion token counts; from the second step
on only what is new), tool calls with their arguments, the observations, the score, pass/fail and stop
reason, and under ``predict_then_act`` each prediction beside the observation it was aligned with (claim,
observation, verdict, method; predicted and actual each a third of the width). A filter bar selects
episodes by benchmark, outcome (passed / failed / skipped / error), minimum score and text in the
transcript, and sorts them by score, tokens generated or time; its state is also read from the URL
fragment (``view.html#benchmark=bfcl_v4&outcome=failed&q=timeout&sort=tokens-desc``). Several runs give
an index page (model, weights digest, the settings that tell runs apart, per-benchmark scores, a link to
each run's page); ``--compare`` puts two runs' episodes side by side under the ``--compare`` table, a pair
whose outcome or score differs marked (``#differ=1`` shows only those).

Self-contained: inline CSS and a few lines of inline JavaScript, no network access. Model output
is untrusted: every string from the run is HTML-escaped, run data never enters the script as code (the
filter reads ``data-`` attributes and the page's text), and a Content-Security-Policy allows only the
page's own script (by hash), so an injected ``<script>`` would neither parse nor run.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from unified.config.cli import ArgumentParser, plain_text
from unified.eval.identity import recorded_weights
from unified.types import Episode, EpisodeResult, Message, Step

MAX_CHARS = 20_000
"""Longest text shown in full per field; the rest is cut with a note (the JSONL keeps it)."""

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 40px;color:#1d1d1f}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 7px;vertical-align:top}
th{background:#f3f3f3}pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font:12px/1.4 ui-monospace,monospace}
#filters{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #ddd;z-index:1}
#filters label{margin-right:14px}
.episode{border:1px solid #ccc;border-radius:6px;margin:10px 0;padding:0 10px}
.episode>summary{cursor:pointer;padding:8px 0;font-weight:600}
.badge{display:inline-block;border-radius:4px;padding:0 6px;margin-left:6px;font-weight:400;font-size:12px}
.passed{background:#d8f5dd}.failed{background:#fbdcdc}.skipped{background:#eee}.error{background:#ffe6b3}
.msg{border-left:4px solid #bbb;margin:8px 0;padding:2px 8px}
.msg.system{border-color:#999}.msg.user{border-color:#3b7dd8}.msg.assistant{border-color:#2a9d55}
.msg.tool{border-color:#c77d1a;background:#fffaf2}.role{font-weight:600;font-size:12px;color:#555}
.reasoning{color:#555;background:#f7f7f7}.call{background:#eef4ff;padding:2px 6px;margin:4px 0}
.pred{table-layout:fixed;width:100%}.pred td{font-size:12px}.pred pre,.msg>pre{max-height:24em;overflow:auto}
.pred col.k{width:7%}.pred col.c{width:9%}.pred col.p{width:36%}.pred col.a{width:36%}.pred col.v{width:6%}.pred col.m{width:6%}
.meta{color:#555;font-size:12px}.cut{color:#a00;font-size:12px}.prompt pre{max-height:30em;overflow:auto;background:#fafafa}
.side{display:grid;grid-template-columns:1fr 1fr;gap:10px}.side>div{min-width:0}
.pair{border:1px solid #ccc;border-radius:6px;margin:10px 0;padding:0 10px}.pair>summary{cursor:pointer;padding:8px 0}
#filters input[type=search]{width:16em}
"""

# Reads only data- attributes, form values and the page's own text; run data never enters this script as code.
_JS = """
(function(){
var list=document.getElementById('episodes');if(!list)return;
var eps=Array.prototype.slice.call(list.querySelectorAll(':scope>.episode,:scope>.pair'));
var original=eps.slice();
function el(id){return document.getElementById(id);}
var b=el('f-benchmark'),o=el('f-outcome'),s=el('f-min'),q=el('f-search'),so=el('f-sort'),d=el('f-differ');
function num(e,k){var v=parseFloat(e.dataset[k]);return isNaN(v)?-Infinity:v;}
function apply(){var n=0,min=parseFloat(s.value),text=(q.value||'').toLowerCase();
eps.forEach(function(e){var ok=(!b.value||e.dataset.benchmark===b.value)&&(!o.value||e.dataset.outcome===o.value)
&&(isNaN(min)||(e.dataset.score!==''&&parseFloat(e.dataset.score)>=min))
&&(!text||e.textContent.toLowerCase().indexOf(text)>=0)&&(!d||!d.checked||e.dataset.differ==='1');
e.hidden=!ok;if(ok)n++;});
var order=original.slice(),key=so.value;
if(key){var parts=key.split('-'),k=parts[0],dir=parts[1]==='asc'?1:-1;
order.sort(function(x,y){return dir*(num(x,k)-num(y,k));});}
order.forEach(function(e){list.appendChild(e);});
el('shown').textContent=String(n);
document.body.setAttribute('data-shown',String(n));
document.body.setAttribute('data-first',order.filter(function(e){return !e.hidden;}).map(function(e){return e.id;})[0]||'');}
function fromHash(){var h=new URLSearchParams(location.hash.slice(1));
b.value=h.get('benchmark')||'';o.value=h.get('outcome')||'';s.value=h.get('min')||'';q.value=h.get('q')||'';
so.value=h.get('sort')||'';if(d)d.checked=h.get('differ')==='1';apply();}
[b,o,s,q,so,d].forEach(function(x){if(x){x.addEventListener('input',apply);x.addEventListener('change',apply);}});
window.addEventListener('hashchange',fromHash);
fromHash();})();
"""


def _e(text: Any) -> str:
    """HTML-escaped text (quotes too), long text cut with a note."""
    text = "" if text is None else str(text)
    if len(text) > MAX_CHARS:
        cut = len(text) - MAX_CHARS
        return (html.escape(text[:MAX_CHARS], quote=True)
                + f'<span class="cut"> … {cut} more characters (see the run\'s JSONL)</span>')
    return html.escape(text, quote=True)


def _pre(text: Any, cls: str = "") -> str:
    return f'<pre class="{cls}">{_e(text)}</pre>' if cls else f"<pre>{_e(text)}</pre>"


def outcome(result: EpisodeResult | None, episode: Episode | None) -> str:
    """passed / failed / skipped / error: what the filter and the badge show.

    ``passed`` is the benchmark's pass where it defines one, else a score >= 0.5 (the threshold of
    ``unified.trace``'s success relation)."""
    if result is None:
        return "error" if episode is not None and episode.error else "failed"
    if result.skipped:
        return "skipped"
    if result.error or (result.details or {}).get("grader_error"):
        return "error"
    if result.passed is not None:
        return "passed" if result.passed else "failed"
    return "passed" if result.score >= 0.5 else "failed"


# --- the summary: summary.md's subset of markdown (headings, tables, lists, paragraphs) -------------

_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")


def _inline(text: str) -> str:
    """Escape, then only the two markups render_markdown uses: `code` and **bold**."""
    out, last = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[last:m.start()], quote=True))
        out.append(f"<code>{html.escape(m.group(1), quote=True)}</code>" if m.group(1) is not None
                   else f"<b>{html.escape(m.group(2), quote=True)}</b>")
        last = m.end()
    out.append(html.escape(text[last:], quote=True))
    return "".join(out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_html(text: str, links: dict[str, str] | None = None) -> str:
    """HTML of a summary.md (everything escaped; headings shifted down one level under the page's h1). A table
    cell whose whole text is a key of ``links`` becomes a link to its value (a benchmark to its episodes)."""
    links = links or {}

    def cell(text: str) -> str:
        return f'<a href="{_e(links[text])}">{_inline(text)}</a>' if text in links else _inline(text)

    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            body = [r for r in rows[1:] if not re.fullmatch(r"\|[\s:|-]*", r.strip())]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in _cells(rows[0])) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in _cells(r)) + "</tr>"
                                 for r in body) + "</table>")
            continue
        heading = re.match(r"(#{1,5}) (.*)", line)
        if heading:
            level = min(len(heading.group(1)) + 1, 6)
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<ul><li>{_inline(line[2:])}</li></ul>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
        i += 1
    return "\n".join(out)


# --- episodes ------------------------------------------------------------------------------------

def _tool_calls(calls: Iterable[Any]) -> str:
    parts = []
    for call in calls:
        args = json.dumps(call.arguments, ensure_ascii=False, indent=1) if call.arguments else ""
        err = f' <span class="cut">unparsed: {_e(call.parse_error)}</span>' if call.parse_error else ""
        raw = _pre(call.raw) if call.parse_error and call.raw else ""
        parts.append(f'<div class="call">call <code>{_e(call.name)}</code> <span class="meta">{_e(call.id)}</span>'
                     f"{err}{_pre(args) if args else ''}{raw}</div>")
    return "".join(parts)


def _predictions(step: Step) -> str:
    """Predicted vs actual observation of one step (``Step.extras["predictions"]``, predict_then_act)."""
    records = step.extras.get("predictions") if isinstance(step.extras, dict) else None
    if not isinstance(records, list) or not records:
        return ""
    observations = {o.call_id: o for o in step.observations}
    rows = []
    for rec in records:
        if not isinstance(rec, dict):
            continue
        index = rec.get("call_index")
        obs = observations.get(rec.get("call_id")) or (
            step.observations[index] if isinstance(index, int) and 0 <= index < len(step.observations) else None)
        verdict = {True: "correct", False: "wrong"}.get(rec.get("correct"), "unverifiable")
        if rec.get("method") == "unaligned":
            verdict = "unaligned"
        rows.append(f"<tr><td>{_e(rec.get('kind'))}</td><td>{_e(rec.get('call_name'))}</td>"
                    f"<td>{_pre(rec.get('claim') or rec.get('text'))}</td>"
                    f"<td>{_pre(obs.content if obs else '')}</td><td>{_e(verdict)}"
                    f"{' ' + _e(rec.get('score')) if rec.get('score') is not None else ''}</td>"
                    f"<td>{_e(rec.get('method'))}{'<br>' + _e(rec.get('reason')) if rec.get('reason') else ''}</td></tr>")
    if not rows:
        return ""
    return ('<table class="pred"><colgroup><col class="k"><col class="c"><col class="p"><col class="a"><col class="v">'
            '<col class="m"></colgroup><tr><th>kind</th><th>call</th><th>predicted</th><th>actual observation</th>'
            f"<th>verdict</th><th>method</th></tr>{''.join(rows)}</table>")


def _prompt(step: Step, previous: Step | None) -> str:
    """The prompt the model saw at this step, as rendered (chat template, tool block), with its token counts;
    from the second step on, the part already shown (the previous step's prompt and completion) is folded."""
    prompt = step.prompt or ""
    if not prompt:
        return ""
    shown, note = prompt, ""
    if previous is not None and previous.prompt and prompt.startswith(previous.prompt):
        known = len(previous.prompt)
        if prompt[known:].startswith(previous.completion or "\x00"):
            known += len(previous.completion)
        shown = prompt[known:]
        note = f"; its first {known} characters are step {previous.index}'s prompt and completion, not repeated"
    return (f'<details class="prompt"><summary>prompt the model saw at step {step.index}: {step.prompt_tokens} tokens '
            f"in, {step.completion_tokens} out{note}</summary>{_pre(shown)}</details>")


def _message(msg: Message, step: Step | None, previous: Step | None = None) -> str:
    role = msg.role if msg.role in ("system", "user", "assistant", "tool") else "user"
    head = f'<div class="role">{_e(msg.role)}{" · " + _e(msg.name) if msg.name else ""}'
    head += f' <span class="meta">{_e(msg.tool_call_id)}</span>' if msg.tool_call_id else ""
    if step is not None:
        head += (f' <span class="meta">step {step.index}: {step.completion_tokens} tokens, '
                 f'{step.generation_seconds:.1f} s</span>')
    head += "</div>"
    body = _prompt(step, previous) if step is not None else ""
    if msg.reasoning:
        body += f'<details><summary>reasoning ({len(msg.reasoning)} chars)</summary>{_pre(msg.reasoning, "reasoning")}</details>'
    if role == "system":
        body += f"<details><summary>system prompt ({len(msg.content)} chars)</summary>{_pre(msg.content)}</details>"
    elif msg.content:
        body += _pre(msg.content)
    body += _tool_calls(msg.tool_calls)
    if step is not None:
        body += _predictions(step)
    return f'<div class="msg {role}">{head}{body}</div>'


def _transcript(episode: Episode) -> str:
    """The messages; the k-th assistant message is step k's (its predictions shown with it)."""
    steps = {s.index: s for s in episode.steps}
    parts, k = [], 0
    for msg in episode.messages:
        step = None
        if msg.role == "assistant":
            step = steps.get(k)
            k += 1
        parts.append(_message(msg, step, steps.get(step.index - 1) if step is not None else None))
    if not episode.messages:  # an episode that crashed before its first message: show the steps
        for s in episode.steps:
            parts.append(_message(Message(role="assistant", content=s.content, reasoning=s.reasoning,
                                          tool_calls=s.tool_calls), s, steps.get(s.index - 1)))
            parts += [_message(Message(role="tool", content=o.content, tool_call_id=o.call_id), None)
                      for o in s.observations]
    return "".join(parts)


def episode_tokens(episode: Episode | None) -> int:
    """Tokens the policy generated over the episode (its steps' completion tokens)."""
    return sum(s.completion_tokens for s in episode.steps) if episode is not None else 0


def _episode(index: int, result: EpisodeResult | None, episode: Episode | None, *, prefix: str = "ep") -> str:
    ref = result or episode
    assert ref is not None
    kind = outcome(result, episode)
    score = "" if result is None or result.skipped else f"{result.score:g}"
    title = (f"{_e(ref.benchmark)} · {_e(ref.task_id)}" + (f" · trial {ref.trial}" if ref.trial else "")
             + f'<span class="badge {kind}">{kind}{" " + score if score else ""}</span>')
    facts = []
    if episode is not None:
        facts.append(f"stop: {_e(episode.stop_reason or '?')}")
        facts.append(f"{len(episode.steps)} steps, {episode_tokens(episode)} tokens generated, "
                     f"{episode.wall_seconds:.1f} s")
        if episode.metadata.get("prompting"):
            facts.append(f"prompting: {_e(episode.metadata['prompting'])}")
        title += f' <span class="meta">{_e(episode.stop_reason)}</span>'
    body = [f'<p class="meta">{" · ".join(facts)}</p>'] if facts else []
    if result is not None:
        if result.skipped:
            body.append(f"<p><b>skipped:</b> {_e(result.skipped)}</p>")
        if result.error:
            body.append(f"<details><summary>error</summary>{_pre(result.error)}</details>")
        if result.details:
            body.append("<details><summary>score details</summary>"
                        f"{_pre(json.dumps(result.details, ensure_ascii=False, indent=1, default=str))}</details>")
    if episode is not None:
        if episode.error:
            body.append(f"<details><summary>episode error</summary>{_pre(episode.error)}</details>")
        if episode.tools:
            specs = json.dumps([t.to_openai()["function"] for t in episode.tools], ensure_ascii=False, indent=1)
            body.append(f"<details><summary>tools offered ({len(episode.tools)}): "
                        f"{_e(', '.join(t.name for t in episode.tools)[:300])}</summary>{_pre(specs)}</details>")
        body.append(_transcript(episode))
    seconds = f"{episode.wall_seconds:g}" if episode is not None else ""
    return (f'<details class="episode" id="{prefix}{index}" data-benchmark="{_e(ref.benchmark)}" data-outcome="{kind}" '
            f'data-score="{_e(score)}" data-tokens="{episode_tokens(episode)}" data-seconds="{seconds}">'
            f'<summary>{title}</summary>{"".join(body)}</details>')


def _page(title: str, body: str, count: int) -> str:
    """The HTML shell: CSP allowing only the page's own script (by hash), inline CSS, ``body``."""
    script_hash = base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body data-episodes="{count}">
<h1>{_e(title)}</h1>
{body}
<script>{_JS}</script>
</body></html>
"""


def _filters(benchmarks: list[str], count: int, *, noun: str = "episodes", differ: bool = False) -> str:
    """The filter bar: benchmark, outcome, minimum score, text search, sort (and "only where A and B differ")."""
    options = "".join(f'<option value="{_e(b)}">{_e(b)}</option>' for b in benchmarks)
    outcomes = "".join(f'<option value="{o}">{o}</option>' for o in ("passed", "failed", "skipped", "error"))
    sorts = "".join(f'<option value="{v}">{label}</option>' for v, label in (
        ("", "as run"), ("score-desc", "score, high first"), ("score-asc", "score, low first"),
        ("tokens-desc", "tokens generated, most first"), ("seconds-desc", "time, longest first")))
    extra = '<label><input id="f-differ" type="checkbox"> only where A and B differ</label>' if differ else ""
    return (f'<div id="filters"><label>benchmark <select id="f-benchmark"><option value="">all</option>{options}'
            f'</select></label><label>outcome <select id="f-outcome"><option value="">all</option>{outcomes}</select>'
            '</label><label>score ≥ <input id="f-min" type="number" step="0.1" min="0" style="width:5em"></label>'
            '<label>search <input id="f-search" type="search" placeholder="text in the transcript"></label>'
            f'<label>sort <select id="f-sort">{sorts}</select></label>{extra}'
            f'<span id="count"><span id="shown">{count}</span> of {count} {noun} shown</span></div>')


def _linked_summary(run_dir: str | Path) -> str:
    """summary.md as HTML, each benchmark's row linking to its episodes (``#benchmark=DIR``)."""
    from unified.eval.fingerprint import planned_directories
    from unified.eval.records import load_summary
    from unified.eval.report import render_markdown

    try:
        summary = load_summary(run_dir)
    except FileNotFoundError:
        return "<p>no summary.json in this run directory yet.</p>"
    directory = planned_directories(run_dir)
    links = {name: f"#benchmark={directory.get(name, name)}" for name in summary.benchmarks}
    return markdown_html(render_markdown(summary), links)


def _run_items(run_dir: str | Path) -> tuple[list[tuple[Any, EpisodeResult | None, Episode | None]], Any]:
    """Every (key, result, episode) of a run, results first in their order, then episodes without a result."""
    from unified.trace.load import load_run

    run = load_run(run_dir)
    episodes = {(e.benchmark, e.task_id, e.trial): e for e in run.episodes}
    results = {(r.benchmark, r.task_id, r.trial): r for r in run.results}
    keys = list(results) + [k for k in episodes if k not in results]
    return [(k, results.get(k), episodes.get(k)) for k in keys], run


def render(run_dir: str | Path) -> tuple[str, int]:
    """The page of a run directory and its number of episodes (results without an episode included)."""
    items, run = _run_items(run_dir)
    episodes = [_episode(i, result, episode) for i, (_, result, episode) in enumerate(items)]
    cfg = run.config
    title = f"unified run {Path(run_dir).resolve().name}"
    body = (f'<p class="meta">{_e(Path(run_dir).resolve())} · model {_e(cfg.get("model", "?"))} · prompting '
            f'{_e(cfg.get("prompting", "?"))}</p>\n<h2>Summary</h2>\n{_linked_summary(run_dir)}\n<h2>Episodes</h2>\n'
            f'{_filters(sorted({k[0] for k, _, _ in items}), len(episodes))}\n'
            f'<div id="episodes">{"".join(episodes)}</div>')
    return _page(title, body, len(episodes)), len(episodes)


def render_index(run_dirs: list[str | Path], out: Path) -> str:
    """One page listing several runs: model, weights digest, the settings that tell runs apart (tokens a call,
    thinking, turns, tasks, trials), each benchmark's score, and a link to the run's own page."""
    import os

    from unified.eval.fingerprint import run_fingerprint
    from unified.eval.records import load_summary

    summaries = {}
    for run in run_dirs:
        try:
            summaries[str(run)] = load_summary(run)
        except (FileNotFoundError, ValueError):
            summaries[str(run)] = None
    names = sorted({n for s in summaries.values() if s for n in s.benchmarks})
    head = ("<tr><th>run</th><th>model</th><th>weights</th><th>prompting</th><th>tokens a call</th><th>thinking</th>"
            "<th title=\"the run's --max-turns: a benchmark's protocol may override it (plan.json, the plan line)\">turns asked</th><th>limit</th><th>trials</th>" + "".join(f"<th>{_e(n)}</th>" for n in names) + "</tr>")
    rows = []
    for i, run in enumerate(run_dirs):
        summary, fp = summaries[str(run)], run_fingerprint(run)
        link = os.path.relpath(Path(run) / "view.html", out.parent)
        cells = [f'<a href="{_e(link)}">{_e(Path(run).name)}</a><br><span class="meta">{_e(run)}</span>',
                 _e(summary.model if summary else "?"), _e((recorded_weights(run) or "not recorded")[:12]),
                 _e(fp.get("prompting", "?")), _e(fp.get("sampling.max_new_tokens", "?")),
                 _e(fp.get("sampling.thinking", "?")), _e(fp.get("limits.max_turns", "?")), _e(fp.get("limit")),
                 _e(fp.get("runs") or "protocol")]
        for name in names:
            entry = summary.benchmarks.get(name) if summary else None
            score = entry.score() if entry else None
            cells.append("—" if entry is None else (f"{score:.2f} ({entry.status})" if score is not None
                                                    else _e(entry.status)))
        rows.append(f'<tr class="run" id="run{i}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body = (f'<p class="meta">{len(run_dirs)} runs; each name opens the run\'s own page (written next to it); '
            "scores as in each run's summary.md</p>"
            f'<table id="runs">{head}{"".join(rows)}</table>')
    return _page("unified runs", body, len(run_dirs))


def render_compare(run_a: str | Path, run_b: str | Path) -> tuple[str, int]:
    """Two runs' episodes side by side, pair by pair ((benchmark, task, trial) of either run), under the
    ``--compare`` table (what differs besides the weights, NOT COMPARABLE); a pair whose outcome or score
    differs is marked and can be filtered on. Sorting by score sorts by B - A."""
    from unified.eval.report import compare

    items_a, _ = _run_items(run_a)
    items_b, _ = _run_items(run_b)
    sides = [{k: (r, e) for k, r, e in items_a}, {k: (r, e) for k, r, e in items_b}]
    keys = list(dict.fromkeys([k for k, _, _ in items_a] + [k for k, _, _ in items_b]))
    pairs = []
    for i, key in enumerate(keys):
        (ra, ea), (rb, eb) = sides[0].get(key, (None, None)), sides[1].get(key, (None, None))
        oa, ob = (outcome(ra, ea) if (ra or ea) else "absent"), (outcome(rb, eb) if (rb or eb) else "absent")
        sa = None if ra is None or ra.skipped else ra.score
        sb = None if rb is None or rb.skipped else rb.score
        delta = "" if sa is None or sb is None else f"{sb - sa:g}"
        differ = oa != ob or sa != sb
        cells = []
        for label, run, (r, e), prefix in (("A", run_a, (ra, ea), f"a{i}-"), ("B", run_b, (rb, eb), f"b{i}-")):
            inner = _episode(0, r, e, prefix=prefix) if (r or e) else "<p>not in this run</p>"
            cells.append(f"<div><h4>{label}: {_e(Path(run).name)}</h4>{inner}</div>")
        title = (f"{_e(key[0])} · {_e(key[1])}" + (f" · trial {key[2]}" if key[2] else "")
                 + f' <span class="badge {oa}">A {oa}{" " + format(sa, "g") if sa is not None else ""}</span>'
                 + f' <span class="badge {ob}">B {ob}{" " + format(sb, "g") if sb is not None else ""}</span>'
                 + (' <b class="cut">differs</b>' if differ else ""))
        tokens = episode_tokens(eb) - episode_tokens(ea)
        seconds = (eb.wall_seconds if eb else 0.0) - (ea.wall_seconds if ea else 0.0)
        pairs.append(f'<details class="pair" id="pair{i}" data-benchmark="{_e(key[0])}" data-outcome="{ob}" '
                     f'data-score="{_e(delta)}" data-tokens="{tokens}" data-seconds="{seconds:g}" '
                     f'data-differ="{int(differ)}"><summary>{title}</summary><div class="side">{"".join(cells)}</div>'
                     "</details>")
    body = (f'<p class="meta">A = {_e(Path(run_a).resolve())}<br>B = {_e(Path(run_b).resolve())}</p>\n'
            f"<h2>Summary (python -m unified.eval --compare)</h2>\n{markdown_html(compare(run_a, run_b))}\n"
            f"<h2>Episodes side by side</h2>\n"
            f'{_filters(sorted({k[0] for k in keys}), len(pairs), noun="pairs", differ=True)}\n'
            f'<div id="episodes">{"".join(pairs)}</div>')
    return _page(f"unified compare {Path(run_a).name} vs {Path(run_b).name}", body, len(pairs)), len(pairs)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m unified.view", description=plain_text(__doc__.splitlines()[0]),
                            formatter_class=argparse.RawDescriptionHelpFormatter,  # one-line errors, "did you mean"
                            epilog=plain_text("\n".join(__doc__.splitlines()[2:5])))
    parser.add_argument("run", nargs="*", help="an eval run directory (python -m unified.eval --out DIR); several: "
                        "an index page over them, and each run's own page")
    parser.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="two runs' episodes side by side")
    parser.add_argument("--out", help="the HTML file to write (default: RUN/view.html, RUN_B/compare.html, "
                        "index.html in the runs' common parent)")
    args = parser.parse_args(argv)
    if bool(args.run) == bool(args.compare):
        print("unified.view: error: give one or more run directories, or --compare RUN_A RUN_B", file=sys.stderr)
        return 2
    from unified.store import write_text_atomic

    try:
        if args.compare:
            page, count = render_compare(*args.compare)
            out = Path(args.out) if args.out else Path(args.compare[1]) / "compare.html"
            noun = "pairs"
        elif len(args.run) == 1:
            page, count = render(args.run[0])
            out = Path(args.out) if args.out else Path(args.run[0]) / "view.html"
            noun = "episodes"
        else:
            import os

            for run in args.run:  # each run's own page, which the index links to
                write_text_atomic(Path(run) / "view.html", render(run)[0])
            out = Path(args.out) if args.out else Path(os.path.commonpath([str(Path(r).resolve()) for r in args.run])) \
                / "index.html"
            page, count, noun = render_index(args.run, out), len(args.run), "runs (and each run's view.html)"
    except (FileNotFoundError, ValueError) as exc:
        print(f"unified.view: error: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(out, page)
    print(f"wrote {out} ({count} {noun}, {len(page.encode()) / 1024:.0f} KiB); open it in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
