"""World-model (next-state prediction) data: the AgentWorldBench format, domain prompts, the
RL dataset, harvesting from real environments, and the world-model eval.

Regenerate the shipped dataset with ``python -m unified.lwm.harvest --out data/lwm``; evaluate a
world model with ``python -m unified.lwm.evaluation --model SPEC --judge SPEC --data DIR --out DIR``.
"""

from unified.lwm.dataset import fit_prompt, rl_dataset, rl_rows, sample_one_turn_per_trajectory, to_chat
from unified.lwm.prompts import (
    GUI_DOMAINS,
    SYSTEM_PROMPTS,
    build_system_prompt,
    domain_prompt,
    format_observation,
    is_gui,
)
from unified.lwm.records import (
    DOMAINS,
    FIELDS,
    AWBRecord,
    RecordError,
    data_files,
    dumps_record,
    load_records,
    read_records,
    trajectory_records,
    validate_record,
    write_records,
)

__all__ = [
    "DOMAINS", "FIELDS", "GUI_DOMAINS", "SYSTEM_PROMPTS", "AWBRecord", "RecordError", "build_system_prompt",
    "data_files", "domain_prompt", "dumps_record", "fit_prompt", "format_observation", "is_gui", "load_records",
    "read_records", "rl_dataset", "rl_rows", "sample_one_turn_per_trajectory", "to_chat", "trajectory_records",
    "validate_record", "write_records",
]
