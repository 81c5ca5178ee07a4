package org.crystalperf.flink;

import java.util.Properties;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/** Listed in META-INF/services so Flink finds the reporter by {@code metrics.reporter.<name>.factory.class}. */
public class CrystalPerfReporterFactory implements MetricReporterFactory {
    @Override
    public MetricReporter createMetricReporter(Properties properties) {
        return new CrystalPerfReporter();
    }
}
