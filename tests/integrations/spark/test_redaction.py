"""Property redaction shared by the listener (Redaction.java) and the event-log reader (redact.py)."""

from __future__ import annotations

import pytest

from crystalperf.integrations.spark.redact import REPLACEMENT, redact

SECRET = [
    ("spark.hadoop.fs.s3a.secret.key", "abc"),
    ("spark.ssl.keyStorePassword", "pw"),
    ("spark.hadoop.fs.s3a.access.key", "AKIA..."),
    ("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "k"),
    ("fs.azure.sas.container.acct.blob.core.windows.net", "sv=1"),
    ("spark.executorEnv.AWS_PROFILE", "prod"),
    ("spark.myapp.url", "jdbc:postgresql://db/sales?user=etl&password=hunter2"),
    ("spark.myapp.url2", "jdbc:sqlserver://db;user=etl;password=hunter2"),
    ("spark.myapp.dsn", "mysql://etl:hunter2@db:3306/sales"),
    ("spark.myapp.note", "my Token is here"),  # the value matches Spark's default regex
    ("spark.authenticate.secret", "s"),
]
PLAIN = [
    ("spark.master", "local[2]"),
    ("spark.jars", "/opt/jars/crystalperf-spark.jar"),
    ("spark.myapp.url", "jdbc:postgresql://db/sales?user=etl"),
    ("spark.sql.shuffle.partitions", "4"),
]


@pytest.mark.parametrize(("key", "value"), SECRET)
def test_secrets_are_redacted(key: str, value: str) -> None:
    assert redact({key: value}) == {key: REPLACEMENT}


@pytest.mark.parametrize(("key", "value"), PLAIN)
def test_plain_properties_are_kept(key: str, value: str) -> None:
    assert redact({key: value}) == {key: value}


def test_the_applications_own_redaction_regex_is_used() -> None:
    props = {"spark.redaction.regex": "(?i)internal", "spark.myapp.internal.id": "7", "spark.myapp.other": "x"}
    redacted = redact(props)
    assert redacted["spark.myapp.internal.id"] == REPLACEMENT and redacted["spark.myapp.other"] == "x"
