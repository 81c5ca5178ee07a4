"""``crystalperf demo``: the paper's workload in miniature — TPC-H Q6 (short) and Q9 (long) on local
Spark with crystalperf on, leaving the report in ``./crystalperf-demo/``.

The data is TPC-H-shaped and generated here, deterministically, by Spark itself (DuckDB's ``tpch``
extension would download at run time, which we never do): lineitem, orders, part, supplier, partsupp
and nation with TPC-H's keys, value ranges and the partsupp key formula, so Q6 and Q9 run unchanged.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

NATIONS = ["ALGERIA", "ARGENTINA", "BRAZIL", "CANADA", "EGYPT", "ETHIOPIA", "FRANCE", "GERMANY", "INDIA",
           "INDONESIA", "IRAN", "IRAQ", "JAPAN", "JORDAN", "KENYA", "MOROCCO", "MOZAMBIQUE", "PERU", "CHINA",
           "ROMANIA", "SAUDI ARABIA", "VIETNAM", "RUSSIA", "UNITED KINGDOM", "UNITED STATES"]
COLORS = ["almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue", "blush",
          "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral", "cornflower",
          "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger", "drab", "firebrick", "floral", "forest",
          "frosted", "gainsboro", "ghost", "goldenrod", "green", "grey", "honeydew", "hot", "indian", "ivory",
          "khaki", "lace", "lavender", "lawn", "lemon", "light", "lime", "linen", "magenta", "maroon", "medium",
          "metallic", "midnight", "mint", "misty", "moccasin", "navajo", "navy", "olive", "orange", "orchid",
          "pale", "papaya", "peach", "peru", "pink", "plum", "powder", "puff", "purple", "red", "rose", "rosy",
          "royal", "saddle", "salmon", "sandy", "seashell", "sienna", "sky", "slate", "smoke", "snow", "spring",
          "steel", "tan", "thistle", "tomato", "turquoise", "violet", "wheat", "white", "yellow"]

Q6 = """
SELECT sum(l_extendedprice * l_discount) AS revenue
FROM lineitem
WHERE l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01'
  AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24
"""

Q9 = """
SELECT nation, o_year, sum(amount) AS sum_profit FROM (
  SELECT n_name AS nation, year(o_orderdate) AS o_year,
         l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity AS amount
  FROM part, supplier, lineitem, partsupp, orders, nation
  WHERE s_suppkey = l_suppkey AND ps_suppkey = l_suppkey AND ps_partkey = l_partkey
    AND p_partkey = l_partkey AND o_orderkey = l_orderkey AND s_nationkey = n_nationkey
    AND p_name LIKE '%green%'
) AS profit
GROUP BY nation, o_year ORDER BY nation, o_year DESC
"""


def _rand(expr: str, salt: int) -> str:
    """A deterministic pseudo-random non-negative long from a column expression."""
    return f"pmod(xxhash64({expr}, {salt}), 2147483647)"


def generate(spark: Any, data_dir: Path, scale: float) -> None:
    """Write the six tables as parquet under data_dir (skipped when they are already there)."""
    marker = data_dir / f"_scale_{scale}"
    if marker.exists():
        return
    suppliers = max(10, int(10_000 * scale))
    parts = max(200, int(200_000 * scale))
    orders = max(1500, int(1_500_000 * scale))
    colors = "array(" + ",".join(f"'{c}'" for c in COLORS) + ")"
    nation = spark.createDataFrame([(i, n, i % 5) for i, n in enumerate(NATIONS)],
                                   "n_nationkey int, n_name string, n_regionkey int")
    supplier = spark.range(1, suppliers + 1).selectExpr(
        "id AS s_suppkey", "concat('Supplier#', lpad(id, 9, '0')) AS s_name",
        f"cast({_rand('id', 1)} % 25 AS int) AS s_nationkey",
        f"cast({_rand('id', 2)} % 1099900 - 99900 AS decimal(12,2)) / 100 AS s_acctbal")
    name_words = ", ".join(f"element_at({colors}, cast({_rand('id', 10 + k)} % {len(COLORS)} + 1 AS int))"
                           for k in range(5))
    part = spark.range(1, parts + 1).selectExpr(
        "id AS p_partkey", f"concat_ws(' ', {name_words}) AS p_name",
        "cast((90000 + (id / 10) % 20001 + 100 * (id % 1000)) / 100 AS decimal(12,2)) AS p_retailprice")
    partsupp = spark.range(0, parts * 4).selectExpr(
        "id div 4 + 1 AS ps_partkey",
        f"pmod(id div 4 + 1 + (id % 4) * ({suppliers} div 4 + (id div 4) div {suppliers}), {suppliers}) + 1 AS ps_suppkey",
        f"cast({_rand('id', 3)} % 9999 + 1 AS int) AS ps_availqty",
        f"cast(({_rand('id', 4)} % 99901 + 100) / 100.0 AS decimal(12,2)) AS ps_supplycost")
    orders_df = spark.range(1, orders + 1).selectExpr(
        "id AS o_orderkey", f"{_rand('id', 5)} % {orders // 10 + 1} + 1 AS o_custkey",
        f"date_add(date '1992-01-01', cast({_rand('id', 6)} % 2405 AS int)) AS o_orderdate")
    lineitem = spark.range(0, orders * 4).selectExpr(
        "id div 4 + 1 AS l_orderkey", f"{_rand('id', 7)} % {parts} + 1 AS l_partkey",
        f"cast({_rand('id', 8)} % 4 AS int) AS l_supp_i", "cast(id % 4 + 1 AS int) AS l_linenumber",
        f"cast({_rand('id', 9)} % 50 + 1 AS decimal(12,2)) AS l_quantity",
        f"cast({_rand('id', 20)} % 11 / 100.0 AS decimal(12,2)) AS l_discount",
        f"cast({_rand('id', 21)} % 9 / 100.0 AS decimal(12,2)) AS l_tax",
        f"date_add(date_add(date '1992-01-01', cast({_rand('id div 4 + 1', 6)} % 2405 AS int)), "
        f"cast({_rand('id', 22)} % 121 + 1 AS int)) AS l_shipdate",
    ).selectExpr(
        "l_orderkey", "l_partkey",
        f"pmod(l_partkey + l_supp_i * ({suppliers} div 4 + (l_partkey - 1) div {suppliers}), {suppliers}) + 1 AS l_suppkey",
        "l_linenumber", "l_quantity",
        "cast(l_quantity * (90000 + (l_partkey / 10) % 20001 + 100 * (l_partkey % 1000)) / 100 AS decimal(12,2)) "
        "AS l_extendedprice",
        "l_discount", "l_tax", "l_shipdate")
    for name, df in [("nation", nation), ("supplier", supplier), ("part", part), ("partsupp", partsupp),
                     ("orders", orders_df), ("lineitem", lineitem)]:
        df.write.mode("overwrite").parquet(str(data_dir / name))
    marker.write_text("generated by crystalperf demo\n")


def run_demo(out_dir: Path, scale: float = 1.0, sample_interval_ms: int | None = None,
             cpu_budget: float | None = None) -> dict[str, Any]:
    """Generate the data (once), run Q6 and Q9 with crystalperf on; returns the report dict."""
    from pyspark.sql import SparkSession

    from crystalperf.integrations.spark.config import configure

    out_dir = out_dir.resolve()
    data_dir = out_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    base = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g", "spark.sql.adaptive.enabled": "false"}

    started = time.time()
    # In a process of its own: the JVM it starts must not be the one the measured queries run in
    # (a JVM started without crystalperf's jar cannot load the listener later).
    subprocess.run([sys.executable, "-m", __name__, str(data_dir), str(scale)], check=True)
    log.info("crystalperf demo: data ready in %.0f s (%s)", time.time() - started, data_dir)

    builder = SparkSession.builder.appName("crystalperf-demo-tpch-q6-q9")
    for k, v in base.items():
        builder = builder.config(k, v)
    builder = configure(builder, output_dir=str(out_dir), sample_interval_ms=sample_interval_ms,
                        cpu_budget=cpu_budget)
    # The demo shows the report when the job is done: stop() waits for the (otherwise detached) analysis.
    spark = builder.config("spark.crystalperf.waitForAnalysisS", "900").getOrCreate()
    try:
        for name in ("lineitem", "orders", "part", "supplier", "partsupp", "nation"):
            spark.read.parquet(str(data_dir / name)).createOrReplaceTempView(name)
        spark.sparkContext.setJobDescription("TPC-H Q6")
        q6 = spark.sql(Q6).collect()
        spark.sparkContext.setJobDescription("TPC-H Q9")
        q9 = spark.sql(Q9).collect()
        log.info("crystalperf demo: Q6 revenue %s; Q9 %d rows", q6[0][0], len(q9))
    finally:
        spark.stop()
    import json

    report = out_dir / "crystalperf-report.json"
    return json.loads(report.read_text()) if report.is_file() else {}


def _generate_main(data_dir: str, scale: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName("crystalperf-demo-datagen").master("local[2]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    try:
        generate(spark, Path(data_dir), float(scale))
    finally:
        spark.stop()


if __name__ == "__main__":
    _generate_main(sys.argv[1], sys.argv[2])
