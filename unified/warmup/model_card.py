"""The model card of a warmup's ``final/``: ``<output_dir>/final/README.md``.

TRL's trainer writes a generic card whose base model is "None" and which says nothing of the
recipe (into ``<output_dir>/README.md`` at each save); this one replaces it there and is written
into ``final/`` after ``final/`` is saved (:func:`unified.warmup.trainer.run_warmup`)
and again when ``--eval-before-after`` has measured the held-out reward
(:func:`unified.warmup.benchmark.run_before_after`). It says what a reader needs to trust or
reproduce the checkpoint: the base checkpoint (and the digest of its files when it is local),
the resolved recipe and its hash, the data, the reward functions and their weights, the steps,
the held-out reward before and after when measured, and the library versions. A field that is
not known is left out, never written as "None".
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

from unified.config import dump_yaml
from unified.store import write_text_atomic
from unified.warmup.config import WarmupConfig, describe
from unified.warmup.identity import IDENTITY_FILE, warmup_identity

CARD_FILE = "README.md"
REPORT_FILE = "before_after.json"
"""The before/after report of :mod:`unified.warmup.benchmark` in the output dir (the model card reads it)."""


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def reward_names(funcs: Sequence[Callable]) -> list[str]:
    return [str(getattr(f, "__name__", None) or type(f).__name__) for f in funcs]


def render_model_card(cfg: WarmupConfig, *, identity: dict[str, Any], steps: int | None = None,
                      train_samples: int | None = None, rewards: Sequence[tuple[str, float]] = (),
                      seconds_per_step: float | None = None, resumed_from: str | None = None,
                      before_after: dict[str, Any] | None = None) -> str:
    """The Markdown card (with a YAML front matter the Hugging Face hub reads)."""
    from unified import __version__

    base = cfg.model.name_or_path
    fields = identity.get("fields", {})
    front = ["---", "library_name: transformers", "tags: [unified, gspo, world-model, trl]"]
    if "/" in base and not Path(base).exists():  # a hub id
        front.append(f"base_model: {base}")
    front.append("---")
    lines = [*front, "", f"# GSPO world-model warmup of `{base}`", "",
             "Next-state prediction (\"what will the environment answer to this action?\") trained as a "
             "single-turn GSPO task with `python -m unified.warmup`; evaluate it as an agent with "
             "`python -m unified.eval --model <this directory>`.", "",
             "## Base checkpoint", "", f"- spec: `{base}`"]
    if fields.get("model.name_or_path") and fields["model.name_or_path"] != base:
        lines.append(f"- path: `{fields['model.name_or_path']}`")
    if fields.get("model.files"):
        lines.append(f"- files digest (names, sizes, times): `{fields['model.files']}`")
    lines += ["", "## Data", "", f"- train: {', '.join(f'`{p}`' for p in cfg.data.train)}"]
    if train_samples is not None:
        lines.append(f"- training samples: {train_samples} (one sampled turn per trajectory)")
    if cfg.data.heldout:
        lines.append(f"- held-out: {', '.join(f'`{p}`' for p in cfg.data.heldout)}")
    elif cfg.data.heldout_size:
        lines.append(f"- held-out: {cfg.data.heldout_size} samples split off the training data (seed {cfg.data.seed})")
    if cfg.data.max_prompt_tokens:
        lines.append(f"- prompts up to {cfg.data.max_prompt_tokens} tokens")
    if fields.get("data.content"):
        lines.append(f"- content digest: `{fields['data.content']}`")
    lines += ["", "## Rewards", ""]
    if rewards:
        lines += ["| reward function | weight |", "|---|---|"] + [f"| {n} | {w:g} |" for n, w in rewards]
    for entry in cfg.rewards:
        judge = getattr(entry, "judge_endpoint", "") or getattr(entry, "judge_model", "")
        if judge and entry.weight > 0:
            lines.append(f"\nRubric judge: `{judge}`.")
    shaping = [e.describe() for e in cfg.rewards if e.training_only and e.weight > 0]
    if shaping:
        lines.append(f"\nTraining-only shaping: {'; '.join(shaping)}, left out of held-out scores.")
    obj = describe(cfg)
    lines += ["", "## Training", "", f"- objective: {obj['objective']}, clip range {obj['clip_range']}, "
              f"KL beta {obj['kl_beta']}, group size {obj['group_size']}"]
    if steps is not None:
        lines.append(f"- steps: {steps} (train.max_steps {cfg.train.max_steps}), learning rate "
                     f"{cfg.train.learning_rate:g}")
    if seconds_per_step:
        lines.append(f"- seconds per step (last process): {seconds_per_step:g}")
    if resumed_from:
        lines.append(f"- resumed from `{resumed_from}`")
    for accepted in identity.get("accepted_differences", []):
        lines.append(f"- continued under a changed recipe (--resume-anyway): {'; '.join(accepted['differences'])}")
    lines += ["", "## Held-out reward before and after", ""]
    if before_after and before_after.get("status") == "done":
        p = before_after.get("paired", {})
        lines.append(f"- before: {before_after['before']['mean_reward']:.4f}, after: "
                     f"{before_after['after']['mean_reward']:.4f} (mean of the recipe's weighted rewards over "
                     f"{before_after.get('heldout_size', '?')} held-out prompts)")
        if p:
            lines.append(f"- paired difference: {p['mean_diff']:+.4f} +- {p['se_diff']:.4f} SE over {p['prompts']} "
                         f"prompts ({p['up']} up, {p['down']} down)")
    else:
        lines.append("Not measured for this checkpoint (`python -m unified.warmup --recipe R --eval-before-after` "
                     "measures it).")
    versions = [f"unified {__version__}"] + [f"{pkg} {v}" for pkg in ("trl", "transformers", "torch")
                                             if (v := _version(pkg))]
    lines += ["", "## Recipe (resolved)", "", f"recipe hash: `{identity.get('recipe_hash', '')}`", "",
              "```yaml", dump_yaml(cfg).rstrip(), "```", "", "## Software", "", ", ".join(versions), ""]
    return "\n".join(line for line in lines if line is not None)


def write_model_card(cfg: WarmupConfig, final_dir: str | Path, **facts: Any) -> Path:
    """Write (or replace) ``final_dir/README.md`` and ``<output_dir>/README.md``; ``facts`` as in :func:`render_model_card`
    (``before_after`` is read from ``<output_dir>/before_after.json`` when not given)."""
    if facts.get("before_after") is None:
        try:
            facts["before_after"] = json.loads((Path(cfg.output_dir) / REPORT_FILE).read_text())
        except (OSError, ValueError):
            facts["before_after"] = None
    identity = warmup_identity(cfg)
    try:  # the changes a --resume-anyway accepted on the way (unified.warmup.identity)
        recorded = json.loads((Path(cfg.output_dir) / IDENTITY_FILE).read_text())
        identity["accepted_differences"] = list(recorded.get("accepted_differences", []))
    except (OSError, ValueError):
        pass
    path = Path(final_dir) / CARD_FILE
    card = render_model_card(cfg, identity=identity, **facts)
    write_text_atomic(path, card)
    write_text_atomic(Path(cfg.output_dir) / CARD_FILE, card)  # TRL writes its "None" card there at each save
    return path
