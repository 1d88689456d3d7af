"""WideSearch's official table metrics: success rate, F1 by row, F1 by item.

Paper: Wong et al., "WideSearch: Benchmarking Agentic Broad Info-Seeking", 2025
(arXiv:2508.07999); semantics follow its released evaluator (``src/evaluation``).

Given the gold table G (rows g, required columns C, key columns K ⊆ C) and the agent's table R
(the first Markdown table of its final answer; column names normalised by
``lower().strip()`` minus spaces; duplicate keys dropped in both):

1. every column's ``preprocess`` steps run on both tables (``norm_str``, ``extract_number``,
   ``norm_date``);
2. rows are matched on equal keys (inner join on K);
3. for a matched row and a non-key column c, ``s(row, c) ∈ {0, 1}`` by the column's metric
   (``exact_match``, ``number_near`` with relative tolerance ``criterion``, ``date_near``
   within 31 days, ``url_match`` on host names, ``in_match``, ``llm_judge``); key columns
   score 1;
4. ``TP_item = Σ_rows Σ_c s``, ``TP_row = Σ_rows min_c s``;
   ``P_item = TP_item / (|R|·|C|)``, ``R_item = TP_item / (|G|·|C|)``, likewise by row with
   ``|R|`` and ``|G|``; ``F1 = 2PR / (P + R)`` (0 when P + R = 0);
5. success = 1 when the sorted tables are equal or every P/R/F1 is 1.

Cells are compared as the official evaluator sees them under the pandas it was released with
(2.x): both tables are read with pandas' default missing-value detection and every cell becomes
``str(value)``, so a blank cell is the string ``"nan"`` on both sides (a blank gold cell matches
a blank answer cell). Under pandas 3, ``astype(str)`` keeps missing values as NaN, which the
string metrics cannot take; :func:`as_official_str` restores the released behaviour.

``llm_judge`` columns and the semantic alignment of keys and column names need an LLM judge
(``judge`` callable: prompt -> text), asked with the official prompts when a WideSearch checkout
supplies them (:mod:`.official`). Without a judge, keys and names align only when equal after
normalisation and ``llm_judge`` cells are compared with ``norm_str`` equality; the result then
says so. Dates are parsed with ``dateparser`` (the official evaluator's parser, a dependency), with
``PREFER_DAY_OF_MONTH = first`` as there.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from io import StringIO
from typing import Any, Callable
from urllib.parse import urlparse

import pandas as pd

from unified.chatformat.scan import NextMatch
from unified.text import DATA_RULE, fence_data

Judge = Callable[[str], str]


def norm_column(name: str) -> str:
    return str(name).strip().lower().replace(" ", "")


# -- preprocessing -------------------------------------------------------------------------


def extract_number(content: Any) -> str:
    numbers = re.findall(r"[-+]?\d*\.\d+%?|[-+]?\d+\.?\d*%?", str(content).replace(",", ""))
    return numbers[0] if numbers else "NULL"


def norm_str(content: Any) -> str:
    return str(content).lower().strip().replace(" ", "").replace("*", "")


def parse_date(text: Any) -> datetime | None:
    """A date from free text, as the official evaluator parses it (``dateparser``, day defaults to 1)."""
    import dateparser

    try:
        return dateparser.parse(str(text), settings={"PREFER_DAY_OF_MONTH": "first"})
    except Exception:  # the official date_near treats a parser error as "not a date"
        return None


def norm_date(content: Any) -> str:
    import dateparser

    parsed = dateparser.parse(content, settings={"PREFER_DAY_OF_MONTH": "first"})
    return parsed.strftime("%Y-%m-%d") if parsed else content


def as_official_str(series: pd.Series) -> pd.Series:
    """Cells as the released evaluator's ``astype(str)`` gave them under pandas 2: missing -> ``"nan"``."""
    return series.map(lambda v: "nan" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)).astype(object)


PREPROCESS = {"extract_number": extract_number, "norm_str": norm_str, "norm_date": norm_date}


# -- cell metrics ----------------------------------------------------------------------------


def exact_match(response: str, target: str, criterion: Any = None) -> float:
    return 1.0 if response.lower() == target.lower() else 0.0


def in_match(response: str, target: str, criterion: Any = None) -> float:
    return 1.0 if response in target else 0.0


def url_match(response: str, target: str, criterion: Any = None) -> float:
    pattern = re.compile(r"http[s]?://(?:[a-zA-Z]|[0-9]|[$-_@.&+]|[!*\\(\\),]|(?:%[0-9a-fA-F][0-9a-fA-F]))+")
    hosts = lambda text: {urlparse(u).netloc for u in pattern.findall(text)}  # noqa: E731
    return 1.0 if hosts(response) == hosts(target) else 0.0


def _number(text: str) -> float | None:
    try:
        return float(text.replace("%", "")) / 100.0 if "%" in text else float(text)
    except (TypeError, ValueError):
        return None


def number_near(response: str, target: str, criterion: Any = 0.0) -> float:
    r, t = _number(response), _number(target)
    if r is None or t is None:
        return 1.0 if r is None and t is None and response == target else 0.0
    return 1.0 if abs(r - t) <= abs(t) * float(criterion or 0.0) else 0.0


def date_near(response: str, target: str, criterion: Any = None) -> float:
    r, t = parse_date(response), parse_date(target)
    if r is None or t is None:
        return 1.0 if r is None and t is None else 0.0
    return 1.0 if abs((r - t).days) <= 31 else 0.0


METRICS = {"exact_match": exact_match, "in_match": in_match, "url_match": url_match, "number_near": number_near,
           "date_near": date_near}


# -- response table ---------------------------------------------------------------------------


def extract_table(response: str) -> pd.DataFrame | None:
    """The first Markdown table of ``response`` (a ```markdown block, else any pipe table)."""
    blocks = re.findall(r"```markdown(.*?)```", response, re.S)
    if not blocks:
        pipes = [m.start() for m in re.finditer(r"\|", response)]
        if len(pipes) >= 4:
            start = response.rfind("\n", 0, pipes[0])
            end = response.find("\n", pipes[-1])
            candidate = response[0 if start == -1 else start:len(response) if end == -1 else end]
            blocks = re.findall(r"((?:\|.*\n?)+)", candidate)
    if not blocks:
        return None
    lines = [line.strip() for line in blocks[0].strip().split("\n")]
    if not lines:
        return None
    lines[0] = lines[0].replace(" ", "").lower()
    rows = ["|".join(cell.strip() for cell in line.split("|")) for line in lines
            if "|" in line and not set(line).issubset(set("|- :"))]
    if not rows:
        return None
    try:  # the official reader: pandas' default type and missing-value inference
        df = pd.read_csv(StringIO("\n".join(rows)), sep="|")
    except (pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    return df.loc[:, ~df.columns.str.startswith("Unnamed")]


# -- evaluation -------------------------------------------------------------------------------


@dataclass
class TableScore:
    """One answer's scores (all in 0..1)."""

    score: float = 0.0
    precision_by_row: float = 0.0
    recall_by_row: float = 0.0
    f1_by_row: float = 0.0
    precision_by_item: float = 0.0
    recall_by_item: float = 0.0
    f1_by_item: float = 0.0
    msg: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 1e-9 else 0.0


_JSON_FENCE_END = re.compile(r"\}\s*```")
_SPACES = re.compile(r"\s*")


def _markdown_json(text: str | None) -> dict | None:
    """The last ```json {...}``` object of a judge's answer, or None."""
    match = _last_json_fence(text or "")
    try:
        value = json.loads(match) if match is not None else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _last_json_fence(text: str) -> str | None:
    """The last match of ``re.findall(r"```json\\s*(\\{.*?\\})\\s*```", text, re.S)``, found in linear
    time (that lazy regex is quadratic on an answer of many ```json openers)."""
    opens, ends = NextMatch("```json", text), NextMatch(_JSON_FENCE_END, text)
    last, pos = None, 0
    while (start := opens.find(pos)) >= 0:
        brace = _SPACES.match(text, start + len("```json")).end()
        if not text.startswith("{", brace):
            pos = start + 1
            continue
        end = ends.search(brace + 1)
        if end is None:  # no closer after this opener, so none after a later one either
            break
        last, pos = text[brace:end.start() + 1], end.end()
    return last


def _align_prompt(values: list[str], reference: list[str]) -> str:
    """Our alignment prompt (no checkout): both lists fenced as data, the answer format last."""
    return ("Align two vocabularies by meaning (not position). For each value of the first list that denotes "
            "the same entity as a value of the reference list, map it to that reference value.\n\n"
            f"Values:\n{fence_data(json.dumps(values, ensure_ascii=False, default=str), 'values')}\n"
            f"Reference:\n{fence_data(json.dumps(reference, ensure_ascii=False, default=str), 'reference')}\n\n"
            f"{DATA_RULE}\nAnswer with a ```json object {{\"value\": \"reference value\"}}``` and nothing else.")


def _column_prompt(criterion: Any, pairs: dict[str, Any]) -> str:
    """Our column-grading prompt (no checkout): the pairs fenced as data, the answer format last."""
    return ("Grade each response against its target under the criterion; each score is 0 or 1.\n\n"
            f"Criterion:\n{criterion}\n\n"
            f"Pairs:\n{fence_data(json.dumps(pairs, ensure_ascii=False, default=str), 'pairs')}\n\n"
            f"{DATA_RULE}\nAnswer with a ```json object {{\"idx_0\": score, ...}}```.")


def _zero_one(value: Any) -> float:
    """A judge's cell score as 0..1: a number clipped to [0, 1]; not a number, or not finite, is 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    value = float(value)
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


def _align(values: list[str], reference: list[str], judge: Judge | None, prompt: str | None = None) -> dict[str, Any]:
    """Map response strings onto reference strings (the official primary-key/column alignment; {} without a judge)."""
    if judge is None:
        return {}
    try:
        answer = judge(prompt.format(response=values, reference=reference) if prompt else
                       _align_prompt(values, reference))
    except Exception:  # the official evaluator maps nothing when the LLM call fails
        return {}
    return _markdown_json(answer) or {}


def _judge_column(responses: list[str], targets: list[str], criterion: Any, judge: Judge | None,
                  prompt: str | None = None) -> list[float]:
    if judge is None:
        return [1.0 if norm_str(r) == norm_str(t) else 0.0 for r, t in zip(responses, targets)]
    pairs = {f"idx_{i}": {"response": r, "target": t} for i, (r, t) in enumerate(zip(responses, targets))}
    try:
        scores = _markdown_json(judge(prompt.format(criterion=criterion, response=pairs) if prompt else
                                      _column_prompt(criterion, pairs)))
    except Exception:
        scores = None
    if scores is None:  # official: a failed or unparsable judge answer scores the column 0
        return [0.0] * len(responses)
    # a score is 0 or 1: one of 5, -3, NaN or Infinity would push F1 past 1 or poison it
    return [_zero_one(scores.get(f"idx_{i}", 0)) for i in range(len(responses))]


def evaluate_table(response: str, gold: pd.DataFrame, evaluation: dict[str, Any],
                   judge: Judge | None = None, prompts: dict[str, str] | None = None) -> TableScore:
    """Score the final answer ``response`` against the gold table (see the module docstring).

    ``prompts``: the official ``primary_key_preprocess_prompt`` and ``eval_column_prompt`` texts
    (from a WideSearch checkout); without them the judge gets this module's own wording.
    """
    prompts = prompts or {}
    align_prompt, column_prompt = prompts.get("primary_key_preprocess_prompt"), prompts.get("eval_column_prompt")
    required = [norm_column(c) for c in evaluation["required"]]
    keys = [norm_column(c) for c in evaluation["unique_columns"]]
    pipeline = {norm_column(k): v for k, v in evaluation.get("eval_pipeline", {}).items()}
    answer = gold.copy()
    answer.columns = [norm_column(c) for c in answer.columns]
    answer = answer[required].apply(as_official_str)
    table = extract_table(response)
    if table is None:
        return TableScore(msg="no Markdown table in the answer")
    table.columns = [norm_column(c) for c in table.columns]
    if set(table.columns) != set(required):
        table = table.rename(columns=_align(list(table.columns), required, judge, align_prompt))
    if set(table.columns) != set(required):
        return TableScore(msg=f"columns {list(table.columns)} != required {required}")
    table = table[required].apply(as_official_str)
    table = table.drop_duplicates(subset=keys)
    answer = answer.drop_duplicates(subset=keys)
    for col in keys:
        metrics = pipeline.get(col, {}).get("metric", [])
        if "llm_judge" in metrics or "exact_match" in metrics:
            mapping = _align(table[col].tolist(), answer[col].tolist(), judge, align_prompt)
            table[col] = table[col].map(lambda x: mapping.get(x, x))
    for col, item in pipeline.items():
        for name in item.get("preprocess", []):
            fn = PREPROCESS[name]
            table[col] = table[col].map(fn)
            answer[col] = answer[col].map(fn)
    success = 0.0
    if answer.shape == table.shape:
        a = answer.sort_values(by=required).reset_index(drop=True)
        t = table.sort_values(by=required).reset_index(drop=True)
        success = 1.0 if a.equals(t) else 0.0
    inner = pd.merge(answer, table, on=keys, how="inner", suffixes=("_query", "_response"))
    scores = pd.DataFrame(index=inner.index)
    for col in required:
        if col in keys:
            scores[f"{col}_key"] = 1.0
            continue
        item = pipeline.get(col, {"metric": ["exact_match"]})
        for name in item.get("metric", []):
            resp, targ = inner[f"{col}_response"].tolist(), inner[f"{col}_query"].tolist()
            if name == "llm_judge":
                values = _judge_column(resp, targ, item.get("criterion"), judge, column_prompt)
            else:
                values = [METRICS[name](r, t, item.get("criterion")) for r, t in zip(resp, targ)]
            scores[f"{col}_{name}"] = values
    tp_row = float(scores.min(axis=1).sum()) if len(scores) else 0.0
    tp_item = float(scores.sum().sum()) if len(scores) else 0.0
    n_pred, n_gold, n_cols = len(table), len(answer), len(required)
    p_row = tp_row / n_pred if n_pred else 0.0
    r_row = tp_row / n_gold if n_gold else 0.0
    p_item = tp_item / (n_pred * n_cols) if n_pred else 0.0
    r_item = tp_item / (n_gold * n_cols) if n_gold else 0.0
    out = TableScore(success, p_row, r_row, _f1(p_row, r_row), p_item, r_item, _f1(p_item, r_item),
                     msg=f"matched rows {len(inner)}/{n_gold}, answer rows {n_pred}")
    if min(p_row, r_row, out.f1_by_row, p_item, r_item, out.f1_by_item) == 1.0:
        out.score = 1.0
    return out
