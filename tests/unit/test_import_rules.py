"""The layer rules of docs/architecture.md §1, read from the source: every `import` and `from ... import` of every
module under src/wattsched (inside functions and `if TYPE_CHECKING:` blocks too) must point at a layer the
importing layer may use. A failure names the module, the line and the import that breaks a rule."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "wattsched"

# Layer -> the other layers of wattsched it may import (its own layer and the root package, which holds only
# __version__, always allowed). docs/architecture.md §1 states the same rules in words.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "data": frozenset({"core"}),
    "energy": frozenset({"core", "data"}),
    "perf": frozenset({"core", "data", "energy"}),
    "workloads": frozenset({"core", "data", "energy", "perf"}),
    "agent": frozenset({"core"}),
    "profiling": frozenset({"core", "perf", "agent"}),
    "policies": frozenset({"core", "energy", "perf", "workloads"}),
    "engine": frozenset({"core", "energy", "perf", "policies"}),
    "backends": frozenset({"core", "energy", "perf", "workloads", "policies", "agent", "profiling"}),
    "experiments": frozenset({"core", "data", "energy", "perf", "workloads", "policies", "engine"}),
    "cli": frozenset(
        {
            "core",
            "data",
            "energy",
            "perf",
            "workloads",
            "agent",
            "profiling",
            "policies",
            "engine",
            "backends",
            "experiments",
        }
    ),
}

# Of policies/, the engine imports only the contract and the one validator of actions: it knows the contract,
# never a specific policy.
ENGINE_MAY_IMPORT = ("wattsched.policies.contract", "wattsched.policies.validation")
# The contract (and its validator) import no policy module: they are what the policies implement.
CONTRACT_MODULES = ("wattsched.policies.contract", "wattsched.policies.validation")
# Single modules allowed beyond their layer's rule, each with its reason.
EXCEPTIONS: dict[str, frozenset[str]] = {
    # The sim-to-live check runs the simulator on the live run's jobs (docs/live-slurm.md §5).
    "wattsched.backends.simcheck": frozenset({"engine"}),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return ""  # the root package
    if parts[-1] == "__main__":
        return "cli"  # `python -m wattsched.<pkg>` is a command line entry point, as cli/ is
    return parts[1]


def _is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every wattsched import in the file; `from wattsched.policies import
    contract` counts as an import of wattsched.policies.contract."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "wattsched"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                target = ".".join(
                    parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else [])
                )
            else:
                target = node.module or ""
            if target.split(".")[0] != "wattsched":
                continue
            subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            out += [(node.lineno, sub) for sub in subs] or [(node.lineno, target)]
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        layer = layer_of(module)
        if not layer:
            continue
        where = f"src/{path.relative_to(SRC).as_posix()}"
        for line, target in imports_of(path):
            to = target.split(".")[1] if "." in target else ""
            if (
                module in CONTRACT_MODULES
                and to == "policies"
                and target not in (*CONTRACT_MODULES, "wattsched.policies")
            ):
                found.append(
                    f"{where}:{line}: {module} imports {target}: the contract imports no policy module"
                )
            if to in ("", layer):
                continue
            allowed = ALLOWED[layer] | EXCEPTIONS.get(module, frozenset())
            if to not in allowed:
                found.append(
                    f"{where}:{line}: {module} imports {target}: layer '{layer}' may import only "
                    f"{', '.join(sorted(allowed)) or 'nothing of wattsched'} (docs/architecture.md §1)"
                )
            elif layer == "engine" and to == "policies" and target not in ENGINE_MAY_IMPORT:
                found.append(
                    f"{where}:{line}: {module} imports {target}: of policies/ the engine imports only "
                    f"{' and '.join(ENGINE_MAY_IMPORT)} (docs/architecture.md §1)"
                )
    return found


def test_every_layer_imports_only_what_it_may():
    found = violations()
    assert not found, "imports against the layer rules:\n" + "\n".join(found)


def test_every_layer_has_a_rule():
    layers = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert layers <= set(ALLOWED), (
        f"no import rule for {sorted(layers - set(ALLOWED))}: add one here and in §1"
    )


def test_the_rules_catch_a_bad_import(tmp_path, monkeypatch):
    """A policy that imports the engine is reported with its module, line and import."""
    pkg = tmp_path / "wattsched"
    for d in (pkg / "policies", pkg / "engine"):
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "temporal.py").write_text("")
    (pkg / "policies" / "bad.py").write_text("import math\n\nfrom ..engine.temporal import Simulator\n")
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    assert violations() == [
        "src/wattsched/policies/bad.py:3: wattsched.policies.bad imports wattsched.engine.temporal: layer 'policies' "
        "may import only core, energy, perf, workloads (docs/architecture.md §1)"
    ]
