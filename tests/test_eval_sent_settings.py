"""run.json and identity.json record the request settings each benchmark's agent actually sends
(issue 52): harbor's Terminus-2 sends no temperature and no max_tokens unless the user set one, so the
library's --temperature 0 / --max-new-tokens defaults are not recorded as sent for it."""

from __future__ import annotations

import json
from dataclasses import replace

from fixture_eval_bench import FixtureAdapter
from unified.eval.cli import main
from unified.eval.config import EvalConfig
from unified.eval.identity import IDENTITY_FILE, record_run_dir
from unified.eval.plan import read_plan


def _recorded(tmp_path, cfg: EvalConfig, benchmarks: list[str]) -> tuple[dict, dict]:
    record_run_dir(tmp_path, cfg, benchmarks, policy_given=True)
    return (json.loads((tmp_path / "run.json").read_text())["sent"],
            json.loads((tmp_path / IDENTITY_FILE).read_text())["sent"])


def test_terminus_2_records_no_sampling_it_does_not_send(tmp_path):
    cfg = EvalConfig(model="gold")
    run_sent, identity_sent = _recorded(tmp_path / "a", cfg, ["terminal_bench_2", "bfcl_v4"])
    assert run_sent == identity_sent
    tb = run_sent["terminal_bench_2"]
    assert "temperature" not in tb and "max_tokens" not in tb and "Terminus-2" in tb["source"]
    # our own agent loop sends the run's sampling
    assert run_sent["bfcl_v4"]["temperature"] == cfg.sampling.temperature
    assert run_sent["bfcl_v4"]["max_tokens"] == cfg.sampling.max_new_tokens


def test_a_sampling_field_the_user_set_is_recorded_as_sent_by_terminus_2(tmp_path):
    cfg = EvalConfig(model="gold")
    cfg = replace(cfg, sampling=replace(cfg.sampling, temperature=0.7))
    sent, _ = _recorded(tmp_path, cfg, ["terminal_bench_2"])
    assert sent["terminal_bench_2"]["temperature"] == 0.7 and "max_tokens" not in sent["terminal_bench_2"]
    cfg = replace(cfg, benchmark_config={"terminal_bench_2": {"agent": "tool_calling"}})
    sent, _ = _recorded(tmp_path / "b", cfg, ["terminal_bench_2"])
    assert sent["terminal_bench_2"]["max_tokens"] == cfg.sampling.max_new_tokens


class SendsNoSampling(FixtureAdapter):
    """Written for this test: an adapter whose agent is another client that sends no sampling field
    (as harbor's Terminus-2 does when the user set none)."""

    name = "sends_no_sampling"

    @classmethod
    def sent_request_settings(cls, config, sampling):
        return {"source": "a client of its own"}


def test_plan_json_records_what_each_agent_sends_and_the_plan_says_where_it_differs(tmp_path, capsys):
    out = tmp_path / "run"
    ours, other = "fixture_eval_bench:FixtureAdapter", f"{__name__}:SendsNoSampling"
    assert main(["--model", "gold", "--out", str(out), "--benchmarks", ours, other,
                 "--set", f"benchmarks.{ours}.n=1", "--set", f"benchmarks.{other}.n=1"]) == 0
    text = capsys.readouterr()
    plan = read_plan(out)
    cfg = plan.config.sampling
    assert plan.benchmark("fixture_echo").sent["temperature"] == cfg.temperature
    assert plan.benchmark("fixture_echo").sent["max_tokens"] == cfg.max_new_tokens
    assert plan.benchmark("sends_no_sampling").sent == {"source": "a client of its own"}
    lines = (text.out + text.err).splitlines()
    sends = [line for line in lines if "its agent sends" in line]
    assert len(sends) == 1 and "plan: sends_no_sampling: " in sends[0]
    assert "no temperature or max_tokens (a client of its own)" in sends[0]
