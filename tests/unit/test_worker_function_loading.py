"""What the worker runs: records read as specs, code loaded as Pulsar's Python runtime loads it."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Any

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
    assert sys.modules["shout_fn"].Shout.closed == [True]


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
