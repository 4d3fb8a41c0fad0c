"""``pulsar-state package``: a function's zip runs on a bare Pulsar Python runtime.

No broker needed: the worker-side part is checked by unpacking the zip the way
Pulsar's ``python_instance_main`` does and importing the entry point in a
Python that sees nothing but the standard library, ``pulsar-client`` (which the
runtime provides) and the zip's ``src``. Deploying zips onto a real worker is
``test_deploy``'s job.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pulsar_state.deploy.function_package import build_function_package, runtime_requirements
from pulsar_state.deploy.functions_deploy import _entry
from pulsar_state.errors import ConfigurationError


@pytest.fixture(scope="module")
def manager_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packages")
    return build_function_package(
        name="function-metadata-manager",
        entry=_entry("metadata_manager_entry.py"),
        out_dir=out,
    )


def _runtime_only_pulsar_client(dest: Path) -> Path:
    """A folder with links to pulsar-client's top-level files only."""
    dest.mkdir()
    site = Path(importlib.metadata.distribution("pulsar-client").locate_file(""))
    for name in {str(f).split("/")[0] for f in importlib.metadata.files("pulsar-client") or []}:
        if not name.endswith(".dist-info"):
            (dest / name).symlink_to(site / name)
    # pulsar-client's own requirement, which the runtime has too
    certifi = Path(importlib.metadata.distribution("certifi").locate_file("certifi"))
    (dest / "certifi").symlink_to(certifi)
    return dest


def test_the_zip_has_pulsars_layout_and_leaves_the_runtime_out(manager_zip: Path) -> None:
    names = zipfile.ZipFile(manager_zip).namelist()
    assert manager_zip.name == "function-metadata-manager.zip"
    assert all(n.startswith("function-metadata-manager/src/") for n in names)
    src = "function-metadata-manager/src/"
    assert f"{src}metadata_manager_entry.py" in names
    assert f"{src}pulsar_state/__init__.py" in names
    assert f"{src}pulsar_state/functions/metadata_manager.py" in names
    assert any(n.startswith(f"{src}tenacity/") for n in names)
    assert not any(n.startswith((f"{src}pulsar/", f"{src}bin/")) for n in names)
    assert not any("__pycache__" in n for n in names)
    # every module of the source folders (an editable install links files: one
    # added since the install must not be left out)
    repo = Path(__file__).resolve().parents[2]
    for folder, package in (("state", ""), ("functions", "functions/"), ("deploy", "deploy/")):
        for module in (repo / folder).glob("*.py"):
            assert f"{src}pulsar_state/{package}{module.name}" in names, module


def test_the_entry_point_imports_from_the_zip_alone(manager_zip: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(manager_zip) as zf:
        zf.extractall(tmp_path)
    src = tmp_path / "function-metadata-manager" / "src"
    runtime = _runtime_only_pulsar_client(tmp_path / "runtime")
    probe = (
        "import sys\n"
        f"sys.path[:0] = [{str(src)!r}, {str(runtime)!r}]\n"
        "import pulsar, metadata_manager_entry as entry, pulsar_state\n"
        f"assert pulsar_state.__file__.startswith({str(src)!r}), pulsar_state.__file__\n"
        "assert issubclass(entry.FunctionMetadataManager, pulsar.Function)\n"
        "import tenacity, prometheus_client, requests\n"
        "print('ok', len(sys.path))\n"
    )
    # -S: no site-packages; -I: no PYTHONPATH, no user site, no cwd
    proc = subprocess.run(
        [sys.executable, "-S", "-I", "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok")


def test_requirements_leave_out_pulsar_client_and_follow_extras() -> None:
    base = runtime_requirements()
    names = [r.split("<")[0].split(">")[0].split("[")[0] for r in base]
    assert "pulsar-client" not in names and "tenacity" in names
    assert not any(r.startswith("psycopg") for r in base)
    assert any(r.startswith("psycopg") for r in runtime_requirements(["postgres"]))


def test_bad_package_input_is_a_clear_error(tmp_path: Path) -> None:
    entry = _entry("metadata_manager_entry.py")
    with pytest.raises(ConfigurationError, match="plain file name"):
        build_function_package(name="../x", entry=entry, out_dir=tmp_path)
    with pytest.raises(ConfigurationError, match=r"\.py file"):
        build_function_package(name="x", entry=tmp_path / "missing.py", out_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="pip could not install"):
        build_function_package(
            name="x", entry=entry, out_dir=tmp_path, python_version="2.1", platform="nowhere"
        )
