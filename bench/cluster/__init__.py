"""Multi-host Spark and Flink clusters on one machine: each worker/TaskManager in a network namespace of its own,
on a veth link shaped with tc (rate, delay; a TAP relay gives the delay where the kernel has no netem), for measuring what the network does to a job. See docs/cluster.md.

    from bench.cluster import Link, Network, SparkCluster, unavailable

    with Network(["w0", "w1"], link=Link(rate_mbit=50)) as net, SparkCluster(net, workdir) as spark:
        ...  # a driver in this namespace with spark.driver_conf() and spark.driver_env()

``python -m bench.cluster`` checks the machine (and measures a link).
"""

from .flink import FlinkCluster
from .netns import (
           ENV_TAG,
           Host,
           Link,
           Network,
           free_port,
           host_cpus,
           leftovers,
           netem_available,
           pinned,
           relay_available,
           unavailable,
)
from .spark import SparkCluster

__all__ = ["ENV_TAG", "FlinkCluster", "Host", "Link", "Network", "SparkCluster", "free_port", "host_cpus",
           "leftovers", "netem_available", "pinned", "relay_available", "unavailable"]
