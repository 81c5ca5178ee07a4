"""Framework-free core: trace schema, source location, DAG profile, bottleneck, what-if, report, CLI.

Nothing here imports Spark, TensorFlow, Flink or torch at module level.
"""
