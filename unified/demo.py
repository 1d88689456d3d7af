"""``make demo``: the library's main job on the embedded default model.

1. kernel selection and the embedded MoE checkpoint (built once, then reused, with its logit
   parity against the dense source);
2-3. one turn with a tool offered, rendered through the Qwen3.5-style chat template, generated, and read
   with the eval's parser (a tool call, a malformed one, or none: the 135M model is no reliable tool caller);
4. a short GSPO world-model warmup of the same weights (``recipes/warmup/embedded_cpu.yaml`` on
   the shipped ``data/lwm`` samples, a few steps), written as a Hugging Face directory, with the
   held-out world-model reward (rule-based: 25 x LCS-F1 against the real next observation,
   greedy) measured on the same prompts before and after (:mod:`unified.warmup.benchmark`);
5. ``python -m unified.eval --suite ood`` on that checkpoint (a few tasks per benchmark);
6. a before/after table: the held-out reward with its paired standard error, and the agent
   suite's result with what ran, what was skipped and why.

It first prints the memory and time it needs (the cost table's ``demo`` row: :func:`demo_cost`) and the
memory available.
Everything lands under ``--out`` (default ``runs/demo``); rerunning resumes both the warmup and
the eval where they stopped.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import torch

from unified.config import ArgumentParser
from unified.chatformat.toolcalls import parse_completion
from unified.eval.cli import main as eval_main
from unified.eval.costs import cost_rows, duration, read_costs

DEMO_TOOLS = [{
    "type": "function",
    "function": {
        "name": "list_files",
        "description": "List the files of a directory with their sizes in bytes.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Directory"}},
                       "required": ["path"]},
    },
}]
def demo_cost() -> tuple[float, str]:
    """(GiB of free memory to ask for, the measured cost in words) of ``make demo``, from the cost table's
    ``demo`` row (:mod:`unified.eval.costs`, the one source of costs): the peak RSS of its process tree rounded up
    to the next GiB, and its wall time; a row of several runs gives the largest peak and the longest wall time of
    them (what to plan for). 8 GiB and "not measured" when the table has no such row."""
    import math

    table = read_costs()
    row = cost_rows(table).get("demo")
    if row is None or row.peak_rss_gib is None:
        return 8.0, "its cost is not measured (docs/costs.md)"
    cpus = (table.get("machine") or {}).get("cpus", "?")
    peaks = [max(r.get("peak_rss_gib") or 0.0, r.get("peak_tree_rss_gib") or 0.0) for r in row.runs] or \
        [max(row.peak_rss_gib, row.peak_tree_rss_gib or 0.0)]  # the tree: a server it starts included
    walls = [r["wall_s"] for r in row.runs if r.get("wall_s") is not None] or [row.wall_s]
    peak, wall = max(peaks), max(w for w in walls if w is not None) if any(w is not None for w in walls) else None
    of = f", the most of {len(row.runs)} runs" if len(row.runs) > 1 else ""
    return float(math.ceil(peak)), (f"measured up to {peak:.2f} GiB peak RSS of its process tree and up to "
                                     f"{duration(wall)}{of} on a shared {cpus}-CPU machine "
                                     f"({row.measured_at[:10]}, docs/costs.md)")


DEMO_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant that uses tools."},
    {"role": "user", "content": "Which file in /tmp is the largest?"},
]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m unified.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="checkpoint spec (default: embedded)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="runs/demo", help="where the warmup and eval runs go (reruns resume)")
    parser.add_argument("--warmup-steps", type=int, default=2, help="GSPO steps of the demo warmup")
    parser.add_argument("--heldout", type=int, default=8,
                        help="held-out prompts scored before and after the warmup (greedy, rule-based reward)")
    parser.add_argument("--eval-limit", type=int, default=2, help="tasks per ood benchmark in the demo eval")
    parser.add_argument("--eval-max-turns", type=int, default=4,
                        help="policy calls per episode in the demo eval (the eval's own default is 40)")
    parser.add_argument("--skip-warmup", action="store_true", help="stop after the generation turn")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from unified.models import ensure_embedded_checkpoint, load_checkpoint
    from unified.models.embedded import BUILD_RECORD

    print(memory_notice(skip_warmup=args.skip_warmup), flush=True)
    done: list[str] = []
    if args.model == "embedded":
        start = time.time()
        path = ensure_embedded_checkpoint()
        record = json.loads((path / BUILD_RECORD).read_text())
        print(f"[1] embedded checkpoint: {path} ({time.time() - start:.1f}s; built {record['created_at']} in "
              f"{record['build_seconds']}s)")
        print(f"    {record['architecture']}, {record['parameters'] / 1e6:.0f}M parameters, "
              f"{record['upcycle']['num_experts']} experts top-{record['upcycle']['top_k']}, "
              f"max |logit diff| vs dense at creation = {record['parity']['max_abs_logit_diff']:.2e}")
        done.append("built or reused the embedded MoE checkpoint and checked its parity record")

    start = time.time()
    loaded = load_checkpoint(args.model)
    print(f"[2] loaded {loaded.spec} on {loaded.device} as {str(loaded.dtype).replace('torch.', '')} in "
          f"{time.time() - start:.1f}s; attention={loaded.kernels.attention}, experts={loaded.kernels.experts}")
    done.append(f"loaded it with attention={loaded.kernels.attention}, experts={loaded.kernels.experts}")

    tok = loaded.tokenizer
    prompt = tok.apply_chat_template(DEMO_MESSAGES, tools=DEMO_TOOLS, tokenize=False, add_generation_prompt=True,
                                     thinking=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).to(loaded.device)
    start = time.time()
    from unified.warmup.gspo_trainer import torch_threads

    with torch.no_grad(), torch_threads(1, loaded.device):  # decoding: 1 thread (generation.cpu_threads)
        out = loaded.model.generate(**ids, max_new_tokens=args.max_new_tokens, do_sample=False,
                                    pad_token_id=tok.pad_token_id)
    completion = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=False)
    n_new = out.shape[1] - ids["input_ids"].shape[1]
    seconds = time.time() - start
    print(f"[3] one turn with a tool offered: prompt {ids['input_ids'].shape[1]} tokens, generated {n_new} tokens in "
          f"{seconds:.1f}s ({n_new / max(seconds, 1e-9):.1f} tok/s)")
    print("    completion: " + completion.strip().replace("\n", "\n                "))
    verdict = tool_turn_verdict(completion, n_new, args.max_new_tokens)
    print(f"    {verdict}")
    done.append(f"rendered a tool-use prompt through the Qwen3.5-style chat template and generated one turn ({verdict})")

    if not args.skip_warmup:
        holder = [loaded]  # _warmup takes the only reference: the model is freed once the training is done
        del loaded
        report, training_model = _warmup(args, holder, done)
        print("    " + release_memory(training_model), flush=True)
        final = Path(report["final_dir"])
        summary = _eval_ood(args, final, done)
        print("\n" + before_after_table(report, summary))

    print("\nmake demo did:\n" + "\n".join(f"  - {item}" for item in done))
    return 0


def tool_turn_verdict(completion: str, generated: int, cap: int) -> str:
    """What the demo's one turn is, read with the eval's own parser (:func:`unified.chatformat.toolcalls.
    parse_completion`): a well-formed call of the offered tool, a malformed one, or no call at all (the
    135M embedded model often answers in text or repeats the tool block), and whether the token cap cut it."""
    parsed = parse_completion(completion)
    offered = {t["function"]["name"] for t in DEMO_TOOLS}
    good = [c for c in parsed.tool_calls if c.parse_error is None and c.name in offered]
    cut = f"; stopped at the {cap}-token cap (--max-new-tokens)" if generated >= cap else ""
    if good:
        return f"a tool call: {good[0].name}({json.dumps(good[0].arguments)}){cut}"
    if parsed.tool_calls:
        why = parsed.tool_calls[0].parse_error or f"unknown tool {parsed.tool_calls[0].name!r}"
        return f"NOT a valid tool call ({why}){cut}"
    return f"NO tool call: the model answered in text (the embedded 135M model is not a reliable tool caller){cut}"


def available_memory_gib() -> float | None:
    """``MemAvailable`` of /proc/meminfo in GiB (None where there is no /proc)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def memory_notice(*, skip_warmup: bool = False) -> str:
    """What the demo needs, what this machine has, and a warning when it is short."""
    need, measured = demo_cost()
    if skip_warmup:
        line = "make demo --skip-warmup needs about 2 GiB of free memory (no warmup); "
        need = 2.0
    else:
        line = (f"make demo needs about {need:.0f} GiB of free memory (its GSPO warmup of a 373M-parameter MoE on "
                f"CPU; {measured}); ")
    have = available_memory_gib()
    if have is None:
        return line + "available memory: unknown on this system"
    line += f"available now: {have:.1f} GiB"
    if have < need:
        line += (f"\nWARNING: less than {need:.0f} GiB available; the warmup may be killed for memory "
                 "(--skip-warmup runs only steps 1-3)")
    return line


def completion_length_row(report: dict) -> str:
    """The table's completion-length row, with the generation cap it is measured under and how many
    completions hit it (a mean near the cap says the cap, not the model, set it)."""
    before, after = report["before"], report["after"]
    cap = (report.get("settings") or {}).get("max_new_tokens")
    if not cap:
        return (f"| mean completion length, tokens | {before['mean_completion_tokens']:.1f} | "
                f"{after['mean_completion_tokens']:.1f} |")

    def cell(side: dict) -> str:
        ids = side.get("completion_ids")
        hit = f"; {sum(len(c) >= cap for c in ids)} of {len(ids)} hit the cap" if ids is not None else ""
        return f"{side['mean_completion_tokens']:.1f}{hit}"

    return f"| mean completion length, tokens (capped at {cap}) | {cell(before)} | {cell(after)} |"


def before_after_table(report: dict, summary: Any | None) -> str:
    """The demo's closing table: held-out world-model reward before/after, and the agent suite's result."""
    from unified.warmup.guard import final_weights_note, final_weights_step

    before, after, paired = report["before"], report["after"], report["paired"]
    n = paired["prompts"]
    collapse = report.get("collapse") or {}
    unchanged = final_weights_step(collapse, report["steps"]) == 0
    rows = [
        "Before/after of the same weights (SFT checkpoint -> after "
        f"{report['steps']} GSPO steps, {report['train_size']} training prompts):",
    ]
    if unchanged:
        rows.append(f"IDENTICAL WEIGHTS: {final_weights_note(collapse, report['steps'])}; the 'after' column "
                    "measures the start again (any difference is sampling or numerics, not training).")
    rows += [
        "",
        "| measure | before warmup | after warmup |" if not unchanged else
        "| measure | before warmup | after warmup (identical weights: the start kept) |",
        "|---|---|---|",
        f"| held-out world-model reward, rule-based (25 x LCS-F1 vs the real observation, 0-25; {n} prompts, greedy) "
        f"| {before['mean_reward']:.2f} | {after['mean_reward']:.2f} (paired {paired['mean_diff']:+.2f} +- "
        f"{paired['se_diff']:.2f} SE; {paired['up']} up, {paired['down']} down, {paired['same']} same) |",
        completion_length_row(report),
    ]
    if summary is None:
        rows.append("| agent suite (ood) | not run | not run (unified.eval unavailable or failed) |")
    else:
        from unified.eval.report import _fmt, counts_cells, status_cell

        for name, entry in summary.benchmarks.items():  # a unified.eval.records.RunSummary
            ran, skipped, errored = counts_cells(entry)
            cell = (f"{_fmt(entry.score())} ({entry.aggregate.get('metric', 'score')}; tasks run "
                    f"{ran}, skipped {skipped}, errored {errored})" if entry.status in ("ok", "partial")
                    else status_cell(entry))
            rows.append(f"| agent suite ood: {name} | not run (time) | {cell} |")
    lead, seeds = seed_report_lines()
    rows += ["", "The reward is a rule (token LCS F1), not the paper's LLM judge; with a few prompts and steps the "
             "SE is wide.", seeds]
    return "\n".join(([lead, ""] if lead else []) + rows)


def seed_report_lines(path: Path | None = None) -> tuple[str | None, str]:
    """``(lead, line)`` for the recap: the fresh seeds' share that keeps the start and that raises the held-out
    reward with the mean paired difference and its SE; ``lead`` (else None) says plainly that the setting does
    not learn on most fresh seeds when fewer than half raise the held-out reward or half or more keep the start."""
    try:
        data = json.loads((path or DEMO_SEED_REPORT).read_text(encoding="utf-8"))
        fresh, chosen = data["report"], data["selection"]
    except (OSError, ValueError, KeyError):
        return None, "These settings over seeds: docs/warmup_collapse.md."
    def part(s: dict) -> str:
        se = f" +- {s['se_diff']:.2f} SE" if s.get("se_diff") is not None else ""
        return (f"{s['n']} seeds ({s['range']}): kept the start on {s['kept_start']}, raised the held-out reward on "
                f"{s['heldout_up']}, mean paired difference {s['mean_diff']:+.2f}{se}")

    others = list(data.get("other_fresh") or [])
    line = ("These settings on fresh training seeds, never used to choose them: "
            + "; ".join(part(s) for s in [fresh, *others])
            + f". On the seeds they were chosen on, {part(chosen)} (docs/warmup_collapse.md).")
    n = sum(s["n"] for s in [fresh, *others])
    up = sum(s["heldout_up"] for s in [fresh, *others])
    kept = sum(s["kept_start"] for s in [fresh, *others])
    if n and (2 * up <= n or 2 * kept >= n):
        return (f"THE DEMO'S WARMUP DOES NOT LEARN ON MOST FRESH SEEDS: of {n} seeds never used to choose its "
                f"settings, {up} raised the held-out reward and {kept} kept the starting weights. Read the table "
                "below as one draw, not as the effect of the method."), line
    return None, line


REPO = Path(__file__).resolve().parents[1]
DEMO_RECIPE = REPO / "recipes" / "warmup" / "embedded_cpu.yaml"
DEMO_SEED_REPORT = REPO / "recipes" / "warmup" / "demo_seed_report.json"
"""The demo's settings over seeds (``measurements/demo_seed_sweep.py --report``): the range they were chosen on
(``selection``) and a fresh range never used for choosing (``report``)."""


def demo_warmup_overrides(*, steps: int, heldout: int) -> list[str]:
    """The ``--set`` overrides that turn :data:`DEMO_RECIPE` into the demo's warmup (one place: the demo and
    ``measurements/demo_seed_sweep.py``, which measured them over training seeds, both read it)."""
    return [f"train.max_steps={steps}", f"train.save_steps={steps}",
            # 2 updates per generation batch of 4 prompts x 4 completions (the recipe: 4 updates per batch of 8)
            "gspo.steps_per_generation=16",
            # 5x the recipe's 2e-5, for 2 steps instead of 5: chosen on training seeds 0-9, where it kept the start
            # on 1 (2e-5: on 6 of 12) and raised the held-out reward on 8; on fresh seeds: DEMO_SEED_REPORT
            # (docs/warmup_collapse.md, the fresh-seed section), which the recap prints
            "train.learning_rate=1e-4",
            f"data.train=[{REPO / 'data' / 'lwm'}]", f"data.heldout_size={heldout}",
            "data.max_prompt_tokens=320",  # 64 of the 108 samples; shorter prompts, faster steps than the recipe's 512
            # the recipe keeps its best step on 24 validation prompts; 8 keep the demo's probe short
            "data.validation_size=8", "monitor.probe_size=8",
            "logging.wandb=false"]


def _warmup(args, holder: list, done: list[str]) -> tuple[dict, weakref.ref]:
    """[4] a few GSPO steps on the model already in memory (no second copy), saved as a HF dir,
    with the held-out reward before and after (:func:`unified.warmup.benchmark.run_before_after`).

    ``holder``: a one-item list with the loaded checkpoint, which this function takes out: the trained model is
    then referenced by ``run_before_after`` alone, which drops it before loading the saved checkpoint to score
    "after", so neither that copy nor the eval's shares the process with the training copy. Returns the report and
    a weak reference to the training model (dead once it is freed; :func:`release_memory` reports it)."""
    from unified.warmup.benchmark import run_before_after
    from unified.warmup.config import load_warmup_config, updates_per_generation
    from unified.warmup.trainer import TrainablePolicy

    out = Path(args.out) / "warmup"
    overrides = [f"output_dir={out}", f"model.name_or_path={args.model}",
                 *demo_warmup_overrides(steps=args.warmup_steps, heldout=args.heldout)]
    cfg = load_warmup_config(DEMO_RECIPE, overrides)
    print(f"[4] GSPO warmup: {cfg.train.max_steps} steps x {cfg.gspo.num_generations} completions per prompt, "
          f"{updates_per_generation(cfg)} updates per generation batch, lr {cfg.train.learning_rate:g}, "
          f"clip [{1 - cfg.gspo.epsilon:.4f}, {1 + cfg.gspo.epsilon_high:.4f}], no KL, top "
          f"{cfg.model.trainable_layers} layers trained -> {out}; held-out reward on {args.heldout} prompts before "
          "and after", flush=True)
    loaded = holder.pop()
    training_model = weakref.ref(loaded.model)
    box = [TrainablePolicy(model=loaded.model, tokenizer=loaded.tokenizer,
                           kernels={"attention": loaded.kernels.attention, "experts": loaded.kernels.experts})]
    loaded.model.train()
    del loaded
    report = run_before_after(cfg, temperature=0, policy=box.pop())  # popped: no reference stays in this frame
    print(f"    {report['steps']} steps: {report['mean_step_seconds']:.1f} s a step (generation + update, metrics.jsonl's "
          f"step_time), {report['seconds_per_step']:.1f} s a step with the validation probe and saving (run.json); "
          f"peak RSS of this process {report['peak_memory'].get('memory/peak_rss_gib', 0):.2f} GiB (the whole "
          "command's, measured from outside, is docs/costs.md's)")
    print(f"    checkpoint: {report['final_dir']} (metrics: {out / 'metrics.jsonl'})")
    from unified.warmup.guard import final_weights_note, final_weights_step

    if final_weights_step(report.get("collapse") or {}, report["steps"]) == 0:
        done.append(f"trained {report['steps']} GSPO steps but kept the starting weights "
                    f"({final_weights_note(report.get('collapse') or {}, report['steps'])}): the warmup changed "
                    f"nothing; saved them as {report['final_dir']}, scored {args.heldout} held-out prompts twice")
    else:
        done.append(f"warmed the weights up with GSPO for {report['steps']} steps "
                    f"({final_weights_note(report.get('collapse') or {}, report['steps'])}), scored {args.heldout} "
                    f"held-out prompts before and after, and saved {report['final_dir']}")
    return report, training_model


def process_rss_gib() -> float | None:
    """This process's resident set now, in GiB (``VmRSS`` of /proc/self/status; None where there is none)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def release_memory(training_model: weakref.ref | None = None) -> str:
    """Collect garbage and give the C heap's free pages back to the system (glibc's ``malloc_trim``), so the
    eval that follows in this process starts from one model's worth less; says whether the training model is
    gone (``training_model``: a weak reference to it) and this process's RSS now."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the allocator keeps its pages, the eval reuses them
        pass
    rss = process_rss_gib()
    state = ("the training model is freed" if training_model is None or training_model() is None
             else "WARNING: the training model is still referenced (the eval adds a copy)")
    return f"{state}; this process's RSS before the eval: " + ("unknown" if rss is None else f"{rss:.2f} GiB")


def _eval_ood(args, final: Path, done: list[str]) -> Any | None:
    """[5] the same weights as a multi-turn agent: ``python -m unified.eval --suite ood``, run in this
    process (:func:`unified.eval.cli.main`, as the command would run it) once the training model is freed: a
    subprocess would load its copy beside this process's heap, which keeps the training's pages."""
    cmd = [sys.executable, "-m", "unified.eval", "--suite", "ood", "--model", str(final),
           "--limit", str(args.eval_limit), "--max-new-tokens", str(args.max_new_tokens),
           "--max-turns", str(args.eval_max_turns), "--no-thinking", "--out", str(Path(args.out) / "eval-ood")]
    print("[5] " + shlex.join(cmd), flush=True)  # the whole command, as it can be pasted into a shell
    try:
        rc = int(eval_main(cmd[3:]) or 0)
    except SystemExit as exc:  # a usage error: its one line is printed already
        rc = exc.code if isinstance(exc.code, int) else 1
    if rc != 0:
        print(f"    the eval exited with status {rc}")
    done.append(f"evaluated the warmed-up checkpoint on the ood suite (exit status {rc}, results in "
                f"{Path(args.out) / 'eval-ood'})")
    from unified.eval.records import load_summary

    path = Path(args.out) / "eval-ood" / "summary.json"
    return load_summary(path.parent) if path.is_file() else None


if __name__ == "__main__":
    raise SystemExit(main())
