"""``--suite general``: lm-evaluation-harness tasks on the same weights, end to end.

Tasks are small fixtures of our own in lm-eval's task format (tests/fixtures/lm_eval_tasks_fixture,
local JSONL data); lm-eval's own classes, prompts and metrics run them: ``HFLM`` over the checkpoint
we load (in-process) and ``local-completions`` / ``local-chat-completions`` against our local
OpenAI-compatible server on loopback (HTTP).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed (make setup BENCH=0)")

from unified.inference.server import LocalOpenAIServer  # noqa: E402
from unified.eval import cli  # noqa: E402
from unified.eval.general import DEFAULT_TASKS, GeneralConfig, GeneralStore, run_general, split_suites  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURE_TASKS = "tests/fixtures/lm_eval_tasks_fixture"  # data_files are relative to the repository root
MC, MC_GROUP, GEN, ABSENT = "unified_fixture_mc", "unified_fixture_mc_group", "unified_fixture_gen", "unified_fixture_absent"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(REPO)


def _cli(*args: str) -> None:
    assert cli.main(list(args)) == 0


def _general_args(out: Path, model: str, tasks: list[str], *extra: str) -> list[str]:
    return ["--suite", "general", "--model", model, "--out", str(out),
            "--set", f"general.include_path={FIXTURE_TASKS}", "--set", f"general.tasks={','.join(tasks)}", *extra]


def _samples(run_dir: Path, task: str) -> dict[int, dict]:
    """lm-eval's own per-sample records of ``task`` (its samples_<task>_*.jsonl beside the results)."""
    pattern = re.compile(rf"samples_{re.escape(task)}_\d{{4}}-.*\.jsonl")  # not samples_{task}_alt_...
    files = sorted(p for p in (run_dir / "general" / "lm_eval").rglob("samples_*.jsonl") if pattern.fullmatch(p.name))
    assert files, f"no lm-eval samples file for {task} under {run_dir}"
    return {row["doc_id"]: row for row in map(json.loads, files[-1].read_text().splitlines())}


def _metric(entry: dict, name: str) -> dict:
    return next(m for m in entry["metrics"] if m["name"] == name)


@pytest.fixture(scope="module")
def tiny_runs(tiny_checkpoint, tmp_path_factory):
    """Two in-process runs of the tiny checkpoint: A with the tasks' defaults, B with 1-shot prompts."""
    root = tmp_path_factory.mktemp("general")
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        a, b = root / "a", root / "b"
        _cli(*_general_args(a, str(tiny_checkpoint), [MC_GROUP, GEN, ABSENT]))
        _cli(*_general_args(b, str(tiny_checkpoint), [MC_GROUP, GEN], "--set", "general.num_fewshot=1"))
    finally:
        os.chdir(cwd)
    return a, b


# ------------------------------------------------------------------------------------------ options


def test_suite_names_and_options(capsys):
    assert split_suites("general,ood") == (["ood"], True)
    assert split_suites("all") == (["all"], False)
    cli.main(["--suite", "all", "--dry-run"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("# would evaluate:"))
    assert "bfcl_v4" in line and "general" not in line  # `all` is the agent suites only
    cli.main(["--suite", "general,ood", "--set", "general.tasks=gsm8k,ifeval", "--set", "general.num_fewshot=3",
              "--dry-run"])
    out = capsys.readouterr().out
    assert "# would evaluate: claw_eval, qwenclawbench, bfcl_v4, general (lm-eval: gsm8k, ifeval)" in out.splitlines()
    args = cli.build_parser().parse_args(["--suite", "general", "--set", "general.tasks=gsm8k,mmlu",
                                          "--set", "general.limit=0.5", "--set", "general.batch_size=auto"])
    general = cli.load_eval_config(args).general
    assert (general.tasks, general.limit, general.batch_size) == (["gsm8k", "mmlu"], 0.5, "auto")
    with pytest.raises(SystemExit):
        cli.main(["--suite", "general", "--set", "general.fewshot=3", "--dry-run"])
    err = capsys.readouterr().err
    assert "general: unknown key 'fewshot'" in err and "num_fewshot" in err


def test_chat_template_over_completions_without_a_tokenizer_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(_general_args(tmp_path, "openai:http://127.0.0.1:9/v1#m", [MC],
                               "--set", "general.apply_chat_template=true"))
    assert "general.tokenizer=CHECKPOINT_DIR" in capsys.readouterr().err


def test_a_model_path_that_is_no_checkpoint_is_one_clear_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(_general_args(tmp_path, str(tmp_path / "no_such_checkpoint"), [MC]))
    err = capsys.readouterr().err
    assert "checkpoint not found" in err and "no_such_checkpoint" in err and "Traceback" not in err


def test_unknown_task_says_did_you_mean(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(_general_args(tmp_path, "embedded", ["unified_fixture_mcq"]))
    assert "unified_fixture_mc" in capsys.readouterr().err


def test_default_tasks_are_lm_eval_tasks_and_their_dependencies_import():
    from unified.eval.general import _task_manager

    index = _task_manager(()).task_index
    assert all(name in index for name in DEFAULT_TASKS)
    # ifeval's scorer imports langdetect, immutabledict and nltk (requirements/bench.txt)
    code = "import lm_eval.tasks.ifeval.instructions_registry"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]


def test_general_plan_counts_recorded_tasks_and_summarizes_from_records(tmp_path, capsys):
    """No model: a task record written in our TaskRecord format (a fixture) under the run's fingerprint is
    'recorded' in the plan, one under other settings is not; the run's summary reads the part from plan.json."""
    from unified.eval.config import EvalConfig
    from unified.eval.general import Metric, TaskRecord, fingerprint, general_with_limit
    from unified.eval.plan import plan_run, read_plan, write_plan
    from unified.eval.summarize import summarize

    out = tmp_path / "run"
    cfg = EvalConfig(suite="general", out=str(out), limit=3, general=GeneralConfig(tasks=[MC, GEN]))
    store = GeneralStore(out)
    fixture = {"model": cfg.model, "metrics": [Metric("acc", "none", 0.5, 0.1)], "status": "ok"}
    store.append(TaskRecord(task=MC, fingerprint=fingerprint(cfg.model, general_with_limit(cfg.general, 3)), **fixture))
    store.append(TaskRecord(task=GEN, fingerprint=fingerprint(cfg.model, cfg.general), **fixture))  # no --limit: other
    _cli("--suite", "general", "--out", str(out), "--limit", "3", "--set", f"general.tasks={MC},{GEN}", "--dry-run")
    assert "# plan: general (lm-eval): 2 tasks x 1 run(s) = 2 pairs; 1 recorded, 1 to run " \
           f"({MC}, {GEN})" in capsys.readouterr().out.splitlines()
    assert not (out / "plan.json").exists()  # a dry run writes nothing
    write_plan(out, plan_run(cfg, []))
    [part] = read_plan(out).parts  # plan.json's one list of parts, lm-eval's read back by its name
    assert part.name == "lm_eval" and part.to_run == [GEN] and part.config.limit == 3
    current = json.loads((out / "plan.json").read_text())
    # plan.json of version 3 (a field `general`) and of version 1 (lm-eval's options alone) still read
    legacy = {**current, "version": 3, "general": {k: v for k, v in current["parts"][0].items() if k != "name"}}
    del legacy["parts"]
    (out / "plan.json").write_text(json.dumps(legacy))
    assert read_plan(out).parts == [part]
    legacy["version"], legacy["general"] = 1, legacy["general"]["config"]
    (out / "plan.json").write_text(json.dumps(legacy))
    [old] = read_plan(out).parts
    assert old.config == old.config.__class__(**legacy["general"]) and old.model == cfg.model
    tasks = summarize(out).general.tasks
    assert tasks[MC]["status"] == "ok" and tasks[MC]["metrics"][0]["value"] == 0.5
    assert tasks[GEN] == {"task": GEN, "status": "not run"}
    assert json.loads((out / "summary.json").read_text())["general"]["tasks"][MC]["status"] == "ok"


def test_lm_eval_shards_and_merges_like_a_benchmark(tmp_path, monkeypatch, capsys):
    """`--benchmarks lm_eval --shard I/2`: each shard covers its own tasks (the benchmarks' hash rule), resumes
    from its records, and `--merge` joins the task records and lm-eval's output files into the summary an
    unsharded run gives. No model: the two tasks with data have fixture records in our TaskRecord format
    under the run's fingerprint; the task without data runs through lm-eval and is recorded as a skip."""
    from unified.eval.general import Metric, TaskRecord, fingerprint
    from unified.eval.plan import read_plan

    def no_model(*args, **kwargs):
        raise AssertionError("a recorded task was run again")

    monkeypatch.setattr("unified.eval.general_models.make_lm", no_model)
    tasks = [MC, GEN, ABSENT]  # shard_of("general", task, 0, 2): MC, GEN -> 0; ABSENT -> 1
    args = ["--benchmarks", "lm_eval", "--model", "embedded", "--set", f"general.include_path={FIXTURE_TASKS}",
            "--set", f"general.tasks={','.join(tasks)}"]
    fp = fingerprint("embedded", GeneralConfig(tasks=tasks))
    fixture = {"model": "embedded", "fingerprint": fp, "metrics": [Metric("acc", "none", 0.5, 0.1)], "status": "ok"}
    for run in ("whole", "shard-0"):
        for task in (MC, GEN):
            GeneralStore(tmp_path / run).append(TaskRecord(task=task, **fixture))
    (tmp_path / "shard-0" / "general" / "lm_eval" / MC).mkdir(parents=True)  # stands for lm-eval's own output
    (tmp_path / "shard-0" / "general" / "lm_eval" / MC / "results_fixture.json").write_text("{}")
    _cli(*args, "--out", str(tmp_path / "shard-1"), "--shard", "1/2", "--dry-run")
    assert (f"# plan: general (lm-eval): 3 tasks x 1 run(s) = 3 pairs, this shard: 1 of them; 0 recorded, 1 to run "
            f"({ABSENT})") in capsys.readouterr().out.splitlines()
    _cli(*args, "--out", str(tmp_path / "whole"))
    for i in (0, 1):
        _cli(*args, "--out", str(tmp_path / f"shard-{i}"), "--shard", f"{i}/2")
    shard0 = json.loads((tmp_path / "shard-0" / "summary.json").read_text())
    assert list(shard0["general"]["tasks"]) == [MC, GEN] and shard0["shard"]["shard"] == "0/2"
    assert [r.task for r in GeneralStore(tmp_path / "shard-1").records()] == [ABSENT]
    shards = [str(tmp_path / f"shard-{i}") for i in (0, 1)]
    assert cli.main(["--merge", *shards, "--out", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "summary.json").read_text())
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert merged["general"] == whole["general"] and list(merged["general"]["tasks"]) == tasks
    assert merged["general"]["tasks"][ABSENT]["status"] == "skipped"
    assert (tmp_path / "merged" / "general" / "lm_eval" / MC / "results_fixture.json").is_file()
    [part] = read_plan(tmp_path / "merged").parts
    assert part.covered is None and part.recorded == [MC, GEN] and part.to_run == []
    GeneralStore(tmp_path / "shard-1").path.write_text("")  # shard 1 never finished: the merge names it
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--merge", *shards, "--out", str(tmp_path / "merged2")])
    assert exit_info.value.code == 2
    assert f"lm-eval task(s) {ABSENT} of shard {shards[1]} have no record" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ missing data


def test_absent_data_is_a_recorded_skip_and_no_model_is_loaded(tmp_path, monkeypatch):
    local = tmp_path / "tasks"
    local.mkdir()
    text = (REPO / FIXTURE_TASKS / "unified_fixture_mc.yaml").read_text()
    (local / "missing_local.yaml").write_text(
        text.replace("task: unified_fixture_mc", "task: unified_fixture_missing_local")
            .replace("data/mc.jsonl", "data/no_such_file.jsonl"))

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded although no task had its data")

    monkeypatch.setattr("unified.eval.general_models.make_lm", no_model)
    import datasets.config

    keys = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    env_before, offline_before = {k: os.environ.get(k) for k in keys}, datasets.config.HF_HUB_OFFLINE
    cfg = GeneralConfig(tasks=[ABSENT, "unified_fixture_missing_local"], include_path=[FIXTURE_TASKS, str(local)])
    entries = run_general(cfg, "embedded", tmp_path / "run")
    assert {k: os.environ.get(k) for k in keys} == env_before  # offline only while the suite runs
    assert datasets.config.HF_HUB_OFFLINE == offline_before
    hub = entries[ABSENT]
    assert hub["status"] == "skipped" and "unified-fixture/absent-dataset (main)" in hub["reason"]
    assert "datasets.load_dataset('unified-fixture/absent-dataset', 'main')" in hub["how_to_fix"]
    assert str(datasets.config.HF_DATASETS_CACHE) in hub["how_to_fix"]  # where datasets reads it offline
    files = entries["unified_fixture_missing_local"]
    assert files["status"] == "skipped" and files["reason"].startswith("local data files not found")
    assert "no_such_file.jsonl" in files["how_to_fix"]
    assert not files["metrics"] and not hub["metrics"]  # a skip, never a 0


# ------------------------------------------------------------------------------------------ in-process (HFLM)


def test_tiny_in_process_end_to_end(tiny_runs):
    a, _ = tiny_runs
    summary = json.loads((a / "summary.json").read_text())
    tasks = summary["general"]["tasks"]
    assert list(tasks) == [MC_GROUP, GEN, ABSENT]
    group = tasks[MC_GROUP]
    assert group["status"] == "ok" and group["n_samples"] == 12 and group["seconds"] > 0
    assert set(group["subtasks"]) == {MC, "unified_fixture_mc_alt"}
    # lm-eval's own numbers: each subtask's acc is the mean of its per-sample acc, with its stderr
    for name in group["subtasks"]:
        per_doc = [row["acc"] for row in _samples(a, name).values()]
        acc = next(m for m in group["subtasks"][name] if m["name"] == "acc")
        assert acc["value"] == pytest.approx(sum(per_doc) / len(per_doc)) and acc["stderr"] is not None
    sub = [next(m for m in group["subtasks"][n] if m["name"] == "acc")["value"] for n in group["subtasks"]]
    assert _metric(group, "acc")["value"] == pytest.approx(sum(sub) / 2)  # the group's size-weighted mean
    gen = tasks[GEN]
    assert gen["status"] == "ok" and _metric(gen, "exact_match")["filter"] == "strip"
    assert len(_samples(a, GEN)) == 4
    assert tasks[ABSENT]["status"] == "skipped"
    results = list((a / "general" / "lm_eval" / MC_GROUP).rglob("results_*.json"))
    assert results and MC in json.loads(results[0].read_text())["results"]
    assert all((a / p).is_file() for p in group["outputs"])
    md = (a / "summary.md").read_text()
    assert "## general (lm-evaluation-harness)" in md and "skipped: dataset not on this machine" in md
    assert f"| {MC_GROUP} | acc | none | {_metric(group, 'acc')['value']:.4f} ± " in md


@pytest.mark.slow
def test_limit_flag_is_lm_evals_limit_unless_general_limit_is_set(tiny_checkpoint, tmp_path):
    _cli(*_general_args(tmp_path / "a", str(tiny_checkpoint), [GEN], "--limit", "2"))
    assert len(_samples(tmp_path / "a", GEN)) == 2  # of the task's 4 documents
    _cli(*_general_args(tmp_path / "b", str(tiny_checkpoint), [GEN], "--limit", "2", "--set", "general.limit=3"))
    assert len(_samples(tmp_path / "b", GEN)) == 3


def test_rerun_resumes_finished_tasks(tiny_runs, tiny_checkpoint, monkeypatch):
    a, _ = tiny_runs
    store = GeneralStore(a)
    before = [(r.task, r.status) for r in store.records()]

    def no_model(*args, **kwargs):
        raise AssertionError("a finished task was run again")

    monkeypatch.setattr("unified.eval.general_models.make_lm", no_model)
    _cli(*_general_args(a, str(tiny_checkpoint), [MC_GROUP, GEN, ABSENT]))
    after = [(r.task, r.status) for r in store.records()]
    assert after == before + [(ABSENT, "skipped")]  # only the skipped task is tried again
    assert json.loads((a / "summary.json").read_text())["general"]["tasks"][MC_GROUP]["status"] == "ok"


def test_general_is_planned_like_a_benchmark(tiny_runs, tiny_checkpoint, capsys):
    """The dry run's plan line counts recorded / to-run tasks as for a benchmark's pairs, from ``--out``'s
    records; plan.json carries that part, and its ``section`` is the summary's ``general`` entry."""
    from unified.eval.plan import read_plan

    a, _ = tiny_runs
    _cli(*_general_args(a, str(tiny_checkpoint), [MC_GROUP, GEN, ABSENT], "--dry-run"))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("# plan: general"))
    assert line == (f"# plan: general (lm-eval): 3 tasks x 1 run(s) = 3 pairs; 2 recorded, 1 to run "
                    f"({MC_GROUP}, {GEN}, {ABSENT})")  # the skipped task (no data) is tried again
    [part] = read_plan(a).parts
    assert part.name == "lm_eval" and part.tasks == [MC_GROUP, GEN, ABSENT]
    assert part.model == str(tiny_checkpoint) and ABSENT in part.to_run
    summary = json.loads((a / "summary.json").read_text())["general"]
    assert json.loads(json.dumps(part.section(a).tasks)) == summary["tasks"]


def test_compare_shows_general_deltas_with_stderr(tiny_runs, capsys):
    a, b = tiny_runs
    # general.num_fewshot reached lm-eval: B's prompts carry one solved example before the question
    assert all(row["arguments"]["gen_args_0"]["arg_0"].count("Question:") == 2 for row in _samples(b, MC).values())
    assert all(row["arguments"]["gen_args_0"]["arg_0"].count("Question:") == 1 for row in _samples(a, MC).values())
    _cli("--compare", str(a), str(b))
    out = capsys.readouterr().out
    ta = json.loads((a / "summary.json").read_text())["general"]["tasks"]
    tb = json.loads((b / "summary.json").read_text())["general"]["tasks"]
    ma, mb = _metric(ta[MC_GROUP], "acc"), _metric(tb[MC_GROUP], "acc")
    row = next(line for line in out.splitlines() if line.startswith(f"| {MC_GROUP} | acc |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"{ma['value']:.4f} ± {ma['stderr']:.4f}" and cells[3] == f"{mb['value']:.4f} ± {mb['stderr']:.4f}"
    assert cells[4].startswith(f"{mb['value'] - ma['value']:+.4f} ± ")
    absent = next(line for line in out.splitlines() if line.startswith(f"| {ABSENT} |"))
    assert "skipped" in absent


def test_agent_benchmark_and_general_suite_in_one_run_share_the_loaded_weights(tiny_checkpoint, tmp_path, monkeypatch):
    import unified.models

    loads = []
    real = unified.models.load_checkpoint

    def counting(*args, **kwargs):
        loads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(unified.models, "load_checkpoint", counting)
    agent = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter format, written for tests
    _cli("--benchmarks", agent, "--set", f"benchmarks.{agent}.n=2", "--max-turns", "1", "--max-new-tokens", "4",
         *_general_args(tmp_path, str(tiny_checkpoint), [MC]))
    assert len(loads) == 1  # the agent policy's checkpoint is the one lm-eval's HFLM wraps
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["benchmarks"]["fixture_echo"]["results"] == 2  # the class's name: one name per benchmark and summary["general"]["tasks"][MC]["status"] == "ok"
    md = (tmp_path / "summary.md").read_text()
    assert "| fixture_echo |" in md and f"| {MC} | acc |" in md


# ------------------------------------------------------------------------------------------ HTTP (local server)


def _loglikelihoods(run_dir: Path, task: str) -> dict[int, list[float]]:
    return {doc: [float(r[0]) for r in row["filtered_resps"]] for doc, row in _samples(run_dir, task).items()}


def _post(server: LocalOpenAIServer, route: str, body: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    url = server.base_url.removesuffix("/v1") + route
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _check_completions_endpoint(server: LocalOpenAIServer) -> None:
    """/v1/completions and the tokenizer endpoints, as lm-eval and OpenAI clients use them."""
    status, tokens = _post(server, "/tokenize", {"prompt": "The agent calls a tool", "add_special_tokens": False})
    assert status == 200 and tokens["tokens"]
    assert _post(server, "/detokenize", {"tokens": tokens["tokens"]})[1]["prompt"] == "The agent calls a tool"
    full = _post(server, "/v1/completions", {"prompt": tokens["tokens"], "max_tokens": 8, "temperature": 0})[1]
    text = full["choices"][0]["text"]
    stop = next(text[i:i + 2] for i in range(1, len(text) - 1) if text[i:i + 2].strip())
    # the same greedy completion, cut before the first stop string (OpenAI semantics)
    cut = _post(server, "/v1/completions", {"prompt": tokens["tokens"], "max_tokens": 8, "stop": [stop]})[1]
    assert cut["choices"][0]["text"] == text[:text.index(stop)] and cut["choices"][0]["finish_reason"] == "stop"
    echo = _post(server, "/v1/completions", {"prompt": [tokens["tokens"]] * 2, "echo": True, "logprobs": 1,
                                             "max_tokens": 1})[1]
    assert [c["index"] for c in echo["choices"]] == [0, 1]
    logprobs = echo["choices"][0]["logprobs"]
    assert len(logprobs["token_logprobs"]) == len(tokens["tokens"]) + 1 and logprobs["token_logprobs"][0] is None
    assert all(lp <= max(top.values()) + 1e-6 for lp, top in zip(logprobs["token_logprobs"][1:], logprobs["top_logprobs"][1:]))
    for bad in ({"prompt": tokens["tokens"], "echo": True, "max_tokens": 5}, {"prompt": [10 ** 9], "max_tokens": 1}):
        status, body = _post(server, "/v1/completions", bad)
        assert status == 400 and "bad request" in body["error"]["message"]


def test_http_path_through_our_local_server_matches_in_process(tiny_runs, tiny_checkpoint, tmp_path):
    a, _ = tiny_runs
    with LocalOpenAIServer(str(tiny_checkpoint), served_name="tiny") as server:
        _check_completions_endpoint(server)
        _cli(*_general_args(tmp_path / "http", server.spec, [MC_GROUP, GEN]))
        chat = GeneralConfig(tasks=[MC, GEN], include_path=[FIXTURE_TASKS], api_model="local-chat-completions",
                             apply_chat_template=True)
        chat_entries = run_general(chat, server.spec, tmp_path / "chat")
    tasks = json.loads((tmp_path / "http" / "summary.json").read_text())["general"]["tasks"]
    assert tasks[MC_GROUP]["status"] == "ok" and tasks[GEN]["status"] == "ok"
    for name in (MC, "unified_fixture_mc_alt"):  # /v1/completions echo+logprobs == HFLM's own loglikelihoods
        http, local = _loglikelihoods(tmp_path / "http", name), _loglikelihoods(a, name)
        assert http.keys() == local.keys()
        for doc in local:
            assert http[doc] == pytest.approx(local[doc], abs=1e-3)
    # generate_until over /v1/completions: same greedy text as in-process
    assert {d: r["filtered_resps"] for d, r in _samples(tmp_path / "http", GEN).items()} == \
        {d: r["filtered_resps"] for d, r in _samples(a, GEN).items()}
    # chat-completions: generation tasks run, loglikelihood tasks are a recorded skip
    assert chat_entries[GEN]["status"] == "ok"
    assert chat_entries[MC]["status"] == "skipped" and "local-completions" in chat_entries[MC]["how_to_fix"]


# ------------------------------------------------------------------------------------------ embedded model


@pytest.mark.slow
def test_embedded_model_in_process_and_over_http(embedded_dir, tmp_path):
    local, http = tmp_path / "local", tmp_path / "http"
    limit = ("--set", "general.limit=3")  # 3 documents, 9 loglikelihood requests: the embedded model is slow on CPU
    _cli(*_general_args(local, "embedded", [MC], *limit))
    with LocalOpenAIServer("embedded", served_name="embedded") as server:
        _cli(*_general_args(http, server.spec, [MC], *limit))
    for run in (local, http):
        tasks = json.loads((run / "summary.json").read_text())["general"]["tasks"]
        assert tasks[MC]["status"] == "ok" and tasks[MC]["n_samples"] == 3
        assert _metric(tasks[MC], "acc")["stderr"] is not None
    for doc, values in _loglikelihoods(local, MC).items():
        assert _loglikelihoods(http, MC)[doc] == pytest.approx(values, abs=1e-3)


# ------------------------------------------------------------------------------------------ vLLM, slurm


@pytest.mark.gpu
def test_vllm_class_runs_the_fixture_tasks(embedded_dir, tmp_path):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (the gpu extra)")
    entries = run_general(GeneralConfig(tasks=[MC, GEN], include_path=[FIXTURE_TASKS]), "vllm:embedded", tmp_path)
    assert entries[MC]["status"] == "ok" and entries[GEN]["status"] == "ok"


def _slurm_dry_run(*args: str, **env: str) -> str:
    full = {**os.environ, "PYTHON": sys.executable, "REPO": str(REPO), "DRY_RUN": "1", **env}
    out = subprocess.run(["bash", str(REPO / "slurm" / "eval.sh"), *args], env=full, capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    return next(line for line in out.stdout.splitlines() if "-m unified.eval" in line)


def test_slurm_eval_runs_the_general_suite():
    served = _slurm_dry_run("--set", "general.limit=100", MODEL="/ckpt/final", SUITE="general,ood")
    assert "--suite general\\,ood" in served or "--suite general,ood" in served
    assert re.search(r"--model openai:http://127\.0\.0\.1:\d+/v1#policy", served)  # PORT=auto: a free port
    assert "--set general.tokenizer=/ckpt/final" in served and served.rstrip().endswith("--set general.limit=100")
    in_process = _slurm_dry_run(MODEL="/ckpt/final", SUITE="general", SERVER="none")
    assert "--suite general" in in_process and "general.tokenizer" not in in_process
    chosen = _slurm_dry_run(MODEL="/ckpt/final", SUITE="general", BENCHMARKS="bfcl_v4", SERVER="none")
    assert "--benchmarks bfcl_v4" in chosen and "--suite general" in chosen
    agent_only = _slurm_dry_run(MODEL="/ckpt/final", SUITE="ood")
    assert "general" not in agent_only
