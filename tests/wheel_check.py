"""Check that the built wheel installs and works on its own.

Builds the source distribution and, from it, the wheel as ``make package``
does (``python -m build``, an isolated build) into ``.cache/wheel-check/dist/``
(git-ignored), checks the sdist carries what a rebuild needs (LICENSE, README,
the packaging files, the shipped function configs), makes a fresh venv in
``.cache/wheel-check/venv/``, installs the wheel there with its dependencies
(not editable, nothing from the source tree), and then, in that venv:

* ``import pulsar_state, pulsar_state.testing, pulsar_state.deploy`` works and
  the modules come from the venv, not the repository;
* the function configs shipped as package data (``deploy/functions/*.yaml``)
  are readable through ``importlib.resources``;
* ``pulsar-state --help`` and ``pulsar-state deploy --help`` exit 0.

    python tests/wheel_check.py

Exit code 0 when everything holds; the failing step otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WORK_DIR = REPO_ROOT / ".cache" / "wheel-check"
VENV = WORK_DIR / "venv"
DIST = WORK_DIR / "dist"
SHIPPED_CONFIGS = REPO_ROOT / "deploy" / "functions"


def outside() -> None:
    # the step runner of the min-deps check (prints each step, bounded wait)
    from min_deps import _run  # noqa: PLC0415

    shutil.rmtree(DIST, ignore_errors=True)
    try:
        import build  # noqa: F401, PLC0415
    except ImportError:
        raise SystemExit("the `build` package is missing: pip install -e '.[dev]'") from None
    # -I: the repository's own build/ folder (setuptools' scratch) must not
    # shadow the `build` package; no flags: the sdist, then the wheel from it
    _run("build", [sys.executable, "-I", "-m", "build", "--outdir", str(DIST), str(REPO_ROOT)])
    check_sdist()
    wheels = sorted(DIST.glob("pulsar_shared_state-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one pulsar_shared_state wheel in {DIST}, found {wheels}")
    print(f"built {wheels[0].name}", flush=True)
    _run("venv", [sys.executable, "-m", "venv", "--clear", str(VENV)])
    py = str(VENV / "bin" / "python")
    _run(
        "install",
        [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheels[0])],
    )
    configs = sorted(p.name for p in SHIPPED_CONFIGS.glob("*.yaml"))
    if not configs:
        raise SystemExit(f"no *.yaml in {SHIPPED_CONFIGS}: nothing to check")
    # -I: isolated, so neither the current directory nor PYTHONPATH can put the
    # source tree on sys.path; the script's own directory (tests/) still is
    _run(
        "import",
        [py, "-I", str(Path(__file__).resolve()), "--inside", *[f"--config={c}" for c in configs]],
    )
    entry_point = str(VENV / "bin" / "pulsar-state")
    _run("cli", [entry_point, "--help"])
    _run("cli deploy", [entry_point, "deploy", "--help"])
    print("wheel check passed", flush=True)


def inside(configs: list[str]) -> None:
    from importlib import resources  # noqa: PLC0415

    import pulsar_state  # noqa: PLC0415
    import pulsar_state.deploy  # noqa: PLC0415
    import pulsar_state.testing  # noqa: PLC0415

    for module in (pulsar_state, pulsar_state.deploy, pulsar_state.testing):
        where = Path(str(module.__file__)).resolve()
        if VENV.resolve() not in where.parents:
            raise SystemExit(f"{module.__name__} came from {where}, not the venv")
    print("imported pulsar_state, pulsar_state.testing, pulsar_state.deploy", flush=True)
    shipped = resources.files("pulsar_state.deploy").joinpath("functions")
    for name in configs:
        resource = shipped.joinpath(name)
        if not resource.is_file() or not resource.read_text(encoding="utf-8").strip():
            raise SystemExit(f"the installed package lacks deploy/functions/{name}")
    print(f"package data present: {', '.join(configs)}", flush=True)


def check_sdist() -> None:
    """The sdist holds the licence, the README and the shipped function configs."""
    sdists = sorted(DIST.glob("pulsar_shared_state-*.tar.gz"))
    if len(sdists) != 1:
        raise SystemExit(f"expected one pulsar_shared_state sdist in {DIST}, found {sdists}")
    with tarfile.open(sdists[0]) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    needed = {"LICENSE", "README.md", "setup.py", "pyproject.toml"} | {
        f"deploy/functions/{p.name}" for p in SHIPPED_CONFIGS.glob("*.yaml")
    }
    missing = sorted(needed - names)
    if missing:
        raise SystemExit(f"{sdists[0].name} lacks {', '.join(missing)}")
    print(f"built {sdists[0].name} with {len(names)} files", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.config)
    else:
        outside()


if __name__ == "__main__":
    main()
