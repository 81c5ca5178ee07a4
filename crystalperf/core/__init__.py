"""Framework-free core. A trace goes through the stages in order, one folder each:

``trace`` (the schema, reading and writing) -> ``attribution`` (every operation's resource vector) -> ``profile``
(the DAG, its critical path and bottleneck) -> ``predict`` (what-ifs) -> ``report`` (JSON, HTML, terminal).
``record`` is what the hooks share while the job runs. ``analysis`` runs one trace through the stages,
``compare`` two runs side by side, ``finish`` the job end, ``cli`` the command line. The rest is the ground floor
every stage uses.

Nothing here imports Spark, TensorFlow, Flink or torch at module level.
"""
