package org.crystalperf.spark;

import org.apache.spark.SparkConf;
import org.crystalperf.common.CpuBudget;

/**
 * The JVM's CPU budget for the hook ({@code spark.crystalperf.cpuBudget}: a share of the cores the process may use,
 * default 0.01; 0 turns the adaptation off): one for the process, shared by its stack sampler and its I/O counters
 * (in local mode the listener's and the executor plugin's are in the same JVM).
 */
final class Budgets {
    static final String KEY = "spark.crystalperf.cpuBudget";
    private static CpuBudget shared;

    private Budgets() {}

    static synchronized CpuBudget of(SparkConf conf) {
        if (shared == null) {
            double share = CpuBudget.DEFAULT_SHARE;
            try {
                share = conf.getDouble(KEY, CpuBudget.DEFAULT_SHARE);
            } catch (RuntimeException e) {
                CrystalPerfListener.LOG.warning("crystalperf: " + KEY + " is not a number; using " + share);
            }
            shared = new CpuBudget(share);
        }
        return shared;
    }
}
