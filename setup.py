"""Packaging for pulsar-shared-state.

One distribution, one import namespace. The folders at the repository root
tell the architecture; ``package_dir`` maps them onto ``pulsar_state``:

==========================  =====================
import name                 folder
==========================  =====================
``pulsar_state``            ``state/``
``pulsar_state.functions``  ``functions/``
``pulsar_state.connectors`` ``connectors/``
``pulsar_state.deploy``     ``deploy/``
``pulsar_state.scheduling`` ``scheduling/``
==========================  =====================
"""

from pathlib import Path

from setuptools import find_packages, setup

PACKAGE_DIRS = {
    "pulsar_state": "state",
    "pulsar_state.functions": "functions",
    "pulsar_state.connectors": "connectors",
    "pulsar_state.deploy": "deploy",
    "pulsar_state.scheduling": "scheduling",
}

PULSAR_CLIENT = "pulsar-client>=3.5,<4"
PSYCOPG = "psycopg[binary]>=3.1,<4"
# the Spark source's batch reads need the Python Data Source API with Arrow batches
# (PySpark 4.0); its streams need pyspark.sql.streaming.datasource's
# SupportsTriggerAvailableNow (4.2), key pushdown the filter classes (4.1): each is
# imported when a query asks for it (connectors/spark_features.py). pyarrow >= 18
# for the map's checkpoints. Both floors are installed and run by
# `make check-min-deps` (tests/min_deps.py reads these lists).
SPARK = ["pyspark>=4.0,<5", "pyarrow>=18"]
SPARK_STREAMING = ["pyspark>=4.2,<5", "pyarrow>=18"]
# every floor here is installed and run by `make check-min-deps` too
REQUIRES = [
    PULSAR_CLIENT,
    "requests>=2.31",
    "tenacity>=8.2",
    "prometheus-client>=0.19",
    "click>=8.1",
    "pyyaml>=6.0",
    "tqdm>=4.66",
    "pyjwt>=2.8",
    "packaging>=23",
    # client.conf (Java properties), read as pulsar-admin reads it
    "javaproperties>=0.8",
]

setup(
    name="pulsar-shared-state",
    version="0.1.0",
    description=(
        "Consistent shared state for Python applications on Apache Pulsar: "
        "a replicated state machine on one topic, a key-value map, a metadata "
        "store, locks, leader election and counters."
    ),
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    python_requires=">=3.11",
    # deploy/functions holds only the shipped function configs: a data package
    packages=[
        sub
        for package, folder in PACKAGE_DIRS.items()
        for sub in (package, *(f"{package}.{found}" for found in find_packages(folder)))
    ]
    + ["pulsar_state.deploy.functions"],
    # Spark registers the data source itself from this top-level module (pyspark_*)
    py_modules=["pyspark_pulsar_state"],
    package_dir=PACKAGE_DIRS,
    package_data={"pulsar_state": ["py.typed"], "pulsar_state.deploy.functions": ["*.yaml"]},
    include_package_data=True,
    install_requires=REQUIRES,
    extras_require={
        # What the functions worker's Python runner needs (grpc, protobuf, ...)
        "functions": [PULSAR_CLIENT.replace("pulsar-client", "pulsar-client[functions]")],
        "spark": SPARK,
        # Spark streams of changes (readStream) need a newer PySpark than batch reads
        "spark-streaming": SPARK_STREAMING,
        # a map's columnar checkpoints (Arrow IPC): bootstrap and Spark snapshots
        # read the map, not its history; without pyarrow maps replay their topic
        "checkpoints": ["pyarrow>=18"],
        # `make bench`: the peers' usual Python clients and the plots
        "bench": ["aetcd>=1.0", "etcd3>=0.12", "kazoo>=2.10", "matplotlib>=3.8"],
        # the SQL sink on PostgreSQL (selected by a postgresql:// URL)
        "postgres": [PSYCOPG],
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "hypothesis>=6.100",  # model-based tests of the write side
            "testcontainers>=4.8",
            "trustme>=1.1",  # throwaway CAs for the TLS tests
            "cryptography>=42",  # the local cluster's CA (pulsar-state cluster start --tls)
        ],
        "dev": [
            PULSAR_CLIENT.replace("pulsar-client", "pulsar-client[functions]"),
            "pytest>=8",
            "pytest-timeout>=2.3",
            "hypothesis>=6.100",  # model-based tests of the write side
            "testcontainers>=4.8",
            "trustme>=1.1",  # throwaway CAs for the TLS tests
            "cryptography>=42",  # the local cluster's CA (pulsar-state cluster start --tls)
            "ruff>=0.6",
            "mypy>=1.10",
            "types-requests",
            "types-PyYAML",
            "types-tqdm",
            "build>=1.0",  # make package, tests/wheel_check.py
            *SPARK_STREAMING,
            PSYCOPG,
        ],
    },
    entry_points={
        "console_scripts": ["pulsar-state=pulsar_state.cli:main"],
        # fixtures with a real broker for users' own tests (pulsar_state.testing.plugin)
        "pytest11": ["pulsar_state = pulsar_state.testing.plugin"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: System :: Distributed Computing",
        "Typing :: Typed",
    ],
)
