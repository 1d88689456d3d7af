"""``python -m unified.view RUN [--out FILE.html]``: one self-contained HTML page of an eval run.

The page holds the run's summary tables (``summary.md``, rendered from ``summary.json`` by
:func:`unified.eval.report.render_markdown`) and, per episode, its transcript: the messages
(system prompts and reasoning folded), tool calls with their arguments, the observations, the
score, pass/fail and stop reason, and under ``predict_then_act`` each prediction beside the
observation it was aligned with (claim, observation, verdict, method). A filter bar selects
episodes by benchmark, outcome (passed / failed / skipped / error) and minimum score; the state of
the filter is also read from the URL fragment (``view.html#benchmark=bfcl_v4&outcome=failed``).

Self-contained: inline CSS and a few lines of inline JavaScript, no network access. Model output
is untrusted: every string from the run is HTML-escaped, run data never enters the script (the
filter reads ``data-`` attributes), and a Content-Security-Policy allows only the page's own
script (by hash), so an injected ``<script>`` would neither parse nor run.
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
.pred td{font-size:12px}.pred pre,.msg>pre{max-height:24em;overflow:auto}.meta{color:#555;font-size:12px}.cut{color:#a00;font-size:12px}
"""

# Reads only data- attributes and form values; run data never enters this script.
_JS = """
(function(){
var eps=Array.prototype.slice.call(document.querySelectorAll('.episode'));
var b=document.getElementById('f-benchmark'),o=document.getElementById('f-outcome'),s=document.getElementById('f-min');
function apply(){var n=0,min=parseFloat(s.value);
eps.forEach(function(e){var ok=(!b.value||e.dataset.benchmark===b.value)&&(!o.value||e.dataset.outcome===o.value)
&&(isNaN(min)||(e.dataset.score!==''&&parseFloat(e.dataset.score)>=min));e.hidden=!ok;if(ok)n++;});
document.getElementById('shown').textContent=String(n);
document.body.setAttribute('data-shown',String(n));}
var h=new URLSearchParams(location.hash.slice(1));
if(h.has('benchmark'))b.value=h.get('benchmark');if(h.has('outcome'))o.value=h.get('outcome');
if(h.has('min'))s.value=h.get('min');
[b,o,s].forEach(function(x){x.addEventListener('input',apply);x.addEventListener('change',apply);});
apply();})();
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


def markdown_html(text: str) -> str:
    """HTML of a summary.md (everything escaped; headings shifted down one level under the page's h1)."""
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
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _cells(r)) + "</tr>"
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
    return ('<table class="pred"><tr><th>kind</th><th>call</th><th>predicted</th><th>actual observation</th>'
            f"<th>verdict</th><th>method</th></tr>{''.join(rows)}</table>")


def _message(msg: Message, step: Step | None) -> str:
    role = msg.role if msg.role in ("system", "user", "assistant", "tool") else "user"
    head = f'<div class="role">{_e(msg.role)}{" · " + _e(msg.name) if msg.name else ""}'
    head += f' <span class="meta">{_e(msg.tool_call_id)}</span>' if msg.tool_call_id else ""
    if step is not None:
        head += (f' <span class="meta">step {step.index}: {step.completion_tokens} tokens, '
                 f'{step.generation_seconds:.1f} s</span>')
    head += "</div>"
    body = ""
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
        parts.append(_message(msg, step))
    if not episode.messages:  # an episode that crashed before its first message: show the steps
        for s in episode.steps:
            parts.append(_message(Message(role="assistant", content=s.content, reasoning=s.reasoning,
                                          tool_calls=s.tool_calls), s))
            parts += [_message(Message(role="tool", content=o.content, tool_call_id=o.call_id), None)
                      for o in s.observations]
    return "".join(parts)


def _episode(index: int, result: EpisodeResult | None, episode: Episode | None) -> str:
    ref = result or episode
    assert ref is not None
    kind = outcome(result, episode)
    score = "" if result is None or result.skipped else f"{result.score:g}"
    title = (f"{_e(ref.benchmark)} · {_e(ref.task_id)}" + (f" · trial {ref.trial}" if ref.trial else "")
             + f'<span class="badge {kind}">{kind}{" " + score if score else ""}</span>')
    facts = []
    if episode is not None:
        facts.append(f"stop: {_e(episode.stop_reason or '?')}")
        facts.append(f"{len(episode.steps)} steps, {episode.wall_seconds:.1f} s")
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
    return (f'<details class="episode" id="ep{index}" data-benchmark="{_e(ref.benchmark)}" data-outcome="{kind}" '
            f'data-score="{_e(score)}"><summary>{title}</summary>{"".join(body)}</details>')


def render(run_dir: str | Path) -> tuple[str, int]:
    """The page of a run directory and its number of episodes (results without an episode included)."""
    from unified.eval.records import load_summary
    from unified.eval.report import render_markdown
    from unified.trace.load import load_run

    run = load_run(run_dir)
    try:
        summary_html = markdown_html(render_markdown(load_summary(run_dir)))
    except FileNotFoundError:
        summary_html = "<p>no summary.json in this run directory yet.</p>"
    episodes = {(e.benchmark, e.task_id, e.trial): e for e in run.episodes}
    results = {(r.benchmark, r.task_id, r.trial): r for r in run.results}
    keys = list(results) + [k for k in episodes if k not in results]
    items = [_episode(i, results.get(k), episodes.get(k)) for i, k in enumerate(keys)]
    benchmarks = sorted({k[0] for k in keys})
    options = "".join(f'<option value="{_e(b)}">{_e(b)}</option>' for b in benchmarks)
    outcomes = "".join(f'<option value="{o}">{o}</option>' for o in ("passed", "failed", "skipped", "error"))
    cfg = run.config
    title = f"unified run {Path(run_dir).resolve().name}"
    script_hash = base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body data-episodes="{len(items)}">
<h1>{_e(title)}</h1>
<p class="meta">{_e(Path(run_dir).resolve())} · model {_e(cfg.get('model', '?'))} · prompting {_e(cfg.get('prompting', '?'))}</p>
<h2>Summary</h2>
{summary_html}
<h2>Episodes</h2>
<div id="filters"><label>benchmark <select id="f-benchmark"><option value="">all</option>{options}</select></label>
<label>outcome <select id="f-outcome"><option value="">all</option>{outcomes}</select></label>
<label>score ≥ <input id="f-min" type="number" step="0.1" min="0" style="width:5em"></label>
<span id="count"><span id="shown">{len(items)}</span> of {len(items)} episodes shown</span></div>
{"".join(items)}
<script>{_JS}</script>
</body></html>
"""
    return page, len(items)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m unified.view", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="an eval run directory (python -m unified.eval --out DIR)")
    parser.add_argument("--out", help="the HTML file to write (default: RUN/view.html)")
    args = parser.parse_args(argv)
    try:
        page, count = render(args.run)
    except (FileNotFoundError, ValueError) as exc:
        print(f"unified.view: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.run) / "view.html"
    from unified.store import write_text_atomic

    write_text_atomic(out, page)
    print(f"wrote {out} ({count} episodes, {len(page.encode()) / 1024:.0f} KiB); open it in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
