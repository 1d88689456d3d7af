"""What defines an eval run directory, recorded in ``DIR/identity.json`` and checked on every rerun.

Rerunning a command on the same ``--out`` resumes it: finished (task, trial) pairs are kept and
only the rest run. That is right only when the rerun would produce the same kind of results, so
the first run records its **identity** and a rerun whose identity differs stops before anything
loads, with one line naming the differing fields and the fix (another ``--out``, or
``--resume-anyway`` to add to the directory all the same).

The identity is what changes a result of a given (task, trial):

- ``model``: the checkpoint (an absolute path for a local directory or .gguf, the hub id,
  ``embedded``), the endpoint (``URL#MODEL``) or ``gold``; ``model.files``: a digest of the
  names, sizes and modification times of a local checkpoint's files (a rewritten checkpoint at
  the same path differs); ``model.weights``: a digest of the tensors themselves
  (:mod:`unified.models.weights_digest`; also for ``embedded``, built first if it is not yet), by which ``--compare`` tells two
  runs of the same weights under different paths apart from a real comparison; ``backend``: the engine that ran it (``hf``, ``vllm``, ``openai``, ``gold``;
  ``--backend auto`` is recorded as what it chose, :mod:`unified.eval.engine`);
- ``prompting`` and ``prompting_options``, every ``sampling.*`` and ``limits.*`` key, ``split``;
- ``benchmarks.NAME``: the settings given to each benchmark (``--set benchmarks.NAME.KEY=...``).

The ``general`` suite keys its own records by model and lm-eval settings
(:func:`unified.eval.general.fingerprint`), so its options are not repeated here.

What only selects more or fewer tasks (``--limit``, ``--task-ids``, ``--runs``, which suites and
benchmarks) and how episodes are scheduled (``--max-in-flight``, ``--scheduling``) is not part of
it: a rerun with a larger ``--limit`` extends the run. A directory written before identities were
recorded (``run.json`` only) is compared on the fields its recorded config gives, then gets its
``identity.json``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from unified.benchmarks.discovery import adapter_class
from unified.config import from_dict, to_dict
from unified.eval.rundir import RunDirError
from unified.store import IDENTITY_FILE, WEIGHT_FILES, files_fingerprint, flatten_identity, identity_differences, \
    read_identity, write_json_atomic

RESUME_ANYWAY_FLAG = "--resume-anyway"


class IdentityMismatch(RunDirError):
    """A rerun on a run directory that holds results of another configuration (one line)."""


def model_identity(spec: str, backend: str | None, *, weights: bool = True) -> dict[str, Any]:
    """``model``, ``model.files`` (local checkpoints), ``model.weights`` (unless ``weights=False``: a
    ``--dry-run`` reads no tensors) and ``backend`` of a model spec."""
    from unified.inference.spec import parse_spec

    parsed = parse_spec(spec, backend=backend)
    out: dict[str, Any] = {"backend": parsed.backend}
    if parsed.kind in ("local", "gguf"):
        path = Path(parsed.target).resolve()
        out["model"] = str(path)
        out["model.files"] = files_fingerprint(path, WEIGHT_FILES)
        if weights:
            out["model.weights"] = _digest_or_none(path)
    elif parsed.kind == "embedded":
        from unified.models.embedded import ensure_embedded_checkpoint

        out["model"] = parsed.target
        if weights:  # builds it on first use, as loading the policy would a moment later
            out["model.weights"] = _digest_or_none(ensure_embedded_checkpoint())
    elif parsed.is_endpoint:
        out["model"] = f"{parsed.target}#{parsed.served_name}"
    elif parsed.kind == "gold":
        out["model"] = "gold"
    else:
        out["model"] = parsed.target
    return out


def _digest_or_none(path: Path) -> str | None:
    """The weights digest, or None (logged) for weights whose files cannot be read: loading them fails
    later with its own message; the identity records that the digest is unknown."""
    from unified.models.weights_digest import WeightsDigestError, weights_digest

    try:
        return weights_digest(path)
    except (OSError, WeightsDigestError) as exc:
        logging.getLogger(__name__).warning("no weights digest for %s: %s", path, exc)
        return None


def eval_identity(cfg: Any, benchmarks: list[str], *, policy_given: bool = False,
                  weights: bool = True) -> dict[str, Any]:
    """The record of ``cfg`` (an :class:`unified.eval.config.EvalConfig`): ``fields`` (flat, see the
    module docstring) and ``benchmarks`` (name -> settings given). ``policy_given``: the caller passed
    a live model to ``run_eval`` and ``cfg.model`` is only its label (nothing to resolve)."""
    from unified.eval.engine import choose_backend

    fields: dict[str, Any] = ({"backend": "given", "model": cfg.model} if policy_given
                              else dict(model_identity(cfg.model, choose_backend(cfg.model, cfg.backend).backend,
                                                       weights=weights)))
    fields["prompting"] = cfg.prompting
    fields["prompting_options"] = dict(cfg.prompting_options)
    fields["split"] = cfg.split
    fields.update(flatten_identity({"sampling": to_dict(cfg.sampling), "limits": to_dict(cfg.limits)}))
    settings = {name: dict(cfg.benchmark_config.get(name, {})) for name in benchmarks}
    return {"fields": fields, "benchmarks": settings, "sent": sent_settings(cfg, benchmarks)}


def sent_settings(cfg: Any, benchmarks: list[str]) -> dict[str, Any]:
    """Per benchmark, the sampling fields its agent actually puts in a policy request
    (:meth:`unified.benchmarks.contract.Adapter.sent_request_settings`); a benchmark whose adapter
    cannot be loaded here is ``None``. Recorded, not compared: ``fields`` holds the config."""
    out: dict[str, Any] = {}
    for name in benchmarks:
        try:
            hook = getattr(adapter_class(name), "sent_request_settings", None)
            out[name] = hook(dict(cfg.benchmark_config.get(name, {})), cfg.sampling) if hook else None
        except Exception:  # an adapter missing here (not installed, module:Class): nothing to say
            out[name] = None
    return out


def _has_results(out: Path) -> bool:
    return any(p.stat().st_size > 0 for p in out.glob("*/results.jsonl"))


def _recorded(out: Path, cfg_cls: type) -> dict[str, Any] | None:
    """The recorded identity, or one derived from an older directory's ``run.json`` (no ``model.files``)."""
    def from_run_json() -> dict[str, Any]:  # no run.json, or one this version cannot read: None
        old = from_dict(cfg_cls, json.loads((out / "run.json").read_text())["config"])
        from unified.inference.spec import parse_spec

        if old.backend is None and parse_spec(old.model).backend == "hf":
            old.backend = "hf"  # no backend recorded: such a run ran a bare checkpoint in-process
        record = eval_identity(old, list(old.benchmark_config))
        record["fields"].pop("model.files", None)
        record["fields"].pop("model.weights", None)  # the old run's weights are not known
        record["benchmarks"] = {}  # settings of benchmarks the old config did not name are unknown
        return record

    return read_identity(out, from_run_json)


def recorded_backend(out: str | Path, cfg_cls: type) -> str | None:
    """The engine (``backend`` field) of the results already in ``out``; None when it holds none."""
    out = Path(out)
    recorded = _recorded(out, cfg_cls) if _has_results(out) else None
    return (recorded or {}).get("fields", {}).get("backend")


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The differing fields of two identity records, in words (``"model gold -> /x/final"``)."""
    diffs = identity_differences(recorded.get("fields", {}), current["fields"])
    old_benchmarks = recorded.get("benchmarks", {})
    for name, settings in current["benchmarks"].items():
        if name in old_benchmarks and old_benchmarks[name] != settings:
            diffs.append(f"benchmarks.{name} {json.dumps(old_benchmarks[name], sort_keys=True)} -> "
                         f"{json.dumps(settings, sort_keys=True)}")
    return diffs


def recorded_weights(run: str | Path) -> str | None:
    """The ``model.weights`` digest recorded in a run directory's identity (None: not recorded)."""
    return ((read_identity(Path(run), lambda: None) or {}).get("fields") or {}).get("model.weights")


def weights_comparison(run_a: str | Path, run_b: str | Path) -> tuple[bool, str | None]:
    """``(identical, line)`` for ``--compare``: identical when both runs recorded the same ``model.weights``
    digest (the same tensors under two names, e.g. a warmup whose guard kept the start); a line saying so,
    or saying that a run recorded no digest; ``(False, None)`` when both are known and differ."""
    digests = [recorded_weights(run_a), recorded_weights(run_b)]
    if all(digests) and digests[0] == digests[1]:
        return True, (f"IDENTICAL WEIGHTS: A and B evaluated the same tensors (weights digest {digests[0]}); every "
                      "delta below is sampling, scheduling or numerics, not a difference between models.")
    unknown = [side for side, digest in zip("AB", digests) if not digest]
    if unknown:
        return False, (f"weights digest not recorded for {' and '.join(unknown)} (an endpoint, gold, pickled "
                       "weights or a run made before digests were recorded): whether the weights differ is not known.")
    return False, None


def _renamed(recorded: dict[str, Any] | None, renamed: dict[str, str] | None) -> dict[str, Any] | None:
    """``recorded`` with its benchmarks' settings keyed by their one name (``renamed``: ``{module:Class: name}``
    of the command's ``--benchmarks module:Class`` items; an identity recorded before one name per benchmark
    keyed them by that text)."""
    if not recorded or not renamed:
        return recorded
    return {**recorded, "benchmarks": {renamed.get(k, k): v for k, v in recorded.get("benchmarks", {}).items()}}


def dry_run_line(out: str | Path, cfg: Any, benchmarks: list[str], renamed: dict[str, str] | None = None) -> str:
    """What a run of ``cfg`` would do with ``out`` (for ``--dry-run``; writes nothing; ``renamed``:
    :func:`claim_run_dir`'s)."""
    out = Path(out)
    if not _has_results(out):
        return f"# --out {out}: new run directory"
    recorded = _renamed(_recorded(out, type(cfg)), renamed)
    diffs = differences(recorded, eval_identity(cfg, benchmarks, weights=False)) if recorded else []
    if diffs:
        return f"# --out {out}: would stop: it holds results of another run ({'; '.join(diffs)})"
    return f"# --out {out}: would resume (finished episodes are kept)"


def claim_run_dir(out: str | Path, cfg: Any, benchmarks: list[str], *, resume_anyway: bool = False,
                  policy_given: bool = False, renamed: dict[str, str] | None = None) -> list[str]:
    """Check ``cfg`` against the identity recorded in ``out`` and record it (merged with the
    benchmarks recorded before). Raises :class:`IdentityMismatch` when ``out`` holds results of
    another identity, unless ``resume_anyway``; returns the differences accepted (empty if none).
    ``renamed``: ``{module:Class: name}`` of the command's ``--benchmarks module:Class`` items: an identity
    recorded before one name per benchmark keyed their settings by that text; they are compared (and
    recorded again) under the name."""
    out = Path(out)
    current = eval_identity(cfg, benchmarks, policy_given=policy_given)
    recorded = _renamed(_recorded(out, type(cfg)), renamed) if _has_results(out) else None
    diffs = differences(recorded, current) if recorded else []
    if diffs and not resume_anyway:
        raise IdentityMismatch(
            f"holds results of another run ({'; '.join(diffs)}): give a new --out for this one, or rerun "
            f"with {RESUME_ANYWAY_FLAG} to add to it anyway (its summary then mixes both)")
    merged = {**(recorded or {}).get("benchmarks", {}), **current["benchmarks"]}
    history = list((recorded or {}).get("accepted_differences", []))
    if diffs:
        history.append({"at": time.time(), "differences": diffs})
    record = {"fields": current["fields"], "benchmarks": merged, "sent": current["sent"], "recorded_at": time.time()}
    if history:
        record["accepted_differences"] = history
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / IDENTITY_FILE, record)
    return diffs


def record_run_dir(out: str | Path, cfg: Any, benchmarks: list[str], *, resume_anyway: bool = False,
                   policy_given: bool = False, renamed: dict[str, str] | None = None) -> None:
    """The run directory's identity (:func:`claim_run_dir`, which may refuse) and ``run.json`` (the config
    of the engine that runs), at the start of a run, on the auto engine's fallback and for a merge."""
    out = Path(out)
    claim_run_dir(out, cfg, benchmarks, resume_anyway=resume_anyway, policy_given=policy_given, renamed=renamed)
    write_json_atomic(out / "run.json", {"config": to_dict(cfg), "sent": sent_settings(cfg, benchmarks),
                                         "updated_at": time.time()})
