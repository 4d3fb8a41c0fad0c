"""Check every declared lower bound: ``make check-min-deps``.

setup.py promises ``pulsar-shared-state[spark]`` works from the floors of its
requirements: ``REQUIRES`` (``pulsar-client>=X``, ``requests``, ``click``, ...)
and ``SPARK`` (``pyspark>=X``, ``pyarrow>=Y``), and
``pulsar-shared-state[spark-streaming]`` from ``SPARK_STREAMING``'s. For each
of the two (a *pass*), this script makes a throwaway venv under
``.cache/min-deps/`` (git-ignored), installs the package (not editable) with
exactly those floors pinned, and runs itself inside it (``--inside``): a local
Spark session must find the source by itself (no registration call: the
``pyspark_pulsar_state`` module) and, when broker URLs are given, the core must
write on the floor client (sync puts, a group commit, an update, a latest read)
and the Spark source read a map as a snapshot; then, on a PySpark with streams,
as an ``availableNow`` stream of changes, and on an older one a stream and a
pushdown read must be refused with the error naming the release they need.

    python tests/min_deps.py [--service-url pulsar://... --admin-url http://...]
    python tests/min_deps.py --pin pyspark==4.1.0   # one pass, floors + that version

Exit code 0 when everything holds; the failing step otherwise.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV = REPO_ROOT / ".cache" / "min-deps" / "venv"
# one step may download and build pyspark (~450 MB) when pip's cache lacks it
STEP_TIMEOUT_S = 1800


def _setup_lists() -> dict[str, list[str]]:
    """setup.py's module-level string constants and lists of them (a list may name
    a constant, as ``REQUIRES`` names ``PULSAR_CLIENT``)."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text(encoding="utf-8"))
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found[name] = [node.value.value]
        elif isinstance(node.value, ast.List):
            items: list[str] = []
            for item in node.value.elts:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    items.append(item.value)
                elif isinstance(item, ast.Name) and item.id in found:
                    items.extend(found[item.id])
            found[name] = items
    return found


#: the passes: (name, setup.py's list of the extra's requirements, the extra)
PASSES = (("batch", "SPARK", "spark"), ("streaming", "SPARK_STREAMING", "spark-streaming"))


def floors(extra_list: str = "SPARK") -> list[str]:
    """``name==floor`` for each requirement of setup.py's ``REQUIRES`` and ``extra_list``."""
    lists = _setup_lists()
    if "REQUIRES" not in lists or extra_list not in lists:
        raise SystemExit(f"setup.py has no REQUIRES = [...] or {extra_list} = [...] list")
    requirements = [Requirement(r) for r in (*lists["REQUIRES"], *lists[extra_list])]
    pins = []
    for req in requirements:
        floors = [s.version for s in req.specifier if s.operator == ">="]
        if len(floors) != 1:
            raise SystemExit(f"{req}: expected exactly one '>=' lower bound")
        pins.append(f"{req.name}=={floors[0]}")
    return pins


def _run(step: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
    print(f"== {step}: {' '.join(cmd)}", flush=True)
    try:
        done = subprocess.run(cmd, env=env, timeout=STEP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{step}: no result within {STEP_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise SystemExit(f"{step} failed (exit {done.returncode})")


def _pins_with(pins: list[str], overrides: list[str]) -> list[str]:
    """``pins`` with each ``name==version`` of ``overrides`` in place of its name's pin."""
    names = {Requirement(o).name for o in overrides}
    return [p for p in pins if Requirement(p).name not in names] + overrides


def outside(args: argparse.Namespace) -> None:
    if args.pin:  # one pass: the floors, with the given versions in their place
        passes = [("pinned", _pins_with(floors("SPARK_STREAMING"), args.pin), "spark")]
    else:
        passes = [(name, floors(extra_list), extra) for name, extra_list, extra in PASSES]
    for name, pins, extra in passes:
        print(f"== pass {name}: pulsar-shared-state[{extra}] with {' '.join(pins)}", flush=True)
        _run("venv", [sys.executable, "-m", "venv", "--clear", str(VENV)])
        py = str(VENV / "bin" / "python")
        _run("pip", [py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
        _run("install", [py, "-m", "pip", "install", "--quiet", f"{REPO_ROOT}[{extra}]", *pins])
        inside = [py, str(Path(__file__).resolve()), "--inside"]
        inside += [f"--expect={p}" for p in pins]
        if args.service_url and args.admin_url:
            inside += ["--service-url", args.service_url, "--admin-url", args.admin_url]
        # sys.path gets tests/, not the repository root: pulsar_state is the installed one
        _run(f"check ({name})", inside, env={**os.environ, "PYSPARK_PYTHON": py})
        print(f"pass {name} passed", flush=True)
    print("min-deps check passed", flush=True)


def inside(args: argparse.Namespace) -> None:
    for pin in args.expect:
        name, wanted = pin.split("==")
        got = version(name)
        if Version(got) != Version(wanted):
            raise SystemExit(f"{name} is {got}, not the pinned {wanted}")
        print(f"{name} {got}", flush=True)

    # imported here: only the throwaway venv has the pinned versions
    from pyspark.sql import SparkSession  # noqa: PLC0415

    import pulsar_state  # noqa: PLC0415
    from pulsar_state.connectors.spark_source import PulsarStateDataSource  # noqa: PLC0415

    if VENV not in Path(pulsar_state.__file__).resolve().parents:
        raise SystemExit(f"pulsar_state came from {pulsar_state.__file__}, not the venv")

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("pulsar-state-min-deps")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        if args.service_url and args.admin_url:
            _write_a_map(args.service_url, args.admin_url)
            _read_a_map(spark, args.service_url, args.admin_url)
        else:
            spark.dataSource.register(PulsarStateDataSource)
            print("registered the pulsar_state data source", flush=True)
            print("no broker URLs given: reading skipped", flush=True)
    finally:
        spark.stop()


def _write_a_map(service_url: str, admin_url: str) -> None:
    """The core on the floor client: sync puts (one-message entries, the blocking
    send), a group commit (many messages in one entry), an update, latest reads
    (one waited for, one looked at first)."""
    import pulsar  # noqa: PLC0415

    from pulsar_state import PulsarMap  # noqa: PLC0415

    topic = f"persistent://public/default/min-deps-core-{uuid.uuid4().hex[:12]}"
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
            for i in range(5):
                m.put(f"k{i}", i).result(60)
            pending = [m.put(f"g{i}", i) for i in range(200)]
            for put in pending:
                put.result(60)
            if m.update("k0", lambda v: (v or 0) + 10).result(60) != 10:
                raise SystemExit("update on the floor client returned the wrong value")
            size = m.size(latest=True).result(60)
            looked_at = m.get("k1", latest=True)
            looked_at.done()  # asked by the reply thread: this client has no async ask
            if looked_at.result(60) != 1:
                raise SystemExit("a latest read looked at first returned the wrong value")
    finally:
        client.close()
    if size != 205:
        raise SystemExit(f"the map holds {size} keys, not 205")
    print("core on the floor client: puts, a group commit, an update, a latest read", flush=True)


def _read_a_map(spark: Any, service_url: str, admin_url: str) -> None:
    import pulsar  # noqa: PLC0415

    from pulsar_state import PulsarMap  # noqa: PLC0415

    topic = f"persistent://public/default/min-deps-{uuid.uuid4().hex[:12]}"
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with PulsarMap[str, object](client, topic, admin_url=admin_url) as m:
            m.put_all({"a": 1, "b": {"x": [1, 2]}}).result(60)
            m.delete("a").result(60)
            m.put("c", "text").result(60)
            expected = m.items(latest=True).result(60)
    finally:
        client.close()
    options = {"serviceUrl": service_url, "adminUrl": admin_url, "topic": topic}
    # no registration call: Spark finds pyspark_pulsar_state's DefaultSource itself
    rows = spark.read.format("pulsar_state").options(**options).load().collect()
    got = {row.key: json.loads(row.value) for row in rows}
    if got != expected:
        raise SystemExit(f"snapshot read {got}, the map holds {expected}")
    print(f"snapshot read (the source found by Spark itself): {got}", flush=True)

    import pyspark  # noqa: PLC0415

    from pulsar_state.connectors.spark_features import (  # noqa: PLC0415
        PUSHDOWN_SINCE,
        STREAMING_SINCE,
    )

    installed = Version(pyspark.__version__)
    if installed < Version(PUSHDOWN_SINCE):
        _expect_refusal(
            lambda: (
                spark.read.format("pulsar_state")
                .options(**options, pushdown="true")
                .load()
                .collect()
            ),
            f"needs PySpark >= {PUSHDOWN_SINCE}",
            "pushdown",
        )
    if installed < Version(STREAMING_SINCE):
        _expect_refusal(
            lambda: _stream_changes(spark, options),
            f"needs PySpark >= {STREAMING_SINCE}",
            "a stream",
        )
        return
    changes = _stream_changes(spark, options)
    wanted = [("a", "put"), ("b", "put"), ("a", "delete"), ("c", "put")]
    if changes != wanted:
        raise SystemExit(f"stream of changes {changes}, expected {wanted}")
    print(f"availableNow stream: {changes}", flush=True)


def _expect_refusal(call: Any, text: str, what: str) -> None:
    """``call()`` must fail with an error whose text has ``text`` (Spark wraps it)."""
    try:
        call()
    except Exception as exc:  # Spark's wrapper of the source's ConfigurationError
        if text not in str(exc):
            raise SystemExit(f"{what} failed, but not with {text!r}: {exc}") from exc
        print(f"{what} refused: {text}", flush=True)
        return
    raise SystemExit(f"{what} ran on a PySpark without it; expected {text!r}")


def _stream_changes(spark: Any, options: dict[str, str]) -> list[tuple[str, str]]:
    """The changes an ``availableNow`` stream of the map reads, in log order."""

    stream = spark.readStream.format("pulsar_state").options(**options, mode="changelog").load()
    name = f"changes_{uuid.uuid4().hex[:8]}"
    query = stream.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    if not query.awaitTermination(180):
        query.stop()
        raise SystemExit("the availableNow stream did not finish within 180 s")
    return [
        (r.key, r.change_type)
        for r in spark.sql(
            f"SELECT * FROM {name} ORDER BY ledger_id, entry_id, batch_index"
        ).collect()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--expect", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--pin", action="append", help="name==version instead of the floors")
    # the suite's variables, never the CLI's (they may name a user's cluster)
    parser.add_argument("--service-url", default=os.environ.get("PULSAR_STATE_TEST_SERVICE_URL"))
    parser.add_argument("--admin-url", default=os.environ.get("PULSAR_STATE_TEST_ADMIN_URL"))
    args = parser.parse_args()
    if args.inside:
        inside(args)
    else:
        outside(args)


if __name__ == "__main__":
    main()
