"""The packaged functions open their maps one way (functions/function_map.py); real broker."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pulsar
import pytest
import requests
from harness import unique_name, unique_topic

from pulsar_state import InvalidTopicNameError
from pulsar_state.functions.function_map import function_topic, open_function_map
from pulsar_state.functions.metadata_manager import FunctionMetadataManager
from pulsar_state.functions.scheduler_function import SchedulerFunction
from pulsar_state.topic_names import admin_path, function_state_name


def _context(client: pulsar.Client, user_config: dict[str, Any], name: str = "fn") -> Any:
    """What a function instance's runtime context offers these functions (no worker)."""
    return SimpleNamespace(
        get_user_config_value=user_config.get,
        get_function_tenant=lambda: "public",
        get_function_namespace=lambda: "default",
        get_function_name=lambda: name,
        get_instance_id=lambda: 0,
        get_pulsar_client=lambda: client,
        get_secret=lambda _key: None,
        get_logger=lambda: logging.getLogger("function"),
        record_metric=lambda *_: None,
    )


def _retention(admin_url: str, topic: str) -> Any:
    url = f"{admin_url}/admin/v2/{admin_path(topic)}/retention"
    resp = requests.get(url, params={"applied": "false"}, timeout=10)
    resp.raise_for_status()
    return resp.json() if resp.text else None


def test_the_default_topic_is_in_the_functions_namespace(make_client: Any, admin_url: str) -> None:
    function = unique_name("wc")
    context = _context(make_client(), {"adminUrl": admin_url}, name=function)
    with open_function_map(context, "stateTopic", function_state_name(function)) as state:
        assert state.manager.topic == f"persistent://public/default/{function}-pss-state"
        state.put("k", 1).result(timeout=30)
        assert state.get("k", latest=True).result(timeout=30) == 1
    # adminUrl given: the topic is protected (infinite retention)
    assert _retention(admin_url, state.manager.topic) == {
        "retentionTimeInMinutes": -1,
        "retentionSizeInMB": -1,
    }


def test_a_configured_topic_wins_and_each_function_opens_through_the_helper(
    make_client: Any, admin_url: str
) -> None:
    records_topic, members_topic = unique_topic("records"), unique_topic("members")
    context = _context(
        make_client(),
        {"adminUrl": admin_url, "metadataTopic": records_topic, "membersTopic": members_topic},
    )
    assert function_topic(context, "metadataTopic", "function-metadata") == records_topic
    assert (
        function_topic(context, "assignmentTopic", "function-assignments")
        == "persistent://public/default/function-assignments"
    )
    manager = FunctionMetadataManager()
    scheduler = SchedulerFunction()
    try:
        assert manager._records(context).manager.topic == records_topic
        members = scheduler._map(context, "membersTopic", "function-members")
        assert members.manager.topic == members_topic
    finally:
        manager.close()
        for opened in scheduler._maps.values():
            opened.close()


def test_a_bad_namespace_is_a_clear_error(make_client: Any) -> None:
    context = _context(make_client(), {})
    context.get_function_namespace = lambda: ""
    with pytest.raises(InvalidTopicNameError, match="namespace"):
        open_function_map(context, "stateTopic", "x")
