"""``crystalperf fleet``: every application of a platform at once.

A fleet is every log under some paths: History Server event-log directories (any trace catalog's format),
directories of crystalperf traces from any framework, or single files. Each application is analysed as
``crystalperf analyze`` analyses one (:mod:`crystalperf.core.analysis`), in a process of its own with the CLI's
limits, and becomes one row of a table (:mod:`.row`, written as Parquet by :mod:`.table`); a self-contained HTML
page ranks the applications by the machine-hours their best setting saves and draws the fleet's mix of
bottlenecks (:mod:`.page`), and a terminal summary says the same in a few lines (:mod:`.summary`).

The pieces, in the order a run meets them:

- :mod:`.discover`: the applications' logs under the paths (trace catalogs and readers found through entry
  points, as ``crystalperf import`` finds them);
- :mod:`.cache`: a result per log, valid while the log's size and mtime (or its content hash) are unchanged, so
  a second run analyses only what changed and an interrupted run resumes;
- :mod:`.worker`: the process that analyses: it imports the analysis once and forks a child per application,
  bounded in time and memory;
- :mod:`.pool`: the local engine, one worker per core the machine can feed; other engines (``--engine spark``)
  are entry points ``crystalperf.fleet_engines`` that return the same results.

Nothing here imports a framework; the Parquet table needs pyarrow (``pip install 'crystalperf[fleet]'``).
"""
