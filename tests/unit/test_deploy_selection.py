"""``pulsar-state deploy`` for real use (issue #28): which functions, where, with
which config, no secret unless asked, and a dry run that changes nothing.

The dry run asks the cluster nothing, so these run without a broker (the admin
URL is never called); the deploys themselves are tested on the broker in
tests/integration/test_deploy.py and tests/faults/test_functions_auth.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pulsar_state.cli import main
from pulsar_state.deploy.functions_deploy import load_configs, relocate, render_config
from pulsar_state.errors import ConfigurationError

ADMIN = "http://127.0.0.1:1"  # nothing listens: a dry run must not call it


def _dry(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        ["deploy", "--admin-url", ADMIN, "--dry-run", *args],
        env={"PULSAR_AUTH_TOKEN": None, "PULSAR_STATE_FUNCTION_AUTH_TOKEN": None},
    )
    return result.exit_code, result.output


def _documents(output: str) -> list[dict[str, object]]:
    """The configs a dry run printed (each after its 'would create or update' line)."""
    parts = [p for p in output.split("would create or update ") if p.strip()]
    return [yaml.safe_load(p.partition("\n")[2]) for p in parts]


def test_only_tenant_and_namespace_move_the_function_and_its_topics() -> None:
    code, out = _dry("--only", "wordcount", "--tenant", "acme", "--namespace", "flags")
    assert code == 0, out
    assert out.startswith("would create or update acme/flags/wordcount")
    [config] = _documents(out)
    assert config["inputs"] == ["persistent://acme/flags/wordcount-in"]
    assert config["output"] == "persistent://acme/flags/wordcount-out"
    assert config["userConfig"] == {  # type: ignore[comparison-overlap]
        "stateTopic": "persistent://acme/flags/wordcount-state",
        "adminUrl": ADMIN,
    }


def test_no_secret_unless_asked_not_even_deploys_own_token() -> None:
    code, out = _dry("--only", "function-scheduler", "--auth-token", "deployers-token")
    assert code == 0, out
    [config] = _documents(out)
    assert "secrets" not in config
    assert "deployers-token" not in out
    code, out = _dry("--only", "function-scheduler", "--function-auth-token", "functions-token")
    assert code == 0, out
    assert _documents(out)[0]["secrets"] == {"adminToken": "<redacted>"}
    assert "functions-token" not in out


def test_a_secret_reference_for_the_secrets_provider() -> None:
    config, filled = render_config(
        {"tenant": "t", "namespace": "n", "name": "f"},
        admin_url=ADMIN,
        admin_token_secret={"path": "pulsar-tokens", "key": "admin"},
    )
    assert config["secrets"] == {"adminToken": {"path": "pulsar-tokens", "key": "admin"}}
    assert any("secrets.adminToken" in f for f in filled)
    with pytest.raises(ConfigurationError, match="not both"):
        render_config(
            {"tenant": "t", "namespace": "n", "name": "f"},
            admin_url=ADMIN,
            admin_token="x",
            admin_token_secret="ref",
        )


def test_all_four_by_default_and_only_picks() -> None:
    code, out = _dry()
    assert code == 0, out
    names = sorted(str(c["name"]) for c in _documents(out))
    assert names == ["function-metadata-manager", "function-scheduler", "sql-sink", "wordcount"]
    assert [c["name"] for c, _, _ in load_configs(only=("sql-sink",))] == ["sql-sink"]


def test_your_own_config_in_the_shipped_format(tmp_path: Path) -> None:
    mine = tmp_path / "orders-sink.yaml"
    mine.write_text(
        yaml.safe_dump(
            {
                "tenant": "shop",
                "namespace": "orders",
                "name": "orders-sink",
                "className": "sink_entry.SinkFunction",
                "inputs": ["persistent://shop/orders/events"],
                "userConfig": {"database": "postgresql://db/orders", "table": "orders"},
            }
        )
    )
    code, out = _dry("--config", str(mine))
    assert code == 0, out
    assert out.startswith("would create or update shop/orders/orders-sink (code: sink_entry.py")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump({"tenant": "t", "namespace": "n", "name": "x", "className": "x.Y"})
    )
    code, out = _dry("--config", str(bad))
    assert code != 0 and "is not a packaged function" in out


def test_wrong_input_is_a_usage_error(tmp_path: Path) -> None:
    code, out = _dry("--only", "nope")
    assert code == 2 and "nope" in out
    mine = tmp_path / "x.yaml"
    mine.write_text("tenant: t\n")
    code, out = _dry("--only", "wordcount", "--config", str(mine))
    assert code == 2 and "not both" in out
    code, out = _dry("--only", "wordcount", "--tenant", "a/b")
    assert code != 0 and "plain name" in out


def test_relocate_leaves_other_namespaces_alone() -> None:
    moved = relocate(
        {
            "tenant": "public",
            "namespace": "default",
            "name": "f",
            "inputs": ["persistent://public/default/in", "persistent://other/ns/in"],
        },
        tenant="acme",
        namespace=None,
    )
    assert moved["inputs"] == ["persistent://acme/default/in", "persistent://other/ns/in"]
