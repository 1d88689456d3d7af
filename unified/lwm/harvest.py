"""Harvest world-model samples from real environments, and regenerate the shipped dataset.

    python -m unified.lwm.harvest --out data/lwm                 # the shipped data, bit for bit
    python -m unified.lwm.harvest --out DIR --terminal 100 --mcp 200 --seed 1
    python -m unified.lwm.harvest --out DIR --episodes runs/x [--domain mcp]   # an eval run dir or JSONL

Sources: terminal sessions in the bubblewrap sandbox (:mod:`unified.lwm.harvest_terminal`),
function calls against bfcl-eval's executable backends (:mod:`unified.lwm.harvest_mcp`), and
saved agent Episodes of the eval (:func:`records_from_episodes`), so the eval feeds the warmup.
Output: one ``<domain>.jsonl`` per domain plus ``MANIFEST.json`` (counts, settings, sha256 of
each file), all written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from pathlib import Path

from unified.config import ArgumentParser
from unified.lwm.prompts import build_system_prompt
from unified.lwm.records import DOMAINS, AWBRecord, trajectory_records, write_records
from unified.store import write_text_atomic
from unified.benchmarks.discovery import world_model_domain
from unified.lwm.harvest_mcp import harvest_mcp
from unified.lwm.harvest_terminal import harvest_terminal
from unified.types import Episode

SHIPPED_SEED = 0
SHIPPED_TERMINAL = 48
SHIPPED_MCP = 60

def benchmark_domain(benchmark: str) -> str | None:
    """The world-model domain an eval benchmark's episodes belong to: what its adapter declares
    (``Adapter.world_model_domain``), None when the adapter declares none or is not installed."""
    return world_model_domain(benchmark)


def episode_files(path: str | os.PathLike[str]) -> list[Path]:
    """``path`` itself for a file; for an eval run directory (``--out`` of ``python -m unified.eval``)
    every ``<benchmark>/episodes.jsonl`` in it, sorted; for one benchmark's directory its ``episodes.jsonl``."""
    path = Path(path)
    if path.is_dir():
        found = [path / "episodes.jsonl"] if (path / "episodes.jsonl").is_file() else sorted(path.glob("*/episodes.jsonl"))
        if not found:
            raise ValueError(f"{path}: no <benchmark>/episodes.jsonl (is it an eval run directory?)")
        return found
    return [path]


def records_from_episodes(path: str | os.PathLike[str], domain: str | None = None) -> list[AWBRecord]:
    """World-model records from saved agent Episodes (``unified.types.Episode`` JSONL, or an eval
    run directory: every benchmark's ``episodes.jsonl`` in it).

    The domain is ``domain`` when given, else the one the episodes' benchmark adapter declares.
    Every step that made tool calls is a turn: the action is the calls, one JSON object
    ``{"name", "arguments"}`` a line; the observation is the environment's answers, in call
    order, separated by blank lines. Steps without calls (final answers) are skipped;
    crashed episodes (``error`` set) and episodes without any call are left out.
    """
    records: list[AWBRecord] = []
    domains: dict[str, str | None] = {}
    for file in episode_files(path):
        records += _records_from_file(file, domain, domains)
    return records


def _records_from_file(path: Path, domain: str | None, domains: dict[str, str | None]) -> list[AWBRecord]:
    records: list[AWBRecord] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                episode = Episode.from_row(json.loads(line), where=f"{path}:{lineno}")
            except (json.JSONDecodeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: not an Episode record: {exc}") from None
            if episode.error:
                continue
            if domain is None and episode.benchmark not in domains:
                domains[episode.benchmark] = benchmark_domain(episode.benchmark)
            dom = domain or domains[episode.benchmark]
            if dom not in DOMAINS:
                declared = f"declares {dom!r}, not a domain" if dom else "declares no world-model domain"
                raise ValueError(f"{path}:{lineno}: benchmark {episode.benchmark!r} {declared} (its adapter's "
                                 f"world_model_domain); pass --domain (one of {', '.join(DOMAINS)})")
            actions, observations = [], []
            for step in episode.steps:
                if not step.tool_calls:
                    continue
                actions.append("\n".join(json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
                                         for c in step.tool_calls))
                observations.append("\n\n".join(o.content for o in step.observations))
            if not actions:
                continue
            first_user = next((m.content for m in episode.messages if m.role == "user"), "")
            system = build_system_prompt(dom, task=first_user,
                                         action_space="Tools: " + ", ".join(t.name for t in episode.tools))
            traj = re.sub(r"[^\w.\-]+", "_", f"{episode.benchmark}-{episode.task_id}-{episode.trial}")
            records += trajectory_records(dom, traj, system, actions, observations)
    return records


def write_dataset(out: str | os.PathLike[str], records: list[AWBRecord], settings: dict) -> dict:
    """Write ``<domain>.jsonl`` files and ``MANIFEST.json``; return the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    by_domain: dict[str, list[AWBRecord]] = defaultdict(list)
    for r in records:
        by_domain[r.task].append(r)
    files = {}
    for dom in sorted(by_domain):
        path = out / f"{dom}.jsonl"
        write_records(path, by_domain[dom])
        files[path.name] = {"records": len(by_domain[dom]),
                            "trajectories": len({r.id for r in by_domain[dom]}),
                            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    manifest = {"format": "AgentWorldBench JSONL (unified.lwm.records)", "settings": settings, "files": files,
                "regenerate": "python -m unified.lwm.harvest " + " ".join(
                    f"--{k} {v}" for k, v in settings.items() if k != "episodes" and v is not None)}
    write_text_atomic(out / "MANIFEST.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def harvest(out: str | os.PathLike[str], *, seed: int = SHIPPED_SEED, terminal: int = SHIPPED_TERMINAL,
            mcp: int = SHIPPED_MCP, episodes: list[str] | None = None, domain: str | None = None) -> dict:
    """Harvest every source and write the dataset; returns the manifest."""
    records: list[AWBRecord] = []
    if terminal:
        records += harvest_terminal(terminal, seed)
    if mcp:
        records += harvest_mcp(mcp, seed)
    for path in episodes or []:
        records += records_from_episodes(path, domain)
    settings = {"seed": seed, "terminal": terminal, "mcp": mcp}
    if episodes:
        settings["episodes"] = list(episodes)
    return write_dataset(out, records, settings)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m unified.lwm.harvest", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory (one <domain>.jsonl per domain)")
    parser.add_argument("--seed", type=int, default=SHIPPED_SEED)
    parser.add_argument("--terminal", type=int, default=SHIPPED_TERMINAL, help="terminal trajectories")
    parser.add_argument("--mcp", type=int, default=SHIPPED_MCP, help="function-calling trajectories")
    parser.add_argument("--episodes", action="append", default=[],
                        help="saved Episode JSONL or an eval run directory (repeatable)")
    parser.add_argument("--domain", choices=DOMAINS, default=None,
                        help="domain of --episodes (else the one each benchmark's adapter declares)")
    args = parser.parse_args(argv)
    manifest = harvest(args.out, seed=args.seed, terminal=args.terminal, mcp=args.mcp, episodes=args.episodes,
                       domain=args.domain)
    for name, info in manifest["files"].items():
        print(f"{args.out}/{name}: {info['records']} records, {info['trajectories']} trajectories")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
