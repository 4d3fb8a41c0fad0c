"""The pytest plugin (issue #28): a user's own test file gets a real broker, a
client and a topic from fixtures, with nothing but the package installed.

The user's suite runs in a child pytest (``pytester``) against this session's
broker, named the way a user's CI names one (``PULSAR_STATE_TEST_*``).
"""

from __future__ import annotations

import pytest
from harness import PulsarEndpoint

pytest_plugins = ["pytester"]

USERS_TEST = """
from pulsar_state import PulsarMap


def test_feature_flags(pulsar_state_broker, pulsar_state_client, pulsar_state_topic):
    assert pulsar_state_topic.startswith("persistent://public/default/test-feature-flags-")
    with PulsarMap(
        pulsar_state_client, pulsar_state_topic, admin_url=pulsar_state_broker.admin_url
    ) as flags:
        flags.put("dark-mode", True).result(60)
        assert flags.get("dark-mode", latest=True).result(60) is True


def test_each_test_has_its_own_topic(pulsar_state_topic):
    assert "each-test" in pulsar_state_topic
"""


def test_a_users_suite_gets_a_broker_client_and_topic(
    pytester: pytest.Pytester, pulsar_endpoint: PulsarEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULSAR_STATE_TEST_SERVICE_URL", pulsar_endpoint.service_url)
    monkeypatch.setenv("PULSAR_STATE_TEST_ADMIN_URL", pulsar_endpoint.admin_url)
    pytester.makepyfile(test_users_flags=USERS_TEST)
    result = pytester.runpytest_subprocess("-q")  # registered by the entry point
    result.assert_outcomes(passed=2)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_off="def test_x(pulsar_state_client):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:pulsar_state", "-q")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'pulsar_state_client' not found*"])
