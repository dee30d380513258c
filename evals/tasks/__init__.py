"""Task suites: generated agent trajectories with probes, stored as versioned HF datasets.

Public surface::

    from evals.tasks import build_suite, load_suite
    info = build_suite("default")                 # ~/.cache/akv-rsi/suites/default-v2 (AKV_CACHE_DIR honoured)
    tasks = load_suite("default", "train")        # list[Task]; also a path to a JSON-lines file or saved dataset
    t = tasks[0]; p = t.probes[0]
    t.context(p)                                  # messages 0..p.after_message
    p.question, p.cloze_prefix, p.answer, p.candidates, p.evidence_ids

See docs/tasks.md for the schema and the families.
"""

from evals.tasks.families import FAMILIES as FAMILY_REGISTRY
from evals.tasks.generator import (
    GENERATOR,
    GENERATOR_VERSION,
    SUITES,
    SuiteSpec,
    check_generated,
    generate_split,
    generate_task,
    get_suite_spec,
)
from evals.tasks.horizon import HORIZON_FAMILIES, HORIZON_SUITES, HorizonSpec, generate_horizon_task
from evals.tasks.measure import FamilySummary, measure, summarize, token_counter
from evals.tasks.mixed import MIXED_SUITES, MixedSpec, generate_mixed_task
from evals.tasks.schema import FAMILIES, Probe, Task, mentions, message_text
from evals.tasks.selection import select_tasks
from evals.tasks.storage import SuiteInfo, build_suite, load_suite, save_jsonl, suite_dir, suites_root
from evals.tasks.templates import ProbeTemplates, Wording, load_probe_templates

__all__ = [
    "FAMILIES",
    "FAMILY_REGISTRY",
    "GENERATOR",
    "GENERATOR_VERSION",
    "HORIZON_FAMILIES",
    "HORIZON_SUITES",
    "MIXED_SUITES",
    "SUITES",
    "FamilySummary",
    "HorizonSpec",
    "MixedSpec",
    "Probe",
    "ProbeTemplates",
    "SuiteInfo",
    "SuiteSpec",
    "Task",
    "Wording",
    "build_suite",
    "check_generated",
    "generate_horizon_task",
    "generate_mixed_task",
    "generate_split",
    "generate_task",
    "get_suite_spec",
    "load_probe_templates",
    "load_suite",
    "measure",
    "mentions",
    "message_text",
    "save_jsonl",
    "select_tasks",
    "suite_dir",
    "suites_root",
    "summarize",
    "token_counter",
]
