package org.crystalperf.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.crystalperf.common.IoCounters;

/**
 * The I/O counter rows an executor took since its previous shipment, sent to the driver plugin (the trace's
 * {@code io}, source {@code executor:<id>}). Plain arrays: the rows cross the plugin RPC.
 */
public final class IoBatch implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String source;
    public final String host;
    /** Per row: t, storage read, storage write, network rx, network tx, read limit, write limit, process CPU, host
     * busy CPU, host CPU, host CPUs, CPU limit (NaN: null). */
    public final double[][] rows;

    IoBatch(String source, String host, List<IoCounters.Row> taken) {
        this.source = source;
        this.host = host;
        this.rows = new double[taken.size()][];
        for (int i = 0; i < taken.size(); i++) {
            IoCounters.Row r = taken.get(i);
            rows[i] = new double[] {r.t, nan(r.storageReadBytes), nan(r.storageWriteBytes), nan(r.networkRxBytes),
                    nan(r.networkTxBytes), nan(r.diskReadLimit), nan(r.diskWriteLimit), nan(r.processCpuS),
                    nan(r.hostCpuBusyS), nan(r.hostCpuS), r.hostCpus == null ? Double.NaN : r.hostCpus,
                    nan(r.cpuLimit)};
        }
    }

    private static double nan(Double d) {
        return d == null ? Double.NaN : d;
    }

    private static Double orNull(double d) {
        return Double.isNaN(d) ? null : d;
    }

    /** The rows as the trace's {@code IoSample} documents. */
    List<Map<String, Object>> documents() {
        List<Map<String, Object>> docs = new ArrayList<>(rows.length);
        for (double[] r : rows) {
            if (r == null || r.length < 7) {
                continue;
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("t", r[0]);
            m.put("source", source);
            m.put("host", host);
            m.put("storage_read_bytes", orNull(r[1]));
            m.put("storage_write_bytes", orNull(r[2]));
            m.put("network_rx_bytes", orNull(r[3]));
            m.put("network_tx_bytes", orNull(r[4]));
            m.put("disk_read_limit", orNull(r[5]));
            m.put("disk_write_limit", orNull(r[6]));
            if (r.length >= 12) {
                m.put("process_cpu_s", orNull(r[7]));
                m.put("host_cpu_busy_s", orNull(r[8]));
                m.put("host_cpu_s", orNull(r[9]));
                m.put("host_cpus", Double.isNaN(r[10]) ? null : (Object) (int) r[10]);
                m.put("cpu_limit", orNull(r[11]));
            }
            docs.add(m);
        }
        return docs;
    }
}
