"""Running pulsar-shared-state: the embedded broker, a local cluster, pulsar-admin, packaging."""

from pulsar_state.deploy.cluster import ClusterInfo, LocalCluster
from pulsar_state.deploy.distribution import DEFAULT_PULSAR_VERSION, PulsarDistribution
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.standalone import BrokerInfo, StandaloneBroker
from pulsar_state.deploy.standalone_config import StandalonePorts

__all__ = [
    "DEFAULT_PULSAR_VERSION",
    "BrokerInfo",
    "ClusterInfo",
    "LocalCluster",
    "PulsarAdminCli",
    "PulsarDistribution",
    "StandaloneBroker",
    "StandalonePorts",
]
