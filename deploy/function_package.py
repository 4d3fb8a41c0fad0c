"""Self-contained Pulsar Functions zip packages (``pulsar-state package``).

A worker's Python runtime unpacks ``--py <name>.zip`` next to itself and puts
``<name>/src`` first on ``sys.path`` (Pulsar's ``python_instance_main``). So a
package carries, under ``src/``, the function's single-file entry point, this
project's code and every dependency it imports, installed by pip for the
workers' Python (``--python-version``/``--platform``; default: this
interpreter). Nothing runs pip on the worker and nothing is fetched there.

``pulsar-client`` is left out on purpose: the runtime has imported its own
copy before it loads the function, so a second one could only be shadowed or
clash. The ``deps/`` folder of Pulsar's zip format is not used for the same
reason: the worker installs those wheels with ``--no-index``, which fails for a
package that requires ``pulsar-client`` unless its wheel is shipped too.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from packaging.requirements import Requirement

from pulsar_state.errors import ConfigurationError

__all__ = ["DISTRIBUTION", "build_function_package", "runtime_requirements"]

DISTRIBUTION = "pulsar-shared-state"
#: provided by the functions runtime itself (see the module docstring)
_PROVIDED = frozenset({"pulsar-client"})


def runtime_requirements(extras: Iterable[str] = ()) -> list[str]:
    """This distribution's requirements for ``extras``, minus what the runtime provides."""
    wanted = set(extras)
    out = []
    for spec in importlib.metadata.requires(DISTRIBUTION) or []:
        req = Requirement(spec)
        if req.name.lower() in _PROVIDED:
            continue
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": extra}) for extra in wanted or {""}
        ):
            continue
        req.marker = None
        out.append(str(req))
    return out


def _copy_own_code(dest: Path) -> None:
    """This project's package, as installed.

    An editable install is a tree of links made at install time: for each of
    its folders, every module of the linked source folder is taken, so a
    module added since the install is not left out.
    """
    source = Path(str(resources.files("pulsar_state")))
    target = dest / "pulsar_state"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for folder in [source, *(p for p in source.rglob("*") if p.is_dir())]:
        linked = next((f for f in folder.glob("*.py") if f.is_symlink()), None)
        if linked is None:
            continue
        out = target / folder.relative_to(source)
        for module in linked.resolve().parent.glob("*.py"):
            if not (out / module.name).exists():
                shutil.copy2(module, out / module.name)


def _pip_install(
    target: Path, requirements: list[str], *, python_version: str | None, platform: str | None
) -> None:
    if not requirements:
        return
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(target),
    ]
    if python_version or platform:  # another interpreter: wheels only, as pip requires
        cmd += ["--only-binary=:all:"]
        if python_version:
            cmd += ["--python-version", python_version]
        if platform:
            cmd += ["--platform", platform]
    try:
        proc = subprocess.run(
            [*cmd, *requirements], capture_output=True, text=True, check=False, timeout=900
        )
    except subprocess.TimeoutExpired as exc:
        raise ConfigurationError(
            f"pip did not install the function's dependencies within {exc.timeout:.0f} s"
        ) from exc
    if proc.returncode != 0:
        raise ConfigurationError(
            f"pip could not install the function's dependencies ({' '.join(requirements)}):\n"
            f"{proc.stderr.strip()[-2000:]}"
        )
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: not importable code


def build_function_package(
    *,
    name: str,
    entry: Path,
    out_dir: Path,
    extras: Iterable[str] = (),
    python_version: str | None = None,
    platform: str | None = None,
) -> Path:
    """Build ``out_dir/<name>.zip`` (Pulsar's layout: ``<name>/src/...``); its path."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigurationError(f"a package name is a plain file name, got {name!r}")
    if not entry.is_file() or entry.suffix != ".py":
        raise ConfigurationError(f"a function entry point is a .py file, got {entry}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pss-package-") as tmp:
        src = Path(tmp) / name / "src"
        src.mkdir(parents=True)
        _pip_install(
            src, runtime_requirements(extras), python_version=python_version, platform=platform
        )
        _copy_own_code(src)
        shutil.copy2(entry, src / entry.name)
        target = out_dir / f"{name}.zip"
        partial = target.with_suffix(".zip.partial")
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
                for path in sorted(Path(tmp).rglob("*")):
                    if path.is_file() and "__pycache__" not in path.parts:
                        zf.write(path, path.relative_to(tmp).as_posix())
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    return target
