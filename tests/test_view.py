"""``python -m unified.view``: the HTML page of a run, escaped, and rendered by a real headless browser.

The run directory is a fixture written through the run-directory store (``BenchmarkStore``,
``write_summary``) in the eval's own record format: two benchmarks, a predict-then-act step with a
prediction aligned to its observation, a skipped task, and model output that tries to inject
markup and script. The browser tests use Debian's ``chromium`` (``apt-get install chromium``) and
skip when it is not installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from unified import view
from unified.benchmarks.contract import Task
from unified.eval.report import benchmark_entry, build_summary, write_summary
from unified.eval.rundir import BenchmarkStore
from unified.types import Episode, EpisodeResult, Message, Observation, Step, ToolCall, ToolSpec

INJECTION = ("<script>document.title='pwned'</script>"
             "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
             "</pre></details><b id=\"escaped-out\">x</b>")


RENDERED = "<|im_start|>system\nYou are an agent.\n# Tools\n<tools>ls</tools><|im_end|>\n<|im_start|>user\nList /tmp."


def _episode(bench: str, task: str, *, reasoning: str, content: str, observation: str,
             predictions: list[dict] | None = None, tokens: int = 7) -> Episode:
    call = ToolCall(name="ls", arguments={"path": "/tmp"}, id="c0")
    step = Step(index=0, prompt=RENDERED + f"<|im_end|>\n<|im_start|>assistant\n[{task}]", completion="c",
                reasoning=reasoning, content=content, tool_calls=[call], prompt_tokens=41,
                observations=[Observation(call_id="c0", content=observation)], completion_tokens=tokens,
                extras={"predictions": predictions} if predictions else {})
    second = Step(index=1, prompt=step.prompt + "c" + "<|im_start|>tool\nSECOND-TURN-NEW", completion="done",
                  content="done", prompt_tokens=60, completion_tokens=2)
    messages = [Message(role="system", content="You are an agent."),
                Message(role="user", content="List /tmp."),
                Message(role="assistant", content=content, reasoning=reasoning, tool_calls=[call]),
                Message(role="tool", content=observation, tool_call_id="c0", name="ls")]
    tools = [ToolSpec(name="ls", description="List a directory " + INJECTION)]
    messages.append(Message(role="assistant", content="done"))
    return Episode(benchmark=bench, task_id=task, model="fixture", messages=messages, steps=[step, second],
                   tools=tools, stop_reason="answer", metadata={"prompting": "predict_then_act"},
                   wall_seconds=3.0 if task == "t2" else 1.0)


@pytest.fixture()
def fixture_run(tmp_path: Path) -> Path:
    return _write_run(tmp_path / "run")


def _write_run(run: Path, *, t2_score: float = 0.0) -> Path:
    """A run directory in the eval's format, written by the store: 3 episodes and 1 skipped task."""
    prediction = {"kind": "explicit", "source": "completion", "text": "a.txt", "claim": "PREDICTED a.txt b.txt",
                  "call_name": "ls", "call_index": 0, "call_id": "c0", "correct": True, "score": 1.0,
                  "method": "rule"}
    alpha = BenchmarkStore(run, "alpha")
    e1 = _episode("alpha", "t1", reasoning="REASONING-T1 " + INJECTION, content="answer " + INJECTION,
                  observation="ACTUAL a.txt b.txt " + INJECTION, predictions=[prediction])
    alpha.append(EpisodeResult(benchmark="alpha", task_id="t1", trial=0, score=1.0, passed=True), e1)
    e2 = _episode("alpha", "t2", reasoning="r", content="wrong", observation="nothing")
    alpha.append(EpisodeResult(benchmark="alpha", task_id="t2", trial=0, score=t2_score, passed=t2_score >= 0.5), e2)
    beta = BenchmarkStore(run, "beta")
    e3 = _episode("beta", "t3", reasoning="r", content="half", observation="o", tokens=50)
    beta.append(EpisodeResult(benchmark="beta", task_id="t3", trial=0, score=0.5), e3)
    beta.append(EpisodeResult(benchmark="beta", task_id="t4", trial=0, score=0.0, skipped="no key: FIXTURE_KEY"),
                None)
    entries = {}
    for name, store in (("alpha", alpha), ("beta", beta)):
        results = list(store.load().values())
        tasks = [Task(id=r.task_id, benchmark=name) for r in results]
        entries[name] = benchmark_entry(tasks=tasks, results=results, runs=1, runs_protocol=1,
                                        aggregate={"score": sum(r.score for r in results), "metric": "fixture",
                                                   "comparable": False})
    write_summary(run, build_summary(model="fixture <b>model</b>", prompting="predict_then_act", benchmarks=entries))
    return run


def test_page_has_every_episode_and_escapes_model_output(fixture_run: Path, tmp_path: Path, capsys):
    out = tmp_path / "page.html"
    assert view.main([str(fixture_run), "--out", str(out)]) == 0
    assert "4 episodes" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert page.count('class="episode"') == 4
    # the prompt each step saw, with its token counts; the second step's repeats only what is new
    assert "prompt the model saw at step 0: 41 tokens in, 7 out</summary><pre>&lt;|im_start|&gt;system" in page
    assert re.search(r"prompt the model saw at step 1: 60 tokens in, 2 out; its first \d+ characters are step 0's "
                     r"prompt and completion, not repeated</summary><pre>&lt;\|im_start\|&gt;tool\nSECOND-TURN-NEW", page)
    assert '<col class="p">' in page  # the predicted column is a third of the table, not one token wide
    assert '<a href="#benchmark=alpha">alpha</a>' in page  # a summary row links to its episodes
    assert 'data-tokens="52"' in page and 'id="f-search"' in page and 'value="tokens-desc"' in page
    assert len(re.findall(r"<script", page, flags=re.I)) == 1  # only the page's own script
    assert "<img" not in page and 'id="escaped-out"' not in page
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    assert "fixture &lt;b&gt;model&lt;/b&gt;" in page  # the summary's model name, escaped too
    # reasoning folded, predicted beside actual, skip reason, stop reason
    assert re.search(r"<details><summary>reasoning \(\d+ chars\)</summary><pre class=\"reasoning\">REASONING-T1", page)
    assert re.search(r"PREDICTED a\.txt b\.txt</pre></td><td><pre>ACTUAL a\.txt b\.txt", page)
    assert "no key: FIXTURE_KEY" in page and "stop: answer" in page and "tools offered (1): ls" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from the network
    assert 'data-outcome="passed"' in page and 'data-outcome="skipped"' in page


def test_default_output_and_one_line_error(fixture_run: Path, tmp_path: Path, capsys):
    assert view.main([str(fixture_run)]) == 0
    assert (fixture_run / "view.html").is_file()
    assert view.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("unified.view: error:") and "missing" in err and "\n" not in err


def test_long_text_is_cut_with_a_note():
    assert "more characters" in view._e("x" * (view.MAX_CHARS + 5))


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return exe


def _browse(exe: str, tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120)


def _shown(dom: str) -> tuple[int, int]:
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert "data-pwned" not in attrs  # the injected onerror handler did not run
    return int(attrs["data-episodes"]), int(attrs["data-shown"])  # data-shown is set by the page's script


@pytest.mark.slow
def test_browser_renders_and_filters_without_running_injected_script(fixture_run: Path, tmp_path: Path):
    exe = _chromium()
    page = tmp_path / "page.html"
    assert view.main([str(fixture_run), "--out", str(page)]) == 0
    url = page.as_uri()
    dom = _browse(exe, tmp_path, url, "--dump-dom").stdout
    assert _shown(dom) == (4, 4)
    assert "<title>unified run run</title>" in dom  # not 'pwned'
    assert dom.count('class="episode"') == 4
    assert _shown(_browse(exe, tmp_path, url + "#benchmark=alpha", "--dump-dom").stdout) == (4, 2)
    assert _shown(_browse(exe, tmp_path, url + "#benchmark=beta&outcome=skipped", "--dump-dom").stdout) == (4, 1)
    assert _shown(_browse(exe, tmp_path, url + "#min=0.5", "--dump-dom").stdout) == (4, 2)
    shot = tmp_path / "shot.png"
    _browse(exe, tmp_path, url, f"--screenshot={shot}", "--window-size=1200,1400")
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    # search over the transcripts' text, sort by tokens / score (the page reorders the episodes)
    assert _shown(_browse(exe, tmp_path, url + "#q=reasoning-t1", "--dump-dom").stdout) == (4, 1)
    dom = _browse(exe, tmp_path, url + "#sort=tokens-desc", "--dump-dom").stdout
    assert 'data-first="ep2"' in dom and dom.index('id="ep2"') < dom.index('id="ep0"')
    assert 'data-first="ep1"' in _browse(exe, tmp_path, url + "#benchmark=alpha&sort=score-asc", "--dump-dom").stdout

    # a run index over two runs, each name linking to the run's own page
    other = _write_run(tmp_path / "other", t2_score=1.0)
    index = tmp_path / "index.html"
    assert view.main([str(fixture_run), str(other), "--out", str(index)]) == 0
    dom = _browse(exe, tmp_path, index.as_uri(), "--dump-dom").stdout
    assert dom.count('class="run"') == 2 and 'href="run/view.html"' in dom and 'href="other/view.html"' in dom
    assert (other / "view.html").is_file() and "data-pwned" not in dom

    # two runs side by side: every (benchmark, task, trial) pair, the ones that differ selectable
    compare = tmp_path / "compare.html"
    assert view.main(["--compare", str(fixture_run), str(other), "--out", str(compare)]) == 0
    dom = _browse(exe, tmp_path, compare.as_uri(), "--dump-dom").stdout
    assert _shown(dom) == (4, 4) and dom.count('class="side"') == 4
    assert _shown(_browse(exe, tmp_path, compare.as_uri() + "#differ=1", "--dump-dom").stdout) == (4, 1)
