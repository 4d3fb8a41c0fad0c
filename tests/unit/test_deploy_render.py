"""What ``pulsar-state deploy`` sends: the shipped config, with the cluster's part filled in."""

from __future__ import annotations

import pytest

from pulsar_state.deploy.functions_deploy import FUNCTIONS, _load, render_config
from pulsar_state.errors import ConfigurationError

ADMIN = "http://pulsar.example:8080"


@pytest.mark.parametrize("config_file", sorted(FUNCTIONS))
def test_every_shipped_config_gets_the_admin_url_it_leaves_out(config_file: str) -> None:
    shipped = _load(config_file)
    assert "adminUrl" not in (shipped.get("userConfig") or {})
    sent, filled = render_config(shipped, admin_url=ADMIN)
    assert sent["userConfig"]["adminUrl"] == ADMIN
    assert filled == [f"userConfig.adminUrl={ADMIN}"]
    # everything else is sent as shipped
    assert {k: v for k, v in sent.items() if k != "userConfig"} == {
        k: v for k, v in shipped.items() if k != "userConfig"
    }
    assert {k: v for k, v in sent["userConfig"].items() if k != "adminUrl"} == (
        shipped.get("userConfig") or {}
    )
    assert "adminUrl" not in (shipped.get("userConfig") or {})  # the input is not changed


def test_an_admin_url_set_in_the_config_is_kept() -> None:
    config = {"name": "f", "userConfig": {"adminUrl": "http://inside:8080", "x": 1}}
    sent, filled = render_config(config, admin_url=ADMIN)
    assert sent["userConfig"] == {"adminUrl": "http://inside:8080", "x": 1}
    assert filled == []


def test_a_config_without_user_config_gets_one() -> None:
    sent, filled = render_config({"name": "f"}, admin_url=ADMIN)
    assert sent["userConfig"] == {"adminUrl": ADMIN}
    assert filled


def test_a_bad_admin_url_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="http"):
        render_config({"name": "f"}, admin_url="pulsar://broker:6650")
