package org.crystalperf.spark;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * Spark properties as the trace keeps them: a secret's value replaced by Spark's own replacement text. Kept in
 * step with crystalperf/integrations/spark/redact.py (the event-log reader's), which a test compares.
 *
 * A value is redacted when its name or the value itself matches {@code spark.redaction.regex} (as Spark's UI
 * does; default {@value #SPARK_DEFAULT}), when its name matches our own pattern of secret-looking names, names
 * an Azure storage key or SAS token, or is an executor environment variable, or when the value is a URL with
 * credentials in it (a JDBC {@code password=} parameter, {@code user:password@host}).
 */
final class Redaction {
    static final String REPLACEMENT = "*********(redacted)";
    static final String SPARK_DEFAULT = "(?i)secret|password|token|access[.]key";
    static final Pattern NAMES = Pattern.compile(
            "(?i)secret|password|passwd|token|credential|\\.key$|keystore|truststore|auth|access[.]key|"
            + "fs\\.azure\\.account\\.key|fs\\.azure\\.sas\\.|^spark\\.executorEnv\\.|^spark\\.yarn\\.appMasterEnv\\.|"
            + "^spark\\.kubernetes\\.driverEnv\\.");
    static final Pattern CREDENTIAL_VALUES = Pattern.compile(
            "(?i)[;&?:]\\s*(password|pwd|passwd|secret|token|sig)\\s*=|://[^/@\\s:]*:[^/@\\s]*@");

    private Redaction() {}

    static Map<String, String> redact(Map<String, String> properties) {
        Pattern spark;
        try {
            spark = Pattern.compile(properties.getOrDefault("spark.redaction.regex", SPARK_DEFAULT));
        } catch (PatternSyntaxException e) {
            spark = Pattern.compile(SPARK_DEFAULT);
        }
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, String> kv : properties.entrySet()) {
            String key = kv.getKey();
            String value = kv.getValue() == null ? "" : kv.getValue();
            boolean secret = spark.matcher(key).find() || spark.matcher(value).find() || NAMES.matcher(key).find()
                    || CREDENTIAL_VALUES.matcher(value).find();
            out.put(key, secret ? REPLACEMENT : value);
        }
        return out;
    }
}
