"""The names a trace's hooks and its analysis agree on: the native metrics the core reads, the attributes an
operation may carry, the thread states of sampled stacks."""

# Well-known native metric names that hooks fill in (per task, or per operation when it has no
# tasks). Frameworks may add their own names next to these; the core reads only these.
METRIC_RUN_TIME = "run_time_s"  # time the task/operation actually ran (excludes scheduling delay)
METRIC_CPU_TIME = "cpu_time_s"  # CPU time consumed by its thread(s)
METRIC_GC_TIME = "gc_time_s"
METRIC_NETWORK_WAIT = "network_wait_s"  # e.g. Spark shuffle fetch wait time
METRIC_DISK_TIME = "disk_time_s"  # e.g. Spark shuffle write time, spill time when known
METRIC_DEVICE_TIME = "device_time_s"  # time on an accelerator (TF on GPU)
METRIC_INPUT_BYTES = "input_bytes"  # read from storage
METRIC_OUTPUT_BYTES = "output_bytes"  # written to storage
METRIC_SHUFFLE_READ_BYTES = "shuffle_read_bytes"
METRIC_SHUFFLE_REMOTE_READ_BYTES = "shuffle_remote_read_bytes"
METRIC_SHUFFLE_WRITE_BYTES = "shuffle_write_bytes"
METRIC_SPILL_DISK_BYTES = "spill_disk_bytes"
METRIC_SPILL_MEMORY_BYTES = "spill_memory_bytes"
METRIC_PEAK_MEMORY_BYTES = "peak_memory_bytes"
METRIC_NETWORK_BYTES = "network_bytes"  # sent + received over the network (not shuffle)
METRIC_RECORDS_IN = "records_in"
METRIC_RECORDS_OUT = "records_out"
# Measured waiting, each a part of run_time_s like cpu_time_s (since 1.2): the time counts as waiting, never as
# a resource the job could be given more of.
METRIC_IDLE_TIME = "idle_time_s"  # waited for input: upstream sent nothing, or the source had nothing to read
METRIC_BACKPRESSURED_TIME = "backpressured_time_s"  # waited for downstream to take its output
METRIC_WAIT_TIME = "wait_time_s"  # other measured waiting (a training step waiting for its input pipeline)
# Time the task's threads were runnable but waited for a core (Linux schedstat run-queue delay): CPU demand
# that CPU time does not show on a busy machine, counted as CPU.
METRIC_CPU_WAIT_TIME = "cpu_wait_s"
# A task whose threads ran side by side (a FLIP-27 source's split fetchers beside its task thread) may use more than
# one core at once: all its threads' CPU time, which may exceed run_time_s (cpu_time_s, a part of run_time_s, stops
# at it), and the reader threads' part of it. Its main thread then did the rest.
METRIC_THREADS_CPU_TIME = "threads_cpu_time_s"
METRIC_READER_CPU_TIME = "reader_cpu_time_s"

# Operation attributes of one micro-batch of a streaming query (Spark structured streaming): the query's id and the
# batch, and where the hook saw the batch's progress, when its trigger fired (epoch seconds) and how long the trigger
# ran (the batch with its query's own steps), as decimal strings. A batch that waited for its trigger starts no
# earlier in a what-if (``crystalperf.core.profile.outside``, ``crystalperf.core.predict.simulation``).
ATTRIBUTE_STREAMING_QUERY = "streaming_query_id"
ATTRIBUTE_STREAMING_BATCH = "streaming_batch"
ATTRIBUTE_STREAMING_TRIGGER_START = "streaming_trigger_start"
ATTRIBUTE_STREAMING_TRIGGER_S = "streaming_trigger_s"

# Operation attribute a hook may set: what the operation's waiting was for (free text, e.g. "input pipeline").
ATTRIBUTE_WAITS_ON = "waits_on"
# ... this text where a source waited for input from outside the job (a rate limit, records arriving over time):
# its pace, which no resource of the job changes.
WAITS_ON_OUTSIDE_INPUT = "its input (rate-limited or empty)"
# ... and how what it waited on spent its own time, when the hook measured it but it is no operation of the
# trace (a training step's input pipeline): "cpu=0.25,disk=0.75,network=0".
ATTRIBUTE_WAITS_ON_WORK = "waits_on_work"

# The operation a sample key names for a driver's own work outside every operation of the trace (a PySpark
# program's Python between its calls into Spark): no operation has this id.
DRIVER_OPERATION = "(driver)"

# Thread states of sampled stacks (JVM Thread.State lower-cased; Python samplers give runnable or waiting).
THREAD_RUNNABLE = "runnable"
THREAD_BLOCKED = "blocked"
THREAD_WAITING = "waiting"
THREAD_TIMED_WAITING = "timed_waiting"
THREAD_STATES = ("", THREAD_RUNNABLE, THREAD_BLOCKED, THREAD_WAITING, THREAD_TIMED_WAITING)
