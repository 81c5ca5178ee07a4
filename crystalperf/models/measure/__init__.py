"""Function labels from measurement: workloads run under a profiler, measured time per function.

``jvm``: JVM methods under JDK Flight Recorder (see ``SOURCES.md`` for every library and its licence).
"""
