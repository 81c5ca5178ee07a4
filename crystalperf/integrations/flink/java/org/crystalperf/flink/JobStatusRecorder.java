package org.crystalperf.flink;

import java.util.logging.Level;
import java.util.logging.Logger;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.core.execution.JobExecutionStatusEvent;
import org.apache.flink.core.execution.JobStatusChangedEvent;
import org.apache.flink.core.execution.JobStatusChangedListener;
import org.apache.flink.core.execution.JobStatusChangedListenerFactory;

/**
 * Keeps how each job ended (finished, failed, cancelled, suspended), for the reporter's part of the job: metric
 * reporters see a job's metrics go away, never its status. Set with
 * {@code execution.job-status-changed-listeners: org.crystalperf.flink.JobStatusRecorder}; Flink calls it on the
 * JobManager's thread that changes the job's status, before the job's metric groups close.
 *
 * <p>The status goes to a JVM system property, not a field: Flink may load this class through the job's class
 * loader (the jar in {@code pipeline.jars}) while the reporter's class comes from another, and a static field would
 * not be shared between the two. At most {@link #MAX_JOBS} jobs are kept. Nothing here may fail the job.
 */
public final class JobStatusRecorder implements JobStatusChangedListenerFactory {
    private static final Logger LOG = Logger.getLogger(JobStatusRecorder.class.getName());
    static final String PROPERTY_PREFIX = "crystalperf.flink.job.status.";
    static final int MAX_JOBS = 256;
    static final int MAX_FAILURE_CHARS = 2000;

    @Override
    public JobStatusChangedListener createListener(Context context) {
        return JobStatusRecorder::record;
    }

    static void record(JobStatusChangedEvent event) {
        try {
            if (!(event instanceof JobExecutionStatusEvent)) {
                return;  // the client's job-created event
            }
            JobExecutionStatusEvent change = (JobExecutionStatusEvent) event;
            JobStatus status = change.newStatus();
            if (status == null || !(status.isTerminalState())) {
                return;
            }
            String failure = failureOf(change.exception());
            if (failure.length() > MAX_FAILURE_CHARS) {
                failure = failure.substring(0, MAX_FAILURE_CHARS);
            }
            synchronized (JobStatusChangedListener.class) {  // a class every loader of this one shares
                java.util.Properties properties = System.getProperties();
                long kept = properties.stringPropertyNames().stream().filter(k -> k.startsWith(PROPERTY_PREFIX))
                        .count();
                if (kept >= MAX_JOBS) {
                    properties.stringPropertyNames().stream().filter(k -> k.startsWith(PROPERTY_PREFIX))
                            .forEach(properties::remove);
                }
                properties.setProperty(PROPERTY_PREFIX + change.jobId(), status.name() + "\n" + failure);
            }
        } catch (Throwable t) {  // never the job's problem
            LOG.log(Level.WARNING, "crystalperf: could not record a job's status", t);
        }
    }

    /** The exception and, when it wraps another, the one at the bottom: the restart strategy's "Recovery is
     * suppressed" says only that the job gave up, its cause why. */
    static String failureOf(Throwable failure) {
        if (failure == null) {
            return "";
        }
        Throwable root = failure;
        for (int depth = 0; depth < 32 && root.getCause() != null && root.getCause() != root; depth++) {
            root = root.getCause();
        }
        return root == failure ? String.valueOf(failure) : failure + " (caused by " + root + ")";
    }

    /** How the job ended, {@code {status, failure}} ("" when it did not fail), or null when not recorded. */
    static String[] statusOf(String jobId) {
        String recorded = System.getProperty(PROPERTY_PREFIX + jobId);
        if (recorded == null) {
            return null;
        }
        int cut = recorded.indexOf('\n');
        return cut < 0 ? new String[] {recorded, ""} : new String[] {recorded.substring(0, cut), recorded.substring(cut + 1)};
    }
}
