"""Stage 3, the profile: the DAG execution profile (``dag``), the resources the traced run had (``machine``),
the critical path and the bottleneck (``bottleneck``), skewed operations (``skew``) and Spark SQL's plan
operators (``sqlplan``)."""
