"""Each embedded broker keeps the function code it stores in its own data directory.

Pulsar's standalone stores function packages under a relative
``packages-storage`` (in the distribution it runs from), so every broker of a
machine shared one store: undeploying ``function-metadata-manager`` on one
broker deleted the code of the same-named function on another, whose next
``functions update`` then failed with HTTP 404.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.standalone_config import StandalonePorts, render_standalone_conf


def test_each_broker_stores_function_packages_in_its_data_dir(tmp_path: Path) -> None:
    a = StandaloneBroker(data_dir=tmp_path / "a")
    b = StandaloneBroker(data_dir=tmp_path / "b", broker_settings={"x": "1"})
    assert a.broker_settings["STORAGE_PATH"] == str(tmp_path.resolve() / "a" / "packages-storage")
    assert b.broker_settings["STORAGE_PATH"] == str(tmp_path.resolve() / "b" / "packages-storage")
    assert b.broker_settings["x"] == "1"
    # an explicit setting still wins
    c = StandaloneBroker(data_dir=tmp_path / "c", broker_settings={"STORAGE_PATH": "/elsewhere"})
    assert c.broker_settings["STORAGE_PATH"] == "/elsewhere"


def test_the_rendered_conf_carries_the_storage_path(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "standalone.conf").write_text("brokerServicePort=6650\n")
    broker = StandaloneBroker(data_dir=tmp_path / "data")
    dist = cast(Any, SimpleNamespace(root=tmp_path))
    text = render_standalone_conf(
        dist, StandalonePorts(broker=1, web=2, worker=3), broker.broker_settings
    )
    assert f"STORAGE_PATH={tmp_path.resolve() / 'data' / 'packages-storage'}" in text.splitlines()
