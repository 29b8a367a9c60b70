"""The floors of the house: a module never imports a higher floor (docs/library.md).

    core, theory, data (+ floor-0 helpers)  <  rewards, rollout, integrations  <  eval  <  train  <  experiments, sim
    integrations (the TRL / verl adapters) import core only; every `cli` module is the top floor.

Every import in src/hadw is checked, including those inside functions (lazy imports are still dependencies).
And no import circle, inside a floor too: a module never imports, through any chain, a module that imports it
(a circle works only in the order Python happens to meet it, and hides which module is the bottom).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hadw"

FLOORS = {
    "hadw": 0,  # the package itself (version) and floor-0 helpers: hadw.errors, hadw.plotting, hadw.metrics
    "core": 0,
    "theory": 0,
    "data": 0,
    "rewards": 1,
    "rollout": 1,
    "eval": 2,
    "train": 3,
    "experiments": 4,
    "sim": 4,
    "integrations": 1,  # the TRL / verl adapters: core (and the floor-0 helpers) only; the engines import them
    "cli": 6,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor(module: str) -> int:
    """The floor of a dotted module name under hadw; `*.cli` modules are commands: the top floor."""
    parts = module.split(".")
    if parts[-1] == "cli" or (parts[-1] == "__main__" and parts[1:2] != ["integrations"]):
        return FLOORS["cli"]
    if len(parts) == 1 or parts[1] not in FLOORS:
        return 0  # hadw, hadw.errors, hadw.plotting, ...: plain helpers that import nothing above them
    return FLOORS[parts[1]]


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) for every `import hadw...` / `from hadw... import names` in the file, resolved to
    modules; names are empty for `import hadw.x`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "hadw"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against the package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "hadw":
                found.append((node.lineno, module, [a.name for a in node.names]))
    return found


def _violations() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        name = _module_name(path)
        for line, target, _ in _imports(path):
            if name.startswith("hadw.integrations") and floor(name) != FLOORS["cli"]:
                allowed = target == "hadw" or target.startswith(("hadw.core", "hadw.integrations", "hadw.errors"))
                if not allowed:
                    bad.append(f"{path.relative_to(SRC.parent)}:{line}: integrations import only hadw.core: {target}")
            elif name.endswith(".cli") and name != "hadw.cli" and floor(target) < FLOORS["cli"]:
                # a package's command runs that package: it may import its own floor and below, not above
                own = FLOORS.get(name.split(".")[1], 0)
                if floor(target) > own:
                    bad.append(
                        f"{path.relative_to(SRC.parent)}:{line}: {name} (a command of floor {own}) imports {target} "
                        f"(floor {floor(target)})"
                    )
            elif floor(target) > floor(name):
                bad.append(
                    f"{path.relative_to(SRC.parent)}:{line}: {name} (floor {floor(name)}) imports {target} "
                    f"(floor {floor(target)})"
                )
    return bad


def test_no_module_imports_a_higher_floor():
    assert _violations() == []


@pytest.mark.parametrize(
    "module, expected",
    [
        ("hadw.core.anchors", 0),
        ("hadw.rollout.engine", 1),
        ("hadw.eval.evaluate", 2),
        ("hadw.train.trainer", 3),
        ("hadw.experiments.compare", 4),
        ("hadw.eval.cli", 6),
        ("hadw.cli", 6),
        ("hadw.plotting", 0),
    ],
)
def test_floor_of_modules(module, expected):
    assert floor(module) == expected


def test_checker_catches_an_upward_import(tmp_path, monkeypatch):
    """The walk finds a lazy (function-level) upward import: the test above can fail."""
    pkg = tmp_path / "hadw" / "core"
    pkg.mkdir(parents=True)
    (tmp_path / "hadw" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text("def f():\n    from hadw.train.trainer import Trainer\n    return Trainer\n")
    (pkg / "ok.py").write_text("from . import bad\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path / "hadw")
    assert len(_violations()) == 1 and "hadw.core.bad (floor 0) imports hadw.train.trainer" in _violations()[0]


def test_a_command_does_not_import_above_its_package(tmp_path, monkeypatch):
    """hadw.eval.cli once imported hadw.experiments.plots for the probe's figure: caught as a violation."""
    pkg = tmp_path / "hadw" / "eval"
    pkg.mkdir(parents=True)
    (tmp_path / "hadw" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("def f():\n    from hadw.experiments.plots import plot_probe\n    return plot_probe\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path / "hadw")
    assert len(_violations()) == 1 and "hadw.eval.cli (a command of floor 2)" in _violations()[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the hadw modules it imports (at the top, inside a function, or under TYPE_CHECKING). `from P import
    n` is an edge to the submodule P.n when there is one, else to P (its __init__). A submodule's implicit import
    of its parent package is not an edge: every package's __init__ re-exporting its modules would be a circle."""
    modules = {_module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for _, module, names in _imports(path):
            subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            if subs:
                targets.update(subs)
            if module in modules and len(subs) < len(names or [None]):  # a name that is not a submodule
                targets.add(module)
        graph[name] = targets - {name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a -> b -> ... -> a) per strongly connected group of modules (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(_circle_through(min(group), group, graph) for group in groups)


def _circle_through(start: str, group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest path start -> ... -> start inside group (breadth first): the circle the message names."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a strongly connected group without a circle through it")


def test_no_import_circle():
    circles = import_circles(import_graph())
    assert circles == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_import_graph_sees_the_moved_modules():
    """The graph reads what the circle test needs: the bottoms the three old circles were broken onto, reached
    from the modules above them (a graph that missed edges would pass the circle test by seeing nothing)."""
    graph = import_graph()
    assert {"hadw.train.config_schema", "hadw.train.config_yaml", "hadw.train.config_checks"} <= graph[
        "hadw.train.config"
    ]
    assert "hadw.train.config_schema" in graph["hadw.train.config_yaml"] & graph["hadw.train.config_checks"]
    assert "hadw.rewards.scores" in graph["hadw.rewards.base"] & graph["hadw.rewards.pool"]
    assert "hadw.rewards.pool" in graph["hadw.rewards.base"]  # a function-level import
    assert "hadw.rewards.verifiers" in graph["hadw.rewards.base"]  # `from hadw.rewards import verifiers`
    assert "hadw.sim.arms" in graph["hadw.sim.engine"] & graph["hadw.sim.softmax"]


@pytest.mark.parametrize(
    "home, bottom",
    [
        ("hadw.train.config", "hadw.train.config_schema"),
        ("hadw.rewards.base", "hadw.rewards.scores"),
        ("hadw.sim.engine", "hadw.sim.arms"),
    ],
)
def test_names_moved_down_still_import_from_their_old_home(home, bottom):
    """Breaking a circle moved names to a lower module; each public one it defines is still the same object at its
    old path (`from hadw.train.config import Config` all over src, tests, benchmarks and users' code)."""
    import importlib

    tree = ast.parse((SRC.parent / (bottom.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    defined += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    new_names = {"item_failure"}  # base's private _failure, public once two modules share it; base still has _failure
    public = [n for n in defined if not n.startswith("_") and n not in new_names]
    old, new = importlib.import_module(home), importlib.import_module(bottom)
    assert len(public) >= 5
    assert [n for n in public if getattr(old, n, None) is not getattr(new, n)] == []


def _plant(root: Path, files: dict[str, str]) -> None:
    """A package `hadw` under root with these files (paths relative to hadw/), every folder a package."""
    for rel, text in files.items():
        path = root / "hadw" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == root:
                break
            (folder / "__init__.py").touch()
        path.write_text(text)


def test_circle_check_catches_a_planted_circle(tmp_path, monkeypatch):
    """A three-module circle closed by a function-level `from . import` (as config.py's lazy imports closed
    theirs), a two-module one through a package's __init__, and a chain without a circle: two circles found."""
    _plant(
        tmp_path,
        {
            "train/config.py": "from hadw.train.config_checks import validate\n",
            "train/config_checks.py": "from hadw.train.config_yaml import load\ndef validate():\n    pass\n",
            "train/config_yaml.py": "def load():\n    from . import config\n    return config\n",
            "rewards/__init__.py": "from hadw.rewards.base import score\n",
            "rewards/base.py": "def score():\n    import hadw.rewards.pool\n",
            "rewards/pool.py": "from hadw.rewards import score\n",  # the package's name, not a submodule
            "core/a.py": "from hadw.core import b\n",
            "core/b.py": "import hadw.errors\n",
            "errors.py": "",
        },
    )
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path / "hadw")
    assert import_circles(import_graph()) == [
        ["hadw.rewards", "hadw.rewards.base", "hadw.rewards.pool", "hadw.rewards"],
        ["hadw.train.config", "hadw.train.config_checks", "hadw.train.config_yaml", "hadw.train.config"],
    ]
    with pytest.raises(AssertionError, match="hadw.train.config -> hadw.train.config_checks"):
        test_no_import_circle()


def test_core_imports_with_torch_and_numpy_alone():
    """`pip install hadw` (torch + numpy) is enough for hadw.core inside someone else's trainer."""
    import subprocess
    import sys

    code = """
import importlib.abc, sys
BLOCKED = {"transformers", "scipy", "matplotlib", "datasets", "typer", "rich", "omegaconf", "math_verify", "trl"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import hadw.core, torch
from hadw.core import apply_hadw, compute_advantages, make_anchor
r = torch.tensor([1.0, 0.0, 0.0, 0.0])
adv = compute_advantages(r, torch.zeros(4, dtype=torch.long), "grpo")
out = apply_hadw(adv.advantages, r, adv.groups, make_anchor("window", k=10), 1.3)
print(round(float(out.advantages[0]), 4))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(result.stdout.strip()) > 0  # the correct answer of a hard group keeps a positive advantage


MAX_MODULE_LINES = 650  # a module a newcomer reads in one sitting; past it, a part belongs in a module of its own


def test_no_module_is_longer_than_a_sitting():
    """Every src/hadw module fits MAX_MODULE_LINES (the trainer grew to 961 lines before it was split by concern)."""
    src = Path(__file__).resolve().parents[1] / "src" / "hadw"
    long = {
        str(p.relative_to(src)): n
        for p in src.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"
