"""What the worker runs: records read as specs, code loaded as Pulsar's Python runtime loads it."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Any, cast

import pytest

from pulsar_state.errors import ConfigurationError
from pulsar_state.functions.function_code import load_function
from pulsar_state.functions.function_spec import FunctionSpec
from pulsar_state.functions.metadata_manager import RequestError, validate_config

CLASS_FILE = """
from pulsar import Function

class Shout(Function):
    closed = []

    def process(self, input, context):
        return input.upper() + context.get_user_config_value("suffix")

    def close(self):
        Shout.closed.append(True)
"""


class _Context:
    def get_user_config_value(self, key: str) -> Any:
        return {"suffix": "!"}.get(key)


def test_a_py_file_class_gets_the_context_and_is_closed(tmp_path: Path) -> None:
    (tmp_path / "shout_fn.py").write_text(CLASS_FILE)
    loaded = load_function("shout_fn.Shout", str(tmp_path / "shout_fn.py"), tmp_path)
    assert loaded.process("hi", _Context()) == "HI!"
    assert loaded.process_message is None
    loaded.close()
    assert type(cast(Any, loaded.process).__self__).closed == [True]
    assert "shout_fn" not in sys.modules  # loaded in a namespace of its own


def test_a_plain_function_gets_the_input_only(tmp_path: Path) -> None:
    (tmp_path / "plain_fn.py").write_text("def double(x):\n    return x * 2\n")
    loaded = load_function("plain_fn.double", str(tmp_path / "plain_fn.py"), tmp_path)
    assert loaded.process(21, object()) == 42


def test_a_zip_package_in_the_package_layout(tmp_path: Path) -> None:
    package = tmp_path / "zipped.zip"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("zipped/src/zipped_fn.py", "def echo(x):\n    return x\n")
    loaded = load_function("zipped_fn.echo", str(package), tmp_path / "work")
    assert loaded.process("same", None) == "same"


def test_an_installed_module_and_the_stateful_kit(tmp_path: Path) -> None:
    loaded = load_function("pulsar_state.functions.wordcount_entry.WordCount", None, tmp_path)
    assert callable(loaded.process) and callable(loaded.close)


@pytest.mark.parametrize(
    ("class_name", "py"),
    [
        ("noDot", None),
        ("no_such_module_xyz.F", None),
        ("json.NoSuchName", None),
        ("json.JSONDecodeError", None),  # a class without process
        ("shout_fn.Shout", "/no/such/file.py"),
        ("other.Shout", "FILE"),  # the module is not the file
    ],
)
def test_what_cannot_be_loaded_is_a_configuration_error(
    tmp_path: Path, class_name: str, py: str | None
) -> None:
    (tmp_path / "shout_fn.py").write_text(CLASS_FILE)
    if py == "FILE":
        py = str(tmp_path / "shout_fn.py")
    with pytest.raises(ConfigurationError):
        load_function(class_name, py, tmp_path)


def test_a_record_is_read_as_a_spec() -> None:
    record = {
        "version": 3,
        "config": {
            "className": "m.C",
            "inputs": ["a", "b"],
            "parallelism": 2,
            "processingGuarantees": "EFFECTIVELY_ONCE",
            "userConfig": {"k": 1},
        },
    }
    spec = FunctionSpec.from_record("t/ns/f", record)
    assert (spec.tenant, spec.namespace, spec.name, spec.version) == ("t", "ns", "f", 3)
    assert spec.inputs == ("a", "b") and spec.user_config == {"k": 1}
    assert spec.subscription == "t/ns/f"
    assert spec.in_order  # EFFECTIVELY_ONCE: a failover subscription
    plain = FunctionSpec.from_record("t/ns/f", {"config": {"className": "m.C", "inputs": ["a"]}})
    assert not plain.in_order and plain.subscription_position == "Latest"
    with pytest.raises(ValueError, match="className"):
        FunctionSpec.from_record("t/ns/f", {"config": {"inputs": ["a"]}})


@pytest.mark.parametrize(
    "bad",
    [
        {"processingGuarantees": "SOMETIMES"},
        {"retainOrdering": "yes"},
        {"subscriptionPosition": "Middle"},
        {"py": ""},
        {"subscriptionName": 3},
    ],
)
def test_the_worker_fields_are_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(RequestError):
        validate_config({"className": "m.C", "inputs": ["a"], **bad})


# -- each function's code in its own namespace ----------------------------------------------


def _wordcount(tag: str, helper: bool = False) -> str:
    """A ``wordcount.py`` whose ``Fn`` tags its output (through a ``helpers`` module)."""
    if helper:
        return (
            "import helpers\n\nclass Fn:\n    def process(self, input, context):\n"
            "        return helpers.tag(input)\n"
        )
    return f"class Fn:\n    def process(self, input, context):\n        return '{tag}:' + input\n"


def _zip(path: Path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(f"{path.stem}/src/{name}", text)
    return str(path)


def test_two_zip_packages_with_one_module_name_each_run_their_own(tmp_path: Path) -> None:
    first = _zip(tmp_path / "first.zip", {"wordcount.py": _wordcount("first")})
    second = _zip(tmp_path / "second.zip", {"wordcount.py": _wordcount("second")})
    work = tmp_path / "work"
    one = load_function("wordcount.Fn", first, work, owner="public/default/one")
    two = load_function("wordcount.Fn", second, work, owner="public/default/two")
    assert (one.process("x", None), two.process("x", None)) == ("first:x", "second:x")
    assert one.process("y", None) == "first:y"  # the first is not replaced by the second


def test_two_py_files_with_one_name_each_run_their_own(tmp_path: Path) -> None:
    paths = []
    for tag in ("left", "right"):
        (tmp_path / tag).mkdir()
        paths.append(tmp_path / tag / "wordcount.py")
        paths[-1].write_text(_wordcount(tag))
    one = load_function("wordcount.Fn", str(paths[0]), tmp_path, owner="t/n/one")
    two = load_function("wordcount.Fn", str(paths[1]), tmp_path, owner="t/n/two")
    assert (one.process("x", None), two.process("x", None)) == ("left:x", "right:x")


def test_the_same_package_for_two_functions_gives_each_its_own_module(tmp_path: Path) -> None:
    (tmp_path / "counter_mod.py").write_text(
        "calls = []\n\ndef count(x):\n    calls.append(x)\n    return len(calls)\n"
    )
    py = str(tmp_path / "counter_mod.py")
    one = load_function("counter_mod.count", py, tmp_path, owner="t/n/one")
    again = load_function("counter_mod.count", py, tmp_path, owner="t/n/one")
    two = load_function("counter_mod.count", py, tmp_path, owner="t/n/two")
    assert [one.process("a", None), again.process("b", None), two.process("c", None)] == [1, 2, 1]


def test_a_new_package_of_a_function_loads_the_new_code(tmp_path: Path) -> None:
    work = tmp_path / "work"
    package = tmp_path / "wc.zip"
    _zip(package, {"wordcount.py": _wordcount("v1")})
    before = load_function("wordcount.Fn", str(package), work, owner="t/n/f")
    package.unlink()
    _zip(package, {"wordcount.py": _wordcount("v2")})  # the same path, a new content
    after = load_function("wordcount.Fn", str(package), work, owner="t/n/f")
    assert (before.process("x", None), after.process("x", None)) == ("v1:x", "v2:x")
    py = tmp_path / "wordcount.py"
    py.write_text(_wordcount("p1"))
    assert load_function("wordcount.Fn", str(py), work, owner="t/n/g").process("x", None) == "p1:x"
    py.write_text(_wordcount("p2"))  # rewritten in place, at once (same size, same second)
    assert load_function("wordcount.Fn", str(py), work, owner="t/n/g").process("x", None) == "p2:x"


def test_each_package_imports_its_own_sibling_module(tmp_path: Path) -> None:
    work = tmp_path / "work"
    loaded = []
    for tag in ("north", "south"):
        helpers = f"def tag(x):\n    return '{tag}:' + x\n"
        files = {"wordcount.py": _wordcount(tag, helper=True), "helpers.py": helpers}
        package = _zip(tmp_path / f"{tag}.zip", files)
        loaded.append(load_function("wordcount.Fn", package, work, owner=f"t/n/{tag}"))
    assert [f.process("x", None) for f in loaded] == ["north:x", "south:x"]
    assert "helpers" not in sys.modules
