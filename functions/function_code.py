"""Loading a function's code as Pulsar's Python runtime does: :func:`load_function`.

``className`` is ``module.Class`` (or ``module.function``). The module comes
from the code package (``py``):

* a ``.py`` file: that file, as it is now;
* a ``.zip``: unpacked into the worker's work folder (one folder per package
  content); its ``<name>/src`` folder (the layout ``pulsar-state package``
  builds and Pulsar's runtime reads) or its top folder holds the module;
* none: the module is imported from the worker's own ``sys.path`` (the
  packaged functions, ``pulsar_state.functions...``).

An uploaded package (``package: pss://sha256/<hex>``) or a ``py`` URL is first
fetched into the worker's package cache
(:mod:`~pulsar_state.functions.package_cache`); this module loads the local file.

**Each function's code loads in its own namespace.** Pulsar runs each instance
in its own process; a worker here runs many functions in one, and a module
name (``wordcount``) of one function's package must not give another
function, or a newer package of the same function, the module loaded first.
So a package's module is loaded under a name of its own,
``_pss_code_<key>.<module>``, where the key is a digest of the function's fqn
(``owner``) and the package's content: two functions whose files are both
``wordcount.py`` get two modules, an update with a new package loads the new
code, and the instances of one function on one package share one module. The
package's folder is also put first on ``sys.path`` for the code's own
absolute imports (``import helpers``, as Pulsar's runtime allows); a module
such an import loads from the package's folder is dropped from
``sys.modules`` once the function is loaded, so the next package with a
``helpers`` of its own loads that one (a module imported lazily, inside
``process``, is still looked up on ``sys.path``, shared by the process).

What is loaded: a class is instantiated once per instance and its
``process(input, context)`` called (a ``pulsar.Function`` or any class with
that method); a plain function is called as ``fn(input)``, without the context,
as Pulsar's runtime calls one. A class with ``process_message`` (the stateful
kit) is called through that instead: it gives the committed output and its
properties. An instance's ``close()``, when it has one,
is called when the instance stops (the stateful kit closes its map there).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import shutil
import sys
import threading
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pulsar_state.errors import ConfigurationError

__all__ = ["CODE_NAMESPACE_PREFIX", "LoadedFunction", "load_function"]

#: the start of the name of each code package's own namespace (a module of its own)
CODE_NAMESPACE_PREFIX = "_pss_code_"


@dataclass(frozen=True)
class LoadedFunction:
    """One instance's function: ``process(input, context) -> output``, and its ``close``."""

    process: Callable[[Any, Any], Any]
    close: Callable[[], Any]
    #: the stateful kit's ``process_message(input, context)``: the committed output
    #: (``value``, ``properties``), which a redelivery gives again
    process_message: Callable[[Any, Any], Any] | None = None


_lock = threading.Lock()  # sys.path and sys.modules are the process's


def _first_on_path(folder: Path) -> None:
    """Put ``folder`` first on ``sys.path`` (the code's own absolute imports find it first)."""
    entry = str(folder)
    while entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)


def _digest(package: Path, owner: str) -> str:
    """The key of a function's package: its fqn and the package's bytes."""
    digest = hashlib.sha256(owner.encode() + b"\0")
    digest.update(package.read_bytes())
    return digest.hexdigest()[:20]


def _unpacked(package: Path, work_dir: Path, key: str) -> Path:
    """The folder holding a ``.zip`` package's modules (unpacked once per content)."""
    target = work_dir / f"{package.stem}-{key}"
    if not target.exists():
        # a folder of its own, renamed into place: another process unpacking the
        # same package at once (a shared work folder) keeps the one renamed first
        partial = target.with_name(f"{target.name}.partial-{uuid.uuid4().hex}")
        with zipfile.ZipFile(package) as archive:
            archive.extractall(partial)
        try:
            partial.rename(target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(partial, ignore_errors=True)
    src = target / package.stem / "src"
    return src if src.is_dir() else target


def _namespace(key: str, folder: Path) -> str:
    """The package module ``_pss_code_<key>`` whose modules are found in ``folder``."""
    name = f"{CODE_NAMESPACE_PREFIX}{key}"
    if name not in sys.modules:
        namespace = ModuleType(name, f"the code package {key} (pulsar-state worker)")
        namespace.__path__ = [str(folder)]
        namespace.__spec__ = importlib.util.spec_from_loader(name, None, is_package=True)
        sys.modules[name] = namespace
    return name


def _from_file(name: str, source: Path) -> ModuleType:
    """The module ``name`` made from the ``.py`` file ``source`` as it is now (no bytecode cache).

    Raises:
        ConfigurationError: it cannot be read.
    """
    try:
        code = compile(source.read_bytes(), str(source), "exec")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {source}: {exc}") from exc
    module = ModuleType(name)
    module.__file__ = str(source)
    module.__spec__ = importlib.util.spec_from_loader(name, None)
    module.__package__ = name.rpartition(".")[0]  # its relative imports stay in its namespace
    sys.modules[name] = module  # as an import does: the code may look itself up
    try:
        exec(code, module.__dict__)  # the function's own code, as importing runs it
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _forget_loaded_from(folder: Path, before: set[str]) -> None:
    """Drop from ``sys.modules`` what was imported just now through ``folder`` on
    ``sys.path`` (a top-level module or package of the folder, and what is in it)."""
    root = folder.resolve()
    for name in set(sys.modules) - before:
        top = name.split(".", maxsplit=1)[0]
        if name.startswith(CODE_NAMESPACE_PREFIX) or not (
            (root / f"{top}.py").is_file() or (root / top).is_dir()
        ):
            continue
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str) and Path(file).resolve().is_relative_to(root):
            del sys.modules[name]


def _module(module_name: str, py: str | None, work_dir: Path, owner: str) -> ModuleType:
    if py is None:
        return importlib.import_module(module_name)
    package = Path(py.removeprefix("file://")).expanduser()
    if not package.is_file():
        raise ConfigurationError(f"code package {py!r} is not a file on this worker")
    if package.suffix not in (".py", ".zip"):
        raise ConfigurationError(f"code package {py!r}: a .py file or a .zip")
    if package.suffix == ".py" and package.stem != module_name.split(".", maxsplit=1)[0]:
        raise ConfigurationError(
            f"className's module {module_name!r} is not the file {package.name!r}"
        )
    key = _digest(package, owner)
    folder = _unpacked(package, work_dir, key) if package.suffix == ".zip" else package.parent
    namespace = _namespace(key, folder)
    name = f"{namespace}.{module_name}"
    if name in sys.modules:  # this function's package, loaded already: the same code
        return sys.modules[name]
    _first_on_path(folder)
    before = set(sys.modules)
    try:
        if package.suffix == ".py":
            return _from_file(name, package)
        importlib.invalidate_caches()  # a folder unpacked just now
        return importlib.import_module(name)
    finally:
        _forget_loaded_from(folder, before)


def load_function(
    class_name: str, py: str | None, work_dir: Path, *, owner: str = ""
) -> LoadedFunction:
    """The function ``class_name`` names, ready to call as ``(input, context)``.

    ``owner`` is the function the code is loaded for (its fqn): the module of
    its package is its own (see the module docstring).

    Returns:
        its ``process`` (and ``process_message``, ``close``).

    Raises:
        ConfigurationError: the package, module or name is not found, or the
            name is neither a class with ``process`` nor a function.
    """
    module_name, _, attribute = class_name.rpartition(".")
    if not module_name or not attribute:
        raise ConfigurationError(f"className is module.Class, got {class_name!r}")
    try:
        with _lock:
            found = getattr(_module(module_name, py, work_dir, owner), attribute)
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
