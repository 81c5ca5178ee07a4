"""Spark properties as a trace keeps them: a secret's value replaced by Spark's own replacement text.

The same rules as the listener's ``Redaction.java`` (a test runs both on the same cases): a value is redacted when
its name or the value itself matches ``spark.redaction.regex`` (Spark's, default :data:`SPARK_DEFAULT`), when its
name looks like a secret's, names an Azure storage key or SAS token or an executor environment variable, or when
the value is a URL with credentials in it (a JDBC ``password=`` parameter, ``user:password@host``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REPLACEMENT = "*********(redacted)"
SPARK_DEFAULT = r"(?i)secret|password|token|access[.]key"
_NAMES = re.compile(
    r"(?i)secret|password|passwd|token|credential|\.key$|keystore|truststore|auth|access[.]key|"
    r"fs\.azure\.account\.key|fs\.azure\.sas\.|^spark\.executorEnv\.|^spark\.yarn\.appMasterEnv\.|"
    r"^spark\.kubernetes\.driverEnv\.")
_CREDENTIAL_VALUES = re.compile(r"(?i)[;&?:]\s*(password|pwd|passwd|secret|token|sig)\s*=|://[^/@\s:]*:[^/@\s]*@")


def _spark_pattern(regex: str | None) -> re.Pattern[str]:
    if regex:
        # Spark's regexes are Java's; an inline (?i) at the start is the common case and means the same here.
        try:
            return re.compile(regex)
        except re.error:
            pass
    return re.compile(SPARK_DEFAULT)


def is_secret(key: str, value: str, spark_regex: re.Pattern[str] | None = None) -> bool:
    spark = spark_regex or _spark_pattern(None)
    return bool(spark.search(key) or spark.search(value) or _NAMES.search(key) or _CREDENTIAL_VALUES.search(value))


def redact(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties with every secret's value replaced by :data:`REPLACEMENT` (the names are kept)."""
    spark = _spark_pattern(properties.get("spark.redaction.regex"))
    return {key: REPLACEMENT if is_secret(key, value, spark) else value for key, value in properties.items()}
