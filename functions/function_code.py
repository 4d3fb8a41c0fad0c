"""Loading a function's code as Pulsar's Python runtime does: :func:`load_function`.

``className`` is ``module.Class`` (or ``module.function``). The module comes
from the code package (``py``):

* a ``.py`` file: loaded from that file under the module's name (its folder is
  put on ``sys.path`` too, for its own imports);
* a ``.zip``: unpacked into the worker's work folder; its ``<name>/src``
  folder (the layout ``pulsar-state package`` builds and Pulsar's runtime
  reads) or its top folder goes on ``sys.path``;
* none: the module is imported from the worker's own ``sys.path`` (the
  packaged functions, ``pulsar_state.functions...``).

What is loaded: a class is instantiated once per instance and its
``process(input, context)`` called (a ``pulsar.Function`` or any class with
that method); a plain function is called as ``fn(input)``, without the context,
as Pulsar's runtime calls one. A class with ``process_message`` (the stateful
kit) is called through that instead: it gives the committed output and its
properties. An instance's ``close()``, when it has one,
is called when the instance stops (the stateful kit closes its map there).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pulsar_state.errors import ConfigurationError

__all__ = ["LoadedFunction", "load_function"]


@dataclass(frozen=True)
class LoadedFunction:
    """One instance's function: ``process(input, context) -> output``, and its ``close``."""

    process: Callable[[Any, Any], Any]
    close: Callable[[], Any]
    #: the stateful kit's ``process_message(input, context)``: the committed output
    #: (``value``, ``properties``), which a redelivery gives again
    process_message: Callable[[Any, Any], Any] | None = None


_lock = threading.Lock()  # sys.path and sys.modules are the process's


def _on_path(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _unpacked(package: Path, work_dir: Path) -> Path:
    """The folder that goes on ``sys.path`` for a ``.zip`` package."""
    target = work_dir / f"{package.stem}-{package.stat().st_mtime_ns}"
    if not target.exists():
        partial = target.with_name(target.name + ".partial")
        with zipfile.ZipFile(package) as archive:
            archive.extractall(partial)
        partial.rename(target)
    src = target / package.stem / "src"
    return src if src.is_dir() else target


def _module(module_name: str, py: str | None, work_dir: Path) -> ModuleType:
    if py is None:
        return importlib.import_module(module_name)
    package = Path(py.removeprefix("file://")).expanduser()
    if not package.is_file():
        raise ConfigurationError(f"code package {py!r} is not a file on this worker")
    if package.suffix == ".zip":
        _on_path(_unpacked(package, work_dir))
        return importlib.import_module(module_name)
    if package.suffix != ".py":
        raise ConfigurationError(f"code package {py!r}: a .py file or a .zip")
    if package.stem != module_name.split(".", maxsplit=1)[0]:
        raise ConfigurationError(
            f"className's module {module_name!r} is not the file {package.name!r}"
        )
    _on_path(package.parent)
    spec = importlib.util.spec_from_file_location(module_name, package)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot load {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # the file as it is now (an update may change it)
    spec.loader.exec_module(module)
    return module


def load_function(class_name: str, py: str | None, work_dir: Path) -> LoadedFunction:
    """The function ``class_name`` names, ready to call as ``(input, context)``.

    Raises:
        ConfigurationError: the package, module or name is not found, or the
            name is neither a class with ``process`` nor a function.
    """
    module_name, _, attribute = class_name.rpartition(".")
    if not module_name or not attribute:
        raise ConfigurationError(f"className is module.Class, got {class_name!r}")
    try:
        with _lock:
            found = getattr(_module(module_name, py, work_dir), attribute)
    except ConfigurationError:
        raise
    except Exception as exc:  # an import error, or the module's own code failing
        raise ConfigurationError(f"cannot load {class_name}: {exc!r}") from exc
    if isinstance(found, type):
        try:
            instance = found()
        except Exception as exc:  # its __init__ needs arguments, or fails
            raise ConfigurationError(f"cannot make a {class_name}: {exc!r}") from exc
        process = getattr(instance, "process", None)
        if not callable(process):
            raise ConfigurationError(f"{class_name} has no process(input, context) method")
        close = getattr(instance, "close", None)
        committed = getattr(instance, "process_message", None)
        return LoadedFunction(
            process,
            close if callable(close) else lambda: None,
            committed if callable(committed) else None,
        )
    if callable(found):
        return LoadedFunction(lambda input, _context: found(input), lambda: None)
    raise ConfigurationError(f"{class_name} is neither a class nor a function")
