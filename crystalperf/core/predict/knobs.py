"""The framework settings a user types, each mapped to the what-if change it makes (``SettingsMap``: Spark's
executors, cores and memory, or ``local[N]`` and the driver's memory in local mode; Flink's
``parallelism.default``; TensorFlow's intra-op threads), and the values around the traced one that the
search (``crystalperf.core.predict.settings``) tries."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

from crystalperf.core import trace as tr
from crystalperf.core.predict.base import MAX_SLOTS, MEMORY_RANGE, Baseline, Changes
from crystalperf.core.predict.jvm import heaps
from crystalperf.core.units import parse_size

MIB = 1 << 20
GIB = 1 << 30
# Spark's UnifiedMemoryManager: the memory for execution and storage (what an executor's block manager reports,
# the trace's memory_bytes) is (heap - 300 MiB) x spark.memory.fraction, and Spark refuses a heap below 1.5x
# the reserved 300 MiB.
SPARK_RESERVED_BYTES = 300 * MIB
SPARK_MEMORY_FRACTION = 0.6
SPARK_MIN_HEAP = 450 * MIB
SPARK_DEFAULT_HEAP = GIB  # spark.executor.memory / spark.driver.memory when not set
# Flink's TaskManager heap is its framework heap (this much by default) and its task heap.
FLINK_TASK_HEAP = "taskmanager.memory.task.heap.size"
FLINK_FRAMEWORK_HEAP = 128 * MIB

# Doublings (and halvings) per setting away from its traced value: x8 ... /8.
MAX_STEPS = 3

_SHUFFLE_NOT_MODELLED = (
    "spark.sql.shuffle.partitions is not searched: a partition count gives the shuffle stages other tasks, whose "
    "sizes depend on how the keys hash into the new partitions, which the trace does not record (per-key sizes); "
    "the predictor replays the traced tasks only")



@dataclass(frozen=True)
class Knob:
    """One setting the search moves: its key as the framework spells it and its traced value."""

    setting: str
    current: int  # bytes for a memory size
    minimum: int = 1
    maximum: int = MAX_SLOTS

    def steps(self, up: bool) -> list[int]:
        """Doublings (``up``) or halvings of the traced value, within the setting's range, nearest first."""
        values: list[int] = []
        for k in range(1, MAX_STEPS + 1):
            value = self.current * 2 ** k if up else self.current // 2 ** k
            if not self.minimum <= value <= self.maximum or value == self.current or value in values:
                break
            values.append(value)
        return values


class SettingsMap(ABC):
    """A framework's settings as what-if changes, for one trace. Values are whole numbers (bytes for sizes)."""

    framework = ""

    def __init__(self, trace: tr.Trace, baseline: Baseline) -> None:
        self.trace = trace
        self.baseline = baseline
        self.knobs: list[Knob] = []
        self.not_searched: list[str] = []  # settings the issue names that have no model, and why

    @property
    def current(self) -> dict[str, int]:
        return {k.setting: k.current for k in self.knobs}

    @abstractmethod
    def changes(self, values: Mapping[str, int]) -> Changes:
        """The what-if changes these setting values make (only what differs from the traced run)."""

    @abstractmethod
    def values(self, changes: Changes) -> dict[str, int]:
        """The setting values that make these changes (the other direction). Keys without a setting raise."""

    @abstractmethod
    def typed(self, values: Mapping[str, int]) -> list[str]:
        """The changed settings as a user types them (a command-line flag, a config line, a call)."""

    def shown(self, setting: str, value: int) -> str:
        """A value as the framework's configuration writes it."""
        return str(value)

    def parse(self, setting: str, text: str) -> int:
        return int(text)

    @abstractmethod
    def cost(self, values: Mapping[str, int]) -> tuple[float, ...]:
        """What the setting spends, compared lexicographically (cores first, then memory)."""

    def requirements(self, values: Mapping[str, int]) -> list[str]:
        """What the setting needs from the machine(s) beyond the traced run's, for the user to check."""
        return []

    # -- the mapping in the framework's own words -------------------------------------------------------
    def changes_for(self, settings: Mapping[str, str]) -> Changes:
        """``{"spark.executor.instances": "4"}`` -> the what-if changes. Unknown settings raise ValueError."""
        values = self.current
        knobs = {k.setting: k for k in self.knobs}
        for key, text in settings.items():
            if key not in values:
                raise ValueError(f"{key} is not a setting the predictor models here "
                                 f"(known: {', '.join(values) or 'none'})")
            value = self.parse(key, text)
            if not knobs[key].minimum <= value <= knobs[key].maximum:
                raise ValueError(f"{key}={text} is outside {self.shown(key, knobs[key].minimum)} ... "
                                 f"{self.shown(key, knobs[key].maximum)}")
            values[key] = value
        return self.changes(values)

    def settings_for(self, changes: Changes) -> dict[str, str]:
        """The what-if changes -> the settings (as the framework's configuration writes them) that differ."""
        values = self.values(changes)
        current = self.current
        return {k: self.shown(k, v) for k, v in values.items() if v != current.get(k)}

    def _cpu_note(self, slots: int) -> list[str]:
        cpus = self.trace.environment.cpu_count
        if cpus and slots > cpus and len(self.trace.environment.hosts) <= 1:
            return [f"needs {slots} CPUs: the traced machine had {cpus}"]
        return []


class SparkSettings(SettingsMap):
    """Spark: executors, cores per executor, executor memory (driver's in local mode)."""

    framework = "spark"

    def __init__(self, trace: tr.Trace, baseline: Baseline) -> None:
        super().__init__(trace, baseline)
        props = trace.environment.properties
        master = props.get("spark.master", "")
        self.local = master.startswith("local") and not master.startswith("local-cluster")
        self.fraction = _float(props.get("spark.memory.fraction"), SPARK_MEMORY_FRACTION)
        self.memory_key = "spark.driver.memory" if self.local else "spark.executor.memory"
        self.heap = self._traced_heap(props.get(self.memory_key))
        self.cores_key = "spark.master" if self.local else "spark.executor.cores"
        if master.startswith("local-cluster"):
            # Spark's test mode: the master URL fixes the workers, their cores and memory (local-cluster[N,C,M]),
            # which no setting the search writes changes
            self.not_searched.append(
                f"local-cluster mode ({master}): its workers, their cores and their memory are the master URL's "
                "(local-cluster[workers,cores,memory MB]); the what-ifs above predict changing them")
            return
        if self.local:
            self.knobs.append(Knob(self.cores_key, baseline.cores_per_executor))
            self.not_searched.append(
                f"local mode ({props.get('spark.master')}): one JVM runs every task, so spark.executor.instances "
                "and spark.executor.cores do not apply; the executor's cores are the N of local[N] and its memory "
                "spark.driver.memory")
        else:
            self.knobs += [Knob("spark.executor.instances", baseline.executors), Knob(self.cores_key,
                                                                                      baseline.cores_per_executor)]
            if props.get("spark.dynamicAllocation.enabled", "").lower() == "true":
                self.not_searched.append(
                    "dynamic allocation was on: the executors are the ones the traced run had; pin a count with "
                    "spark.dynamicAllocation.enabled=false (or minExecutors = maxExecutors)")
        # The memory model needs the traced memory and the job's data size; without them a memory setting
        # would be predicted to change nothing, which is no evidence that less memory costs nothing.
        self.memory_modelled = bool(baseline.memory_bytes) and bool(baseline.data_bytes)
        if self.memory_modelled:
            self.knobs.append(Knob(self.memory_key, self.heap, minimum=SPARK_MIN_HEAP,
                                   maximum=int(MEMORY_RANGE[1])))
        else:
            self.not_searched.append(
                f"{self.memory_key} is not searched: the trace records no data size (nothing cached or spilled), "
                "so the memory model cannot tell what memory buys")
        self.not_searched.append(_SHUFFLE_NOT_MODELLED)

    def _traced_heap(self, declared: str | None) -> int:
        if (size := _size(declared)) is not None:
            return size
        if self.baseline.memory_bytes:
            # From the executors' reported memory, by the unified-memory formula backwards.
            per_executor = self.baseline.memory_bytes / max(1, self.baseline.executors)
            return round(per_executor / self.fraction + SPARK_RESERVED_BYTES)
        return SPARK_DEFAULT_HEAP

    def data_memory(self, heap: float) -> float:
        """Memory for execution and storage of one executor with this heap (Spark's unified memory)."""
        return max(0.0, heap - SPARK_RESERVED_BYTES) * self.fraction

    def heap_for(self, data_memory: float) -> int:
        """The heap whose unified memory is this, rounded up to a whole MiB (the inverse of data_memory)."""
        return math.ceil((data_memory / self.fraction + SPARK_RESERVED_BYTES) / MIB) * MIB

    def _executors(self, values: Mapping[str, int]) -> int:
        return values.get("spark.executor.instances", self.baseline.executors)

    def changes(self, values: Mapping[str, int]) -> Changes:
        b = self.baseline
        out: dict[str, float | str] = {}
        executors, cores = self._executors(values), values[self.cores_key]
        heap = values.get(self.memory_key, self.heap)
        if executors != b.executors:
            out["executors"] = executors
        if cores != b.cores_per_executor:
            out["cores"] = cores
        if self.memory_modelled and b.memory_bytes and (executors != b.executors or heap != self.heap):
            # In proportion to the traced figure, so an unchanged setting is exactly the traced memory even where
            # the JVM's usable heap differs a little from -Xmx.
            traced = b.executors * self.data_memory(self.heap)
            out["memory"] = b.memory_bytes * executors * self.data_memory(heap) / traced if traced else b.memory_bytes
        return Changes(out)

    def values(self, changes: Changes) -> dict[str, int]:
        b = self.baseline
        extra = [k for k in changes.values if k not in ("executors", "cores", "memory")]
        if self.local and "executors" in changes:
            extra.append("executors")
        if extra:
            raise ValueError(f"no Spark setting for {', '.join(extra)}")
        values = self.current
        executors = int(changes.number("executors", b.executors))
        if not self.local:
            values["spark.executor.instances"] = executors
        values[self.cores_key] = int(changes.number("cores", b.cores_per_executor))
        if "memory" in changes:
            if not b.memory_bytes:
                raise ValueError("the trace does not say how much memory the job had: no heap to scale")
            traced = b.executors * self.data_memory(self.heap)
            per_executor = changes.number("memory", b.memory_bytes) / b.memory_bytes * traced / executors
            values[self.memory_key] = self.heap_for(per_executor)
        return values

    def shown(self, setting: str, value: int) -> str:
        if setting == self.memory_key:
            return f"{value // GIB}g" if value % GIB == 0 else f"{math.ceil(value / MIB)}m"
        if setting == "spark.master":
            return f"local[{value}]"
        return str(value)

    def parse(self, setting: str, text: str) -> int:
        if setting == self.memory_key:
            return parse_size(text)
        if setting == "spark.master":
            inside = text.strip().removeprefix("local[").removesuffix("]")
            if not inside.isdigit():
                raise ValueError(f"spark.master: expected local[N], not {text!r}")
            return int(inside)
        return int(text)

    def typed(self, values: Mapping[str, int]) -> list[str]:
        lines = []
        for k in self.current:
            if values[k] == self.current[k]:
                continue
            if k == "spark.master":
                lines.append(f"--master {self.shown(k, values[k])}")
            elif k == "spark.driver.memory":
                # read when the driver's JVM starts: a flag of spark-submit, not a runtime --conf
                lines.append(f"--driver-memory {self.shown(k, values[k])}")
            else:
                lines.append(f"--conf {k}={self.shown(k, values[k])}")
        return lines

    def cost(self, values: Mapping[str, int]) -> tuple[float, ...]:
        executors = self._executors(values)
        return (executors * values[self.cores_key], executors * values.get(self.memory_key, self.heap))

    def requirements(self, values: Mapping[str, int]) -> list[str]:
        executors, cores = self._executors(values), values[self.cores_key]
        slots = executors * cores
        if self.local:
            notes = self._cpu_note(slots)
        elif slots > self.baseline.slots:
            notes = [f"needs {slots} cores in the cluster ({executors} executors x {cores} cores)"]
        else:
            notes = []
        partitions = _int(self.trace.environment.properties.get("spark.sql.shuffle.partitions"))
        if partitions and slots > partitions:
            notes.append(f"the shuffle stages keep spark.sql.shuffle.partitions={partitions} tasks: slots beyond "
                         f"{partitions} are predicted idle in them")
        return notes


class FlinkSettings(SettingsMap):
    """Flink: the default parallelism (every operator's, as the what-if key sets it) and, where the trace has a
    TaskManager heap its old collections kept busy (schema 1.11), the task heap (``memory``: the heap grows by what
    the task heap does)."""

    framework = "flink"

    def __init__(self, trace: tr.Trace, baseline: Baseline) -> None:
        super().__init__(trace, baseline)
        self.knobs.append(Knob("parallelism.default", baseline.slots))
        self.not_searched.append(
            "per-operator parallelism is not searched: the what-if key parallelism sets every operator's, and "
            "operators given their own in the job (setParallelism) keep it when only parallelism.default changes")
        # the heaps the streaming model can weigh: those whose old collections and live data the trace has
        self.heap = int(max((h.max_bytes for h in heaps(trace)), default=0))
        if self.heap:
            task = _size(trace.environment.properties.get(FLINK_TASK_HEAP)) or max(MIB, self.heap - FLINK_FRAMEWORK_HEAP)
            self.knobs.append(Knob(FLINK_TASK_HEAP, task, minimum=MIB, maximum=int(MEMORY_RANGE[1])))
        else:
            self.not_searched.append(
                f"{FLINK_TASK_HEAP} is not searched: no TaskManager's trace shows old collections of a heap whose live "
                "data and collector CPU time it measured (a reporter of part format 9 records them)")

    def _heap_for(self, values: Mapping[str, int]) -> float | None:
        """The heap these values give each TaskManager (None: as traced): the traced one, grown by the task heap's
        change."""
        if not self.heap or values.get(FLINK_TASK_HEAP, self.current.get(FLINK_TASK_HEAP)) == self.current.get(
                FLINK_TASK_HEAP):
            return None
        return float(self.heap + values[FLINK_TASK_HEAP] - self.current[FLINK_TASK_HEAP])

    def changes(self, values: Mapping[str, int]) -> Changes:
        p = values["parallelism.default"]
        out: dict[str, float | str] = {"parallelism": p} if p != self.baseline.slots else {}
        heap = self._heap_for(values)
        if heap is not None:
            out["memory"] = heap
        return Changes(out)

    def values(self, changes: Changes) -> dict[str, int]:
        extra = [k for k in changes.values if k not in ("parallelism", "memory") or (k == "memory" and not self.heap)]
        if extra:
            raise ValueError(f"no Flink setting for {', '.join(extra)}")
        values = {**self.current, "parallelism.default": int(changes.number("parallelism", self.baseline.slots))}
        if "memory" in changes:
            values[FLINK_TASK_HEAP] = max(MIB, round(self.current[FLINK_TASK_HEAP] + changes.number("memory", self.heap)
                                                     - self.heap))
        return values

    def shown(self, setting: str, value: int) -> str:
        if setting == FLINK_TASK_HEAP:
            return f"{value // GIB}g" if value % GIB == 0 else f"{math.ceil(value / MIB)}m"
        return str(value)

    def parse(self, setting: str, text: str) -> int:
        return parse_size(text) if setting == FLINK_TASK_HEAP else int(text)

    def typed(self, values: Mapping[str, int]) -> list[str]:
        return [f"{k}: {self.shown(k, values[k])}" for k in self.current if values[k] != self.current[k]]

    def cost(self, values: Mapping[str, int]) -> tuple[float, ...]:
        return (values["parallelism.default"], values.get(FLINK_TASK_HEAP, 0))

    def requirements(self, values: Mapping[str, int]) -> list[str]:
        notes = []
        task = values.get(FLINK_TASK_HEAP, 0) - self.current.get(FLINK_TASK_HEAP, 0)
        if task > 0:
            notes.append(f"needs {self.shown(FLINK_TASK_HEAP, task)} more heap per TaskManager: raise "
                         "taskmanager.memory.process.size by as much (or take it from the managed memory)")
        p = values["parallelism.default"]
        if p <= self.baseline.slots:
            return notes
        return notes + self._slot_requirements(p)

    def _slot_requirements(self, p: int) -> list[str]:
        env = self.trace.environment
        if env.cluster_slots and env.cluster_workers:
            had = (f"the cluster had {env.cluster_slots} on {env.cluster_workers} "
                   f"TaskManager{'s' if env.cluster_workers != 1 else ''}")
            more = "" if p <= env.cluster_slots else " (more TaskManagers or taskmanager.numberOfTaskSlots)"
            return [f"needs {p} task slots: {had}{more}"]
        return [f"needs {p} task slots (taskmanager.numberOfTaskSlots x TaskManagers)"] + self._cpu_note(p)


class TensorFlowSettings(SettingsMap):
    """TensorFlow: the intra-op thread pool (the threads the Amdahl model splits each kernel over)."""

    framework = "tensorflow"
    setting = "intra_op_parallelism_threads"

    def __init__(self, trace: tr.Trace, baseline: Baseline) -> None:
        super().__init__(trace, baseline)
        # Keras 3 on another backend: its ops run in that framework's thread pool, not TensorFlow's
        self.backend = trace.environment.properties.get("keras.backend", "tensorflow")
        if self.backend == "torch":
            self.setting = "torch_num_threads"
        if self.backend in ("tensorflow", "torch"):
            self.knobs.append(Knob(self.setting, baseline.cores_per_executor))
        else:
            self.not_searched.append(
                f"Keras runs on its {self.backend} backend, whose CPU thread pool has no setting searched here")
        self.not_searched += [
            "inter_op_parallelism_threads is not searched: the threads model takes the traced pools' parallel "
            "fraction as one (Amdahl, between the kernels that ran side by side and the CPU utilisation) and cannot "
            "change the inter-op pool alone",
            "the input pipeline's prefetch / num_parallel_calls are not searched: the pipeline model takes the "
            "parallelism it measured as it was; no what-if key changes it"]

    def changes(self, values: Mapping[str, int]) -> Changes:
        t = values[self.setting]
        return Changes({"cores": t} if t != self.baseline.cores_per_executor else {})

    def values(self, changes: Changes) -> dict[str, int]:
        extra = [k for k in changes.values if k != "cores"]
        if extra:
            raise ValueError(f"no TensorFlow threading setting for {', '.join(extra)}")
        return {self.setting: int(changes.number("cores", self.baseline.cores_per_executor))}

    def typed(self, values: Mapping[str, int]) -> list[str]:
        t = values[self.setting]
        call = "torch.set_num_threads" if self.backend == "torch" else "tf.config.threading.set_intra_op_parallelism_threads"
        return [f"{call}({t})"] if t != self.baseline.cores_per_executor else []

    def cost(self, values: Mapping[str, int]) -> tuple[float, ...]:
        return (values[self.setting],)

    def requirements(self, values: Mapping[str, int]) -> list[str]:
        return self._cpu_note(values[self.setting])


def settings_map(trace: tr.Trace, baseline: Baseline) -> SettingsMap | None:
    """The settings of the trace's framework, or None for a framework without a mapping."""
    kinds: dict[str, type[SparkSettings | FlinkSettings | TensorFlowSettings]] = {
        "spark": SparkSettings, "flink": FlinkSettings, "tensorflow": TensorFlowSettings}
    kind = kinds.get(trace.application.framework)
    return kind(trace, baseline) if kind is not None else None


def _float(text: str | None, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if 0.0 < value <= 1.0 else default


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _size(text: str | None) -> int | None:
    try:
        return parse_size(text) if text else None
    except ValueError:
        return None
