"""The package's seams, checked over its source: who may import whom, where names live."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import pulsar_state
from pulsar_state.deploy import errors as deploy_errors
from pulsar_state.errors import PulsarStateError

LAUNCHER_ERRORS = (
    "BrokerError",
    "BrokerNotRunningError",
    "BrokerSetupError",
    "BrokerStartError",
    "FunctionNotReadyError",
    "PortInUseError",
    "PulsarAdminError",
)


def test_launcher_errors_live_with_the_launcher_under_the_one_root() -> None:
    for name in LAUNCHER_ERRORS:
        error = getattr(deploy_errors, name)
        assert issubclass(error, PulsarStateError), name
        assert error.__module__ == "pulsar_state.deploy.errors", name
        assert name not in pulsar_state.__all__, f"{name} is exported by the state core"
        assert not hasattr(pulsar_state.errors, name), f"{name} is in the core's error module"


# -- the import graph ----------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
#: folder -> the import package it is (setup.py's PACKAGE_DIRS)
FOLDERS = {
    "state": "pulsar_state",
    "functions": "pulsar_state.functions",
    "connectors": "pulsar_state.connectors",
    "deploy": "pulsar_state.deploy",
    "scheduling": "pulsar_state.scheduling",
}
#: folder -> sibling folders it must not import
FORBIDDEN = {
    "functions": ("connectors",),
    "connectors": ("functions",),
    "scheduling": ("functions", "connectors"),
}


def _sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (REPO / f).glob("**/*.py"))


def _imported(path: Path, package: str) -> set[str]:
    """Every module ``path`` imports (relative imports resolved against ``package``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _crossings(folder: str) -> list[str]:
    package = FOLDERS[folder]
    bad = []
    for path in _sources(folder):
        for module in sorted(_imported(path, package)):
            for other in FORBIDDEN[folder]:
                target = FOLDERS[other]
                if module == target or module.startswith(f"{target}."):
                    bad.append(f"{path.relative_to(REPO)} imports {module}")
    return bad


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_functions_and_connectors_do_not_import_each_other(folder: str) -> None:
    crossings = _crossings(folder)
    assert not crossings, "\n".join(crossings)


def test_the_import_check_sees_a_crossing(tmp_path: Path) -> None:
    """The check itself: absolute and relative imports of a sibling are both found."""
    source = tmp_path / "x.py"
    source.write_text(
        "from pulsar_state.connectors.sink import SinkFunction\nfrom ..connectors import sink\n"
    )
    found = _imported(source, "pulsar_state.functions")
    assert "pulsar_state.connectors.sink" in found
    assert "pulsar_state.connectors.sink" in {m for m in found if m.endswith("sink")}
    assert "pulsar_state.connectors" in found


# -- topic names are built in one place ----------------------------------------------

TOPIC_NAMES = REPO / "state" / "topic_names.py"
_SCHEME = "persistent://"
_STRING_CALLS = {"format", "replace", "removeprefix", "startswith", "split", "partition"}


def _str_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and _SCHEME in node.value


def _builds_a_name(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr):
        return any(_str_const(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _str_const(node.left) or _str_const(node.right)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _STRING_CALLS
        and (_str_const(node.func.value) or any(_str_const(a) for a in node.args))
    )


def _built_topic_names(path: Path) -> list[int]:
    """Lines of ``path`` that build or take apart a ``persistent://`` name.

    An f-string, a concatenation, ``.format`` or a string method with a
    ``persistent://`` literal; plain literals (docstrings, help texts,
    examples) are documentation and are allowed.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return sorted({node.lineno for node in ast.walk(tree) if _builds_a_name(node)})  # type: ignore[attr-defined]


def test_persistent_topic_names_are_built_only_in_topic_names() -> None:
    sources = [p for p in _sources(*FOLDERS, "bench") if p != TOPIC_NAMES]
    assert len(sources) > 50, "the scan found too few source files"
    built = [
        f"{path.relative_to(REPO)}:{line}" for path in sources for line in _built_topic_names(path)
    ]
    assert not built, "build topic names with pulsar_state.topic_names:\n" + "\n".join(built)


def test_the_topic_name_check_sees_a_built_name(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        '"""persistent://t/ns/x in a docstring is fine."""\n'
        'HELP = "persistent://t/ns/name or name"\n'
        'a = f"persistent://public/default/{name}"\n'
        'b = "persistent://" + name\n'
        'c = topic.removeprefix("persistent://")\n'
    )
    assert _built_topic_names(source) == [3, 4, 5]


# -- the layers of state/: each imports only its own and earlier ones ------------------

#: state/'s subpackages in the order they build on each other (docs/state.md,
#: *The layout*); the top-level modules (errors, serde, config, ...) are the base.
#: ``map`` and ``metadata`` stand side by side: neither imports the other.
LAYERS = {
    "base": 0,
    "cluster": 1,
    "core": 2,
    "map": 3,
    "metadata": 3,
    "coordination": 4,
    "aio": 5,
    "runtime": 6,
    "cli": 7,
    "testing": 7,
}
#: the application layers may use the product's other folders
APP_IMPORTS = {
    "cli": ("deploy", "functions", "connectors"),
    "testing": ("deploy",),
}
#: the core: generic in its state, no ``type: ignore`` (issue #25)
CORE = REPO / "state" / "core"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO / "state").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["pulsar_state", *parts])


def _layer(module: str) -> str | None:
    """The layer of a ``pulsar_state`` module; None for the package itself."""
    parts = module.split(".")
    if parts[0] != "pulsar_state" or len(parts) == 1:
        return None
    if parts[1] in LAYERS or parts[1] in FOLDERS.values() or parts[1] in APP_IMPORTS["cli"]:
        return parts[1]
    return "base"


def _layer_crossings(paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        me = _module_name(path)
        mine = _layer(me)
        if mine is None:  # pulsar_state/__init__.py re-exports every layer
            continue
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom | ast.Import):
                continue
            for module in _imported_by(node, package):
                theirs = _layer(module)
                if theirs is None:
                    bad.append(f"{me} imports the package root (import the module instead)")
                elif theirs in APP_IMPORTS.get(mine, ()):
                    continue
                elif (
                    theirs not in LAYERS
                    or LAYERS[theirs] > LAYERS[mine]
                    or (LAYERS[theirs] == LAYERS[mine] and theirs != mine)
                ):
                    bad.append(f"{me} [{mine}] imports {module} [{theirs}]")
    return bad


def _imported_by(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The ``pulsar_state`` modules one import statement names.

    ``from pulsar_state import forks`` names the module ``pulsar_state.forks``
    (every name imported from the package root here is a module).
    """
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("pulsar_state")]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parent = ".".join(parts[: len(parts) - node.level + 1])
        base = f"{parent}.{base}" if base else parent
    if base == "pulsar_state":
        return [f"pulsar_state.{a.name}" for a in node.names]
    return [base] if base.startswith("pulsar_state") else []


def test_each_layer_imports_only_its_own_and_earlier_ones() -> None:
    sources = _sources("state")
    assert len(sources) > 60, "the scan found too few source files"
    bad = _layer_crossings(sources)
    assert not bad, "\n".join(bad)


def test_the_layer_check_sees_a_crossing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: the core importing the map, the map importing the
    metadata store (side by side), and a relative import upward are found."""
    fake = tmp_path / "state"
    (fake / "core").mkdir(parents=True)
    (fake / "map").mkdir()
    (fake / "core" / "manager.py").write_text(
        "from pulsar_state.map.pulsar_map import PulsarMap\nfrom .. import errors\n"
    )
    (fake / "map" / "watch.py").write_text(
        "from pulsar_state.metadata.store import MetadataStore\n"
        "from pulsar_state.core import futures\nfrom ..cli import map\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    bad = _layer_crossings(sorted(fake.glob("**/*.py")))
    assert bad == [
        "pulsar_state.core.manager [core] imports pulsar_state.map.pulsar_map [map]",
        "pulsar_state.map.watch [map] imports pulsar_state.metadata.store [metadata]",
        "pulsar_state.map.watch [map] imports pulsar_state.cli [cli]",
    ]


def test_the_core_has_no_type_ignore() -> None:
    """Snapshots and checkpoints plug into the core through
    ``pulsar_state.core.accelerator``; before, the manager imported the map's
    checkpointer and needed ``type: ignore`` to hand it a generic state."""
    bad = [
        str(path.relative_to(REPO))
        for path in sorted(CORE.glob("**/*.py"))
        if "type: ignore" in path.read_text(encoding="utf-8")
    ]
    assert not bad, "type: ignore in the core: " + ", ".join(bad)


def test_no_two_test_files_share_a_name() -> None:
    """The test folders are not packages, so pytest imports each test file by its
    basename: two of one name (a unit and an integration test) stop the whole
    session at collection ("import file mismatch"), as a clean-clone CI run found."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").glob("**/test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test files sharing a name: {clashes}"


# -- module size ---------------------------------------------------------------------

#: issue #25: one concept per file, and no module over this many lines
MAX_MODULE_LINES = 600


def _oversized(paths: list[Path], root: Path = REPO) -> dict[str, int]:
    sizes = {
        str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines()) for p in paths
    }
    return {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}


def test_no_module_is_over_600_lines() -> None:
    paths = [*_sources(*FOLDERS, "bench"), REPO / "pyspark_pulsar_state.py"]
    assert _oversized(paths) == {}


def test_the_size_check_sees_a_long_module(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    assert _oversized([long, short], tmp_path) == {"long.py": MAX_MODULE_LINES + 1}
