"""Prompt sources: built-in procedural tasks, benchmark / training files, and prompt templates.

Importing this package is cheap (no torch, no datasets, no pyarrow until a file is read).
"""

from hadw.data.answers import after_hashes, extract_answer, last_boxed
from hadw.data.files import BENCHMARKS, iter_rows, load_benchmark, load_dataset_file
from hadw.data.hub import HUB_BENCHMARKS, HubDataset
from hadw.data.layouts import LAYOUTS, PAPER_SUFFIX, FieldMap, Layout, detect_layout, get_layout, user_fields
from hadw.data.problem import DatasetError, Problem, with_system_prompt
from hadw.data.sources import (
    EVAL_SEED_OFFSET,
    Recipe,
    SourceSpec,
    default_data_dir,
    default_data_dirs,
    default_recipe,
    download,
    load_problems,
    make_fields,
    split_held_out,
)
from hadw.data.tasks import TASKS, Task, TaskStream, column_operations, get_task, make_task, sample_problems
from hadw.data.templates import TEMPLATES, fill_template, render_prompt

__all__ = [
    "BENCHMARKS",
    "EVAL_SEED_OFFSET",
    "HUB_BENCHMARKS",
    "LAYOUTS",
    "PAPER_SUFFIX",
    "TASKS",
    "TEMPLATES",
    "DatasetError",
    "FieldMap",
    "HubDataset",
    "Layout",
    "Problem",
    "Recipe",
    "SourceSpec",
    "Task",
    "TaskStream",
    "after_hashes",
    "column_operations",
    "default_data_dir",
    "default_data_dirs",
    "default_recipe",
    "detect_layout",
    "download",
    "extract_answer",
    "fill_template",
    "get_layout",
    "get_task",
    "iter_rows",
    "last_boxed",
    "load_benchmark",
    "load_dataset_file",
    "load_problems",
    "make_fields",
    "make_task",
    "render_prompt",
    "sample_problems",
    "split_held_out",
    "user_fields",
    "with_system_prompt",
]
