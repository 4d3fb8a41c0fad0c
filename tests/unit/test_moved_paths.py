"""Modules that moved into subpackages keep their old import paths for one release."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import pulsar_state
from pulsar_state.moved import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_gives_the_new_module_with_a_deprecation_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    # the module keeps its own identity: pickling, reloads and tools see the new path
    assert module.__name__ == new
    assert module.__spec__ is not None
    assert module.__spec__.name == new


def test_every_moved_path_is_gone_from_the_tree_and_its_new_one_exists() -> None:
    state = Path(pulsar_state.__file__).resolve().parent
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        assert not (state / f"{old.rsplit('.', 1)[1]}.py").exists(), f"{old} is still a file"


def test_from_an_old_path_import_a_name_works_in_a_fresh_process() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    from pulsar_state.metadata_state import InvalidPathError\n"
        "except DeprecationWarning as w:\n"
        "    print('warned', w)\n"
        "warnings.simplefilter('ignore')\n"
        "from pulsar_state.metadata_state import InvalidPathError\n"
        "from pulsar_state.metadata.tree import InvalidPathError as New\n"
        "assert InvalidPathError is New\n"
        "from pulsar_state.pulsar_map import PulsarMap\n"
        "import pulsar_state\n"
        "assert PulsarMap is pulsar_state.PulsarMap\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "warned pulsar_state.metadata_state moved to pulsar_state.metadata.tree" in done.stdout
    assert done.stdout.strip().endswith("ok")


def test_unknown_paths_still_fail_as_usual() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("pulsar_state.no_such_module")
