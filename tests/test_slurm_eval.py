"""slurm/eval.sh: its conventions, the server/eval layouts (dry run), and a real sbatch on a one-node Slurm."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _slurm_cluster import free_port, require_slurm

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent
SCRIPT = REPO / "slurm" / "eval.sh"
PYTHON = sys.executable
FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter format, written for tests


def run_script(*args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": PYTHON, "REPO": str(REPO), "DRY_RUN": "1", **env}
    out = subprocess.run(["bash", str(SCRIPT), *args], env=full, capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_script_conventions():
    text = SCRIPT.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash" and lines[1].startswith("# eval.sh: ")
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    for var in ("MODEL", "SUITE", "BENCHMARKS", "PROMPTING", "OUT", "SERVER", "GPUS_PER_NODE", "PORT"):
        assert re.search(rf"^{var}=\$\{{{var}:-", text, re.M), f"{var} is not a user variable with a default"
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert sbatch and not any(re.search(r"--partition|--account|\s-p\s|\s-A\s|--qos", s) for s in sbatch)
    assert '"$@"' in text


def test_vllm_layout_serves_the_checkpoint_and_evaluates_through_it():
    out = run_script("--limit", "3", MODEL="/ckpt/final", SUITE="in_domain", GPUS_PER_NODE="4", PORT="8123").stdout
    serve = next(line for line in out.splitlines() if "-m vllm.entrypoints.openai.api_server" in line)
    assert serve.startswith(f"{REPO}/.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model /ckpt/final")
    assert "--tensor-parallel-size 4" in serve and "--port 8123" in serve and "--max-model-len 131072" in serve
    assert "--tool-call-parser qwen3_coder" in serve and "--dtype" not in serve
    assert "# wait for http://127.0.0.1:8123/health" in out
    evaluation = next(line for line in out.splitlines() if "-m unified.eval" in line)
    assert "--model openai:http://127.0.0.1:8123/v1#policy" in evaluation
    assert "--suite in_domain" in evaluation and evaluation.rstrip().endswith("--limit 3")


def test_vllm_on_a_cpu_node_runs_fp32_on_a_free_port():
    out = run_script(MODEL="/ckpt/final", GPUS_PER_NODE="0", VLLM_PYTHON="/opt/vllm/bin/python").stdout
    serve = next(line for line in out.splitlines() if "-m vllm.entrypoints.openai.api_server" in line)
    port = int(re.search(r"--port (\d+)", serve).group(1))
    assert serve.startswith("/opt/vllm/bin/python ") and port > 0
    assert "--dtype float32 --max-model-len 4096" in serve and "--tensor-parallel-size" not in serve
    assert f"# wait for http://127.0.0.1:{port}/health" in out


def test_no_server_runs_in_process_with_the_chosen_benchmarks():
    out = run_script(MODEL="/ckpt/final", SERVER="none", BENCHMARKS="bfcl_v4 claw_eval",
                     PROMPTING="predict_then_act").stdout
    assert "vllm" not in out and "unified.inference.server" not in out
    evaluation = next(line for line in out.splitlines() if "-m unified.eval" in line)
    assert "--benchmarks bfcl_v4 claw_eval" in evaluation and "--suite" not in evaluation
    assert "--model /ckpt/final" in evaluation and "--prompting predict_then_act" in evaluation


@pytest.mark.parametrize("env, message", [
    ({"SERVER": "triton"}, "SERVER=triton: expected vllm, local or none"),
    ({"SERVER": "vllm", "DRY_RUN": "0", "VLLM_PYTHON": "/nonexistent/bin/python"},
     "SERVER=vllm: no interpreter at VLLM_PYTHON=/nonexistent/bin/python (run make vllm"),
])
def test_bad_settings_are_clear_errors(env, message):
    out = run_script(check=False, **env)
    assert out.returncode != 0 and message in out.stderr


def test_an_array_task_runs_its_shard_and_the_first_submits_the_merge():
    env = {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4", "SERVER": "local",
           "GPUS_PER_NODE": "0", "PORT": "8100"}
    first = run_script("--limit", "3", SLURM_ARRAY_TASK_ID="0", **env).stdout
    merge = next(line for line in first.splitlines() if line.startswith("sbatch "))
    assert "--dependency=afterok:77" in merge and r"MERGE=1\,SHARDS=4\,OUT=runs/eval-embedded-ood-act" in merge
    assert "--wrap=bash" in merge and "gpus" not in merge  # reads no #SBATCH line: no GPUs, no whole node
    third = run_script("--limit", "3", SLURM_ARRAY_TASK_ID="2", **env).stdout
    assert "sbatch" not in third and "--port 8102" in third  # its own server port, should shards share a node
    evaluation = next(line for line in third.splitlines() if "-m unified.eval" in line)
    assert "--out runs/eval-embedded-ood-act/shard-2" in evaluation and "--shard 2/4" in evaluation
    merged = run_script(MERGE="1", SHARDS="2", OUT="/r/x").stdout
    assert "-m unified.eval --merge /r/x/shard-0 /r/x/shard-1 --out /r/x" in merged and "server" not in merged
    out = run_script(check=False, SHARDS="4", SLURM_ARRAY_TASK_ID="4", SERVER="none")
    assert out.returncode != 0 and "array index 4 with SHARDS=4: use --array=0-3" in out.stderr


def test_the_default_out_has_no_job_id_so_a_resubmitted_job_resumes():
    outs = set()
    for job in ("101", "102"):
        out = run_script(MODEL="runs/lwm/final", SERVER="none", SLURM_JOB_ID=job, RUNS="/r").stdout
        outs.add(re.search(r"--out (\S+)", next(line for line in out.splitlines() if "-m unified.eval" in line))[1])
    assert outs == {"/r/eval-runs_lwm_final-ood-act"}


def test_gold_needs_no_server_by_default_and_an_explicit_server_is_a_clear_error():
    out = run_script("--limit", "2", MODEL="gold", DRY_RUN="1").stdout
    assert "vllm" not in out and "unified.inference.server" not in out
    evaluation = next(line for line in out.splitlines() if "-m unified.eval" in line)
    assert "--model gold" in evaluation
    for server in ("local", "vllm"):
        refused = run_script(check=False, MODEL="gold", SERVER=server)
        assert refused.returncode != 0 and "MODEL=gold needs no model server" in refused.stderr


def test_gpus_follow_the_grant_and_asking_for_more_is_a_clear_error():
    out = run_script(MODEL="/ckpt/final", SLURM_GPUS_PER_NODE="h200:4").stdout
    assert "--tensor-parallel-size 4" in out
    out = run_script(check=False, MODEL="/ckpt/final", SLURM_GPUS_PER_NODE="2", GPUS_PER_NODE="8")
    assert out.returncode != 0 and "GPUS_PER_NODE=8 but the job has 2 GPU(s) a node: sbatch --gpus-per-node=8" in out.stderr
    headers = [line for line in SCRIPT.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --gpus-per-node=8" in headers and "#SBATCH --mem=0" in headers
    assert "#SBATCH --requeue" in headers and any(h.startswith("#SBATCH --signal=B:USR1@") for h in headers)


@pytest.mark.slow
def test_sbatch_array_shards_merge_after_all_and_a_failed_shard_reruns_alone(tmp_path, slurm_cluster):
    require_slurm()
    from test_eval_shards import DEPENDS, ECHO, comparable_summary, records

    from unified.eval.cli import main

    args = ("--runs", "2", "--max-in-flight", "4", "--set", f"benchmarks.{ECHO}.n=9",
            "--set", f"benchmarks.{DEPENDS}.groups=3")
    sys.path.insert(0, str(TESTS))
    assert main(["--model", "gold", "--benchmarks", ECHO, DEPENDS, "--out", str(tmp_path / "whole"), *args]) == 0
    out = tmp_path / "eval"
    (out).mkdir()
    (out / "shard-2").write_text("not a directory: this shard fails")
    env = {"PYTHON": PYTHON, "REPO": str(REPO), "MODEL": "gold", "SERVER": "none", "BENCHMARKS": f"{ECHO} {DEPENDS}",
           "OUT": str(out), "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    logs = tmp_path / "logs"
    logs.mkdir()
    sbatch = ("--nodes=1", "--gpus-per-node=0", f"--output={logs}/%A_%a.out")

    def merge_job(array_job: int, index: int) -> int:
        text = (logs / f"{array_job}_{index}.out").read_text()
        return int(re.search(r"merge job (\d+) starts after array job", text)[1])

    cluster = slurm_cluster
    array = cluster.sbatch(SCRIPT, *args, env=env, sbatch_args=("--array=0-3", *sbatch), cwd=REPO)
    tasks = cluster.wait_array(array, timeout_s=600)
    states = {i: t["JobState"] for i, t in tasks.items()}
    assert states == {0: "COMPLETED", 1: "COMPLETED", 2: "FAILED", 3: "COMPLETED"}, (states, cluster.logs())
    first_merge = merge_job(array, 0)
    deadline = time.time() + 30  # the controller marks the dependency after the failed task ends
    while (state := cluster.job_state(first_merge)).get("Reason") != "DependencyNeverSatisfied" \
            and time.time() < deadline:
        time.sleep(0.5)
    assert state["JobState"] == "PENDING" and state["Reason"] == "DependencyNeverSatisfied", state
    subprocess.run(["scancel", str(first_merge)], env=cluster.env(), check=True)
    assert not (out / "summary.json").exists()

    (out / "shard-2").unlink()  # what broke the shard is fixed: rerun it alone
    rerun = cluster.sbatch(SCRIPT, *args, env={**env, "SHARDS": "4"}, sbatch_args=("--array=2", *sbatch), cwd=REPO)
    assert cluster.wait_array(rerun)[2]["JobState"] == "COMPLETED"
    merged = cluster.wait(merge_job(rerun, 2))
    merge_log = next(out.glob("merge-*.out")).read_text()
    assert merged["JobState"] == "COMPLETED" and merged["ExitCode"] == "0:0", (merged, merge_log)
    for bench in ("fixture_echo", "fixture_depends"):
        assert records(out, bench) == records(tmp_path / "whole", bench)
    assert comparable_summary(out) == comparable_summary(tmp_path / "whole")


@pytest.mark.slow
def test_sbatch_serves_a_checkpoint_and_writes_the_results(tmp_path, tiny_checkpoint, slurm_cluster):
    require_slurm()
    out = tmp_path / "eval"
    port = free_port()
    env = {"PYTHON": PYTHON, "REPO": str(REPO), "MODEL": str(tiny_checkpoint), "SERVER": "local",
           "GPUS_PER_NODE": "0", "BENCHMARKS": FIXTURE, "OUT": str(out), "PORT": str(port),
           "SERVER_TIMEOUT_S": "240", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = ("--limit", "2", "--max-turns", "2", "--max-new-tokens", "8", "--set", f"benchmarks.{FIXTURE}.n=2")
    cluster = slurm_cluster
    text = cluster.run_job(SCRIPT, *args, log=tmp_path / "job.log", name="eval-test", env=env, cwd=REPO)
    assert f"results in {out}" in text
    results = [json.loads(line) for line in (out / "fixture_echo" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in results) == ["echo_0", "echo_1"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == f"openai:http://127.0.0.1:{port}/v1#policy"
    entry = summary["benchmarks"]["fixture_echo"]  # one name per benchmark: the class's `name`
    assert entry["status"] == "ok" and entry["errors"] == 0
    episodes = [json.loads(line) for line in (out / "fixture_echo" / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(e["steps"] and e["error"] is None for e in episodes)  # the server answered
    assert (out / "server.log").is_file()  # the server wrote its log beside the results
