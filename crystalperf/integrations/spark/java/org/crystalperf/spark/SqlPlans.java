package org.crystalperf.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.spark.sql.execution.SparkPlanInfo;
import org.apache.spark.sql.execution.metric.SQLMetricInfo;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The physical plan of every SQL execution, and which stages ran which plan node, for the trace's
 * {@code sql_queries}. A plan node is tied to a stage the way Spark's own SQL tab ties them: the node's SQL
 * metrics are accumulators, and a stage's completed info lists the accumulators its tasks updated. Nodes with
 * no metrics of their own (Project, InputAdapter) are placed by the analysis, from their place in the tree.
 *
 * <p>Adaptive execution replaces an execution's plan as its query stages finish; the last plan is kept, and
 * the accumulators of earlier versions still name their nodes (a re-planned node keeps its metrics). Memory is
 * bounded: at most {@link #MAX_EXECUTIONS} plans of at most {@link #MAX_NODES} nodes, texts clipped.
 * Not thread-safe: the listener calls it under its own lock.
 */
final class SqlPlans {
    static final int MAX_EXECUTIONS = 1000;
    static final int MAX_NODES = 2000;
    static final int MAX_DETAIL = 400;
    static final int MAX_METRIC_IDS = 1_000_000;

    static final class Node {
        final String name;
        final String detail;
        final int parent;
        final long[] metricIds;

        Node(String name, String detail, int parent, long[] metricIds) {
            this.name = name;
            this.detail = detail;
            this.parent = parent;
            this.metricIds = metricIds;
        }
    }

    private static final class Execution {
        final String description;
        List<Node> nodes;
        boolean clipped;

        Execution(String description) {
            this.description = description;
        }
    }

    private final Map<Long, Execution> executions = new TreeMap<>();
    /** Accumulator id of a SQL metric -> the execution whose plan declared it. */
    private final Map<Long, Long> metricOwner = new HashMap<>();
    /** Stage id -> the SQL metric accumulators its tasks updated (sorted). */
    private final Map<Integer, long[]> stageMetrics = new HashMap<>();
    private long executionsLeftOut;

    /** An execution started, or adaptive execution re-planned it: its plan is now {@code plan}. */
    void plan(long executionId, String description, SparkPlanInfo plan) {
        Execution ex = executions.get(executionId);
        if (ex == null) {
            if (executions.size() >= MAX_EXECUTIONS) {
                executionsLeftOut++;
                return;
            }
            ex = new Execution(description == null ? "" : CrystalPerfListener.clip(description));
            executions.put(executionId, ex);
        }
        List<Node> nodes = new ArrayList<>();
        ex.clipped = flatten(plan, -1, nodes);
        ex.nodes = nodes;
        for (Node n : nodes) {
            for (long id : n.metricIds) {
                if (metricOwner.size() < MAX_METRIC_IDS) {
                    metricOwner.put(id, executionId);
                }
            }
        }
    }

    /** Pre-order, iteratively (a deep plan must not exhaust the listener thread's stack); true when clipped. */
    private static boolean flatten(SparkPlanInfo root, int rootParent, List<Node> out) {
        ArrayList<Object[]> stack = new ArrayList<>();
        stack.add(new Object[] {root, rootParent});
        while (!stack.isEmpty()) {
            Object[] top = stack.remove(stack.size() - 1);
            SparkPlanInfo info = (SparkPlanInfo) top[0];
            if (out.size() >= MAX_NODES) {
                return true;
            }
            List<SQLMetricInfo> metrics = CollectionConverters.asJava(info.metrics());
            long[] ids = new long[metrics.size()];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = metrics.get(i).accumulatorId();
            }
            Arrays.sort(ids);
            int index = out.size();
            out.add(new Node(clipTo(info.nodeName(), 200), clipTo(info.simpleString(), MAX_DETAIL),
                    (Integer) top[1], ids));
            List<SparkPlanInfo> children = CollectionConverters.asJava(info.children());
            for (int i = children.size() - 1; i >= 0; i--) {
                stack.add(new Object[] {children.get(i), index});
            }
        }
        return false;
    }

    private static String clipTo(String s, int max) {
        if (s == null) {
            return "";
        }
        return s.length() <= max ? s : s.substring(0, max) + "...";
    }

    /** A stage completed; {@code accumulatorIds} are those its tasks updated. Only SQL metrics are kept. */
    void stageCompleted(int stageId, Iterable<Object> accumulatorIds) {
        TreeSet<Long> kept = new TreeSet<>();
        for (Object id : accumulatorIds) {
            long v = ((Number) id).longValue();
            if (metricOwner.containsKey(v)) {
                kept.add(v);
            }
        }
        if (kept.isEmpty()) {
            return;
        }
        long[] ids = new long[kept.size()];
        int i = 0;
        for (long v : kept) {
            ids[i++] = v;
        }
        stageMetrics.put(stageId, ids);
    }

    boolean isEmpty() {
        return executions.isEmpty();
    }

    String warning() {
        return executionsLeftOut > 0 ? executionsLeftOut + " SQL execution plan(s) not kept (the first "
                + MAX_EXECUTIONS + " are in sql_queries)" : null;
    }

    /** The trace's {@code sql_queries}: per execution its plan nodes, each with the stages that updated it. */
    List<Map<String, Object>> toTrace() {
        // accumulator -> stages that updated it, for the executions' nodes to look up
        Map<Long, TreeSet<Integer>> stagesOf = new HashMap<>();
        for (Map.Entry<Integer, long[]> e : stageMetrics.entrySet()) {
            for (long id : e.getValue()) {
                stagesOf.computeIfAbsent(id, k -> new TreeSet<>()).add(e.getKey());
            }
        }
        List<Map<String, Object>> out = new ArrayList<>();
        for (Map.Entry<Long, Execution> e : executions.entrySet()) {
            Execution ex = e.getValue();
            List<Map<String, Object>> nodes = new ArrayList<>();
            for (int i = 0; i < ex.nodes.size(); i++) {
                Node n = ex.nodes.get(i);
                Map<String, Object> node = new LinkedHashMap<>();
                node.put("id", i);
                node.put("name", n.name);
                if (!n.detail.isEmpty() && !n.detail.equals(n.name)) {
                    node.put("detail", n.detail);
                }
                if (n.parent >= 0) {
                    node.put("parent", n.parent);
                }
                TreeSet<Integer> stages = new TreeSet<>();
                for (long id : n.metricIds) {
                    TreeSet<Integer> s = stagesOf.get(id);
                    if (s != null) {
                        stages.addAll(s);
                    }
                }
                if (!stages.isEmpty()) {
                    node.put("stages", new ArrayList<>(stages));
                }
                nodes.add(node);
            }
            Map<String, Object> query = new LinkedHashMap<>();
            query.put("execution_id", Long.toString(e.getKey()));
            if (!ex.description.isEmpty()) {
                query.put("description", ex.description);
            }
            if (ex.clipped) {
                query.put("clipped", true);
            }
            query.put("nodes", nodes);
            out.add(query);
        }
        return out;
    }
}
