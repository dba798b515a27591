"""The run path's imports point one way (issue 27): zoo.parse (the command line of zoo.inference) -> zoo.launch and
zoo.inference -> zoo.ir.pipeline, zoo.retrieval, zoo.augment -> zoo.stages -> zoo.train, and no model, dataset or
other zoo module imports any of them (but the package's ``zoo.load``, the public door to zoo.inference). Imports
inside functions count too: a lazy import still ties the lower module to the higher one."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# rank: a module may import only run-path modules of a lower rank
RUN_PATH = {"zoo.parse": 4, "zoo.launch": 3, "zoo.inference": 3, "zoo.ir.pipeline": 2, "zoo.retrieval": 2,
            "zoo.augment": 2, "zoo.stages": 1, "zoo.train": 0}
ALLOWED = {("zoo", "zoo.inference")}  # zoo.load imports it when called: ``import zoo`` stays light


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` anywhere in the file names, with ``from a import b`` also
    counted as ``a.b`` and relative imports made absolute."""
    names, package = set(), module_name(path).split(".")[:None if path.name == "__init__.py" else -1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def test_the_run_path_imports_point_one_way():
    sources = [p for folder in ("zoo", "models", "datamodules") for p in (ROOT / folder).rglob("*.py")]
    assert {module_name(p) for p in sources} >= set(RUN_PATH)
    upward = []
    for path in sources:
        name = module_name(path)
        rank = RUN_PATH.get(name, -1)  # every other module is below the whole run path
        upward += [f"{name} imports {other}" for other in sorted(imported(path) & set(RUN_PATH))
                   if other != name and RUN_PATH[other] >= rank and (name, other) not in ALLOWED]
    assert upward == []


def test_the_import_scan_sees_lazy_and_relative_imports():
    assert "zoo.stages" in imported(ROOT / "zoo" / "ir" / "pipeline.py")  # at the top
    assert {"zoo.train", "zoo.train.RunConfigError"} <= imported(ROOT / "zoo" / "retrieval.py")  # in a function
    assert "zoo.formalisms.base" in imported(ROOT / "zoo" / "formalisms" / "geobase.py")  # from .base import
