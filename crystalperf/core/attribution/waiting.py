"""Waiting is not a resource: thread states and synchronisation/scheduling plumbing frames.

A sampled thread that is parked, sleeping, blocked on a lock or idle in an event loop uses no CPU, disk or
network; what its stack says it waits *for* is in the first frame below the plumbing (a shuffle fetch
iterator waits on the network, a file channel read on the disk). Plumbing frames — locks, conditions,
sleeps, blocking queues, thread-pool and event-loop run loops, Flink's mailbox — are therefore never "the
function" of a sample: the scan skips them, and a stack made of nothing else is plain waiting.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from crystalperf.core import trace as tr
from crystalperf.core.resources import WAITING_ONLY, ResourceVector

# Frames that mean the thread is not running whatever state the JVM reports: a thread in epoll_wait is
# RUNNABLE to the JVM, and Python samplers of old traces give no state at all.
_WAIT_PRIMITIVES = re.compile(
    r"^(?:"
    r"java\.lang\.Object\.wait\d*|java\.lang\.Thread\.(?:sleep\d*|sleepNanos\d*|yield\d*|onSpinWait|join)"
    r"|jdk\.internal\.misc\.Unsafe\.park|sun\.misc\.Unsafe\.park"
    r"|java\.util\.concurrent\.locks\.LockSupport\.park\w*"
    r"|(?:[\w.$]*\.)?sun\.nio\.ch\.(?:EPoll|KQueue|Poll)\.wait\w*|(?:[\w.$]*\.)?sun\.nio\.ch\.\w*SelectorImpl\.\w+"
    r"|(?:[\w.$]*\.)?io\.netty\.channel\.epoll\.Native\.epollWait\w*"
    r"|(?:[\w.$]*\.)?io\.netty\.channel\.kqueue\.Native\.keventWait\w*"
    r"|time\.sleep|threading\.(?:Condition\.wait|Event\.wait|Thread\.join|Semaphore\.acquire|Barrier\.wait)"
    r"|(?:[\w.]*\.)?selectors\.\w+\.select|select\.(?:select|poll|epoll\.poll)"
    # the call a sampled Python thread was blocked in (crystalperf.core.record.syscalls): a timer, a lock or poll, or
    # another process of this host (a pipe, a loopback socket)
    r"|kernel\.(?:sleep|wait|local)"
    r")$"
)
# A thread sleeping waits for a timer, whatever the function that asked for it: no resource is involved. One
# blocked on a pipe or a loopback socket waits for another process of this host (a Python worker for its JVM),
# however much the Python frames below look like reading a socket.
_SLEEPS = re.compile(r"^(?:time\.sleep|java\.lang\.Thread\.(?:sleep\d*|sleepNanos\d*)|kernel\.sleep|kernel\.local)$")

# Classes (and Python modules) whose frames only schedule or synchronise work. Matched on the frame's
# qualified name; shaded copies (org.apache.flink.shaded.netty4.io.netty...) match too.
_PLUMBING_PREFIXES = re.compile(
    r"^(?:"
    r"java\.lang\.Object\.wait|java\.lang\.Thread\.|java\.lang\.VirtualThread\.|java\.lang\.ref\."
    r"|jdk\.internal\.misc\.Unsafe\.park|sun\.misc\.Unsafe\.park|jdk\.internal\.vm\.Continuation"
    r"|java\.util\.concurrent\.locks\."
    r"|java\.util\.concurrent\.(?:ThreadPoolExecutor|ScheduledThreadPoolExecutor|FutureTask|ForkJoinPool"
    r"|ForkJoinWorkerThread|ForkJoinTask|CompletableFuture|CountDownLatch|Semaphore|CyclicBarrier|Phaser"
    r"|Exchanger|SynchronousQueue|LinkedBlockingQueue|LinkedBlockingDeque|ArrayBlockingQueue"
    r"|PriorityBlockingQueue|DelayQueue|LinkedTransferQueue|Executors|TimeUnit)\b"
    r"|(?:[\w.$]*\.)?sun\.nio\.ch\.(?:EPoll|KQueue|Poll)\.wait|(?:[\w.$]*\.)?sun\.nio\.ch\.\w*SelectorImpl\."
    r"|(?:[\w.$]*\.)?io\.netty\.channel\.(?:epoll\.(?:Native\.epollWait|EpollEventLoop)|kqueue\.(?:Native\.keventWait"
    r"|KQueueEventLoop)|nio\.NioEventLoop|SingleThreadEventLoop)"
    r"|(?:[\w.$]*\.)?io\.netty\.util\.(?:concurrent\.(?:SingleThreadEventExecutor|FastThreadLocalRunnable"
    r"|DefaultThreadFactory|GlobalEventExecutor)|internal\.ThreadExecutorMap)"
    r"|org\.apache\.flink\.streaming\.runtime\.tasks\.mailbox\."
    r"|org\.apache\.flink\.streaming\.runtime\.tasks\.StreamTask\.(?:runMailboxLoop|invoke|restoreAndInvoke"
    r"|lambda\$\w*)|org\.apache\.flink\.streaming\.runtime\.tasks\.StreamTask\$ResumeWrapper\."
    r"|org\.apache\.flink\.runtime\.taskmanager\.Task\.(?:run|doRun|runWithSystemExitMonitoring|restoreAndInvoke"
    r"|lambda\$\w*)"
    r"|org\.apache\.flink\.util\.concurrent\.|org\.apache\.flink\.runtime\.concurrent\."
    r"|org\.apache\.flink\.runtime\.(?:rpc\.pekko|rpc\.akka)\.|org\.apache\.pekko\.dispatch\.|akka\.dispatch\."
    r"|scala\.concurrent\.(?:impl\.|Await|forkjoin\.|BlockContext|ExecutionContext)"
    r"|org\.apache\.spark\.util\.(?:(?:Spark)?ThreadUtils|UninterruptibleThread\.run)"
    r"|org\.apache\.spark\.executor\.Executor\$TaskRunner\.run"
    r"|threading\.|queue\.|_queue\.|selectors\.|select\.|concurrent\.futures\.|asyncio\.(?:base_events|events"
    r"|runners|selector_events|locks|queues|tasks)\.|socketserver\.\w+\.serve_forever|time\.sleep"
    r"|multiprocessing\.(?:connection\.wait|synchronize\.|pool\.worker|queues\.)"
    r"|(?:[\w.$]*\.)?com\.google\.common\.util\.concurrent\.(?:AbstractFuture(?:State)?|OverflowAvoidingLockSupport"
    r"|Uninterruptibles|Platform)\b"
    # Flink's executors that hand a task to a JDK pool with the caller's logging context
    r"|org\.apache\.flink\.util\.MdcAware\w*\."
    # a cache's lookup that loads a missing value or waits for the thread loading it, and for the segment's lock
    # around that (Beam's Java harness under PyFlink's operators, Flink's cache of compiled code): a loader's own
    # work is above these frames, the caller's below
    r"|(?:[\w.$]*\.)?com\.google\.common\.cache\.LocalCache(?:\$LoadingValueReference\.waitForValue"
    r"|\$Segment\.(?:get|waitForLoadingValue|lockedGetOrLoad)|(?:\$Local\w*Cache)?\.(?:get|getOrLoad|getUnchecked))\b"
    # Spark's per-key lock (a Python worker's creation, a block's lock)
    r"|org\.apache\.spark\.util\.KeyLock\."
    # Beam's Python harness waiting on its futures (a PyFlink worker's state commit waiting for the JVM's answer)
    r"|apache_beam\.runners\.worker\.sdk_worker\.(?:_Future|_DeferredCall)\."
    r")"
)


# Frames of a thread that hands its work to another sampled process and reads the answers back (a Spark task
# waiting for its Python worker): the worker's own samples say where that time went, so a sample whose work
# is such a read says nothing of its own. Scanned past plumbing and the JDK's stream/socket frames.
_DELEGATE_READS = re.compile(
    r"^org\.apache\.spark\.(?:api\.python|sql\.execution\.python)\.[\w$]*(?:Reader|Runner|Output|Iterator)"
    r"[\w$]*\.(?:read\w*|hasNext|next|handle\w*)$"
    # PyFlink's Python operators waiting for their Beam worker: its results, its bundle, its start-up
    r"|^org\.apache\.flink\.streaming\.api\.runners\.python\.beam\.[\w$]*\.(?:takeResult|pollResult|flush"
    r"|finishBundle)$"
    r"|^org\.apache\.beam\.runners\.fnexecution\.(?:control|data)\.[\w$]*\.(?:getClient|take"
    r"|createOutboundAggregator|close|awaitCompletion)$"
    # PyFlink's thread mode: the task thread runs the Python code itself, which the embedded sampler sees
    r"|^pemja\.core\.PythonInterpreter\.(?:invoke\w*|exec)$"
)
_STREAM_FRAMES = re.compile(r"^(?:java\.io\.|java\.net\.|java\.nio\.|sun\.nio\.|jdk\.internal\.|sun\.net\.)")


# A Flink source task's mailbox idling while its split fetcher thread reads: the wait is the fetcher's work.
_DELEGATE_WAITS = re.compile(
    r"^org\.apache\.flink\.streaming\.runtime\.tasks\.mailbox\.MailboxProcessor\."
    r"processMailsWhenDefaultActionUnavailable$"
    # a legacy source's thread waiting for its task thread to finish the end of input (a Python operator's
    # last bundle, whose worker was sampled)
    r"|^org\.apache\.flink\.streaming\.runtime\.tasks\.SourceStreamTask\$LegacySourceFunctionThread\."
    r"completeProcessing$"
)


def delegates(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether the stack only waits for, or reads back, what another sampled thread or process does (see
    ``_DELEGATE_READS``, ``_DELEGATE_WAITS``). Such samples are dropped only where that other thread was
    sampled for the same operation."""
    for index in stack:
        name = frames[index].name
        if frames[index].language == "native" or name.startswith(("<native>", "[native]")):
            continue
        if _DELEGATE_WAITS.match(name):
            return True
        if is_plumbing(name) or _STREAM_FRAMES.match(name):
            continue
        return bool(_DELEGATE_READS.match(name))
    return False


# A lambda's hidden class (Task$$Lambda$2945/0x00007f...run) is its enclosing class's code.
_LAMBDA_CLASS = re.compile(r"\$\$Lambda[^.]*")
# A Scala closure's body (TaskRunner.$anonfun$run$4, $anonfun$run$4$adapted) is part of the method it was
# written in, so it is plumbing exactly when that method is.
_SCALA_CLOSURE = re.compile(r"\.\$anonfun\$(\w+?)\$\d+(?:\$adapted)?$")


def is_plumbing(name: str) -> bool:
    """True for frames that schedule or synchronise work rather than do it (see the module doc)."""
    name = _SCALA_CLOSURE.sub(r".\1", _LAMBDA_CLASS.sub("", name))
    return bool(_PLUMBING_PREFIXES.match(name) or _WAIT_PRIMITIVES.match(name))


def is_plumbing_frame(frame: tr.Frame) -> bool:
    return is_plumbing(frame.name)


def is_wait_primitive(name: str) -> bool:
    return bool(_WAIT_PRIMITIVES.match(name))


def _is_native(frame: tr.Frame) -> bool:
    return frame.language == "native" or frame.name.startswith(("<native>", "[native]"))


def _innermost(frames: Sequence[tr.Frame], stack: Sequence[int]) -> tr.Frame | None:
    """The stack's innermost frame that is not native (None: all are)."""
    return next((frames[index] for index in stack if not _is_native(frames[index])), None)


def _named_frames(frames: Sequence[tr.Frame], stack: Sequence[int]) -> Iterator[str]:
    """The names of the stack's frames that are not native, innermost first, a lambda's as its enclosing method's."""
    for index in stack:
        if not _is_native(frames[index]):
            yield _LAMBDA_CLASS.sub("", frames[index].name)


def sleeps(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether the stack's innermost non-native frame is a sleep (or a wait for a local process): then the sample
    is waiting and nothing else, not the share of a resource the function below might use at other times."""
    frame = _innermost(frames, stack)
    return frame is not None and bool(_SLEEPS.match(frame.name))


# A thread parked on a synchroniser waits for another thread of its process (a lock, a condition, a future, a
# buffer pool), not in a read or a poll of its own.
_PARKS = re.compile(
    r"^(?:java\.lang\.Object\.wait\d*|java\.lang\.Thread\.join|jdk\.internal\.misc\.Unsafe\.park|sun\.misc\.Unsafe\.park"
    r"|java\.util\.concurrent\.locks\.LockSupport\.park\w*"
    r"|threading\.(?:Condition\.wait|Event\.wait|Thread\.join|Semaphore\.acquire|Barrier\.wait))$"
)


def parks(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether the stack's innermost non-native frame parks the thread on a synchroniser (``_PARKS``)."""
    frame = _innermost(frames, stack)
    return frame is not None and bool(_PARKS.match(frame.name))


# A pool's thread between tasks: it waits for work, which is no operation's time.
_AWAITS_WORK = re.compile(
    r"^(?:java\.util\.concurrent\.ThreadPoolExecutor\.getTask|java\.util\.concurrent\.ForkJoinPool\.awaitWork"
    r"|(?:[\w.$]*\.)?io\.netty\.util\.concurrent\.SingleThreadEventExecutor\.takeTask"
    r"|concurrent\.futures\.thread\._worker)$"
)


def idle_worker(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether the stack is a pool's thread waiting for work: nothing but plumbing, down to the pool's wait for its
    next task (``ThreadPoolExecutor.getTask``...)."""
    waits_for_work = False
    for name in _named_frames(frames, stack):
        if _AWAITS_WORK.match(name):
            waits_for_work = True
        elif not is_plumbing(name):
            return False
    return waits_for_work


# A producer parked putting into a full hand-off queue (a FLIP-27 split fetcher whose task thread is behind, a
# prefetch thread ahead of its consumer) waits on the thread that takes from it, whatever the producer's own
# function does at other times.
_BLOCKING_PUTS = re.compile(
    r"^(?:java\.util\.concurrent\.\w*Blocking(?:Queue|Deque)\.(?:put|offer)\w*"
    r"|java\.util\.concurrent\.(?:LinkedTransferQueue\.(?:put|transfer|tryTransfer)|SynchronousQueue\.(?:put|offer))"
    r"|queue\.Queue\.put|multiprocessing\.queues\.Queue\.put"
    r"|(?:[\w.$]*\.)?org\.apache\.flink\.connector\.base\.source\.reader\.synchronization\."
    r"FutureCompletingBlockingQueue\.(?:put|waitOnPut))$"
)


def waits_on_consumer(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether a parked stack is a blocking put into a full queue (``_BLOCKING_PUTS``), below its plumbing."""
    for name in _named_frames(frames, stack):
        if _BLOCKING_PUTS.match(name):
            return True
        if not is_plumbing(name):
            return False
    return False


# A thread waiting for a read another thread of its process does for it — an asynchronous or vectored read
# (Parquet's and Hadoop's FutureIO, an asynchronous file channel), a prefetch — waits on that read's device or
# link, which the sampled frames cannot tell (the reading thread was not sampled): the OS counters of the
# operation's window do (``crystalperf.core.attribution.attribute``).
_AWAITS_IO = re.compile(
    r"^(?:[\w.$]*\.)?(?:FutureIO\.await\w*|FutureIOSupport\.await\w*|\w*(?:Vectored|Prefetch)\w*\.\w+"
    r"|\w+\.(?:readVectored|awaitAllFutures|awaitReads?|waitForReads?))$"
    r"|^(?:java\.nio\.channels|sun\.nio\.ch)\.\w*Asynchronous\w*Channel\w*\.\w+$"
)


def awaits_io(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether a parked stack waits for another thread's read: its first frame below the plumbing is one of the
    read-and-wait calls of ``_AWAITS_IO``."""
    first = next((name for name in _named_frames(frames, stack) if not is_plumbing(name)), None)
    return first is not None and bool(_AWAITS_IO.match(first))


WAITING_STATES = frozenset({tr.THREAD_BLOCKED, tr.THREAD_WAITING, tr.THREAD_TIMED_WAITING})


def is_off_cpu(state: str, frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """Whether the sampled thread was not running: its state says so, or its innermost non-native frame is a
    wait primitive (epoll_wait is RUNNABLE to the JVM; old traces carry no state)."""
    if state in WAITING_STATES:
        return True
    frame = _innermost(frames, stack)
    return frame is not None and is_wait_primitive(frame.name)


def sample_vector(function_vector: ResourceVector | None, off_cpu: bool) -> ResourceVector:
    """A sample's vector from its function's and whether its thread was running.

    A thread that is not running uses no CPU, so the share the classifier gave to CPU becomes waiting; what
    it gave to disk and network stays (a thread waiting inside a file read waits for the disk). A stack with
    no function below its plumbing waited for nothing in particular."""
    if function_vector is None:
        return WAITING_ONLY if off_cpu else ResourceVector.of(1.0)
    if not off_cpu:
        return ResourceVector.of(function_vector.cpu, function_vector.disk, function_vector.network,
                                 function_vector.waiting)
    return ResourceVector.of(0.0, function_vector.disk, function_vector.network,
                             function_vector.cpu + function_vector.waiting)


_LOCKS = re.compile(r"^(?:java\.util\.concurrent\.locks\.|jdk\.internal\.misc\.Unsafe\.|sun\.misc\.Unsafe\.)")


def wait_label(frames: Sequence[tr.Frame], stack: Sequence[int]) -> str:
    """Where a waiting stack waited, for the report: the innermost frame that is neither native, nor a wait
    primitive, nor a lock (``LinkedBlockingQueue.take``, ``TaskMailboxImpl.take``), as Class.method."""
    names = [frames[i].name for i in stack
             if frames[i].language != "native" and not frames[i].name.startswith(("<native>", "[native]"))]
    chosen = next((n for n in names if not is_wait_primitive(n) and not _LOCKS.match(n)), names[0] if names else "")
    if not chosen:
        return "unknown"
    parts = chosen.rsplit(".", 2)
    return ".".join(parts[-2:]) if len(parts) > 1 else chosen


# The runtime's own I/O primitives say what they wait for without any guess: a thread inside a file read
# waits for the disk (or the page cache), one inside a socket read for the network. The classifiers split
# them (FileInputStream.read came out half network) and would turn a slow-disk scan into a network-bound job.
_DISK_PRIMITIVES = re.compile(
    r"^(?:java\.io\.(?:FileInputStream|FileOutputStream|RandomAccessFile|UnixFileSystem|FileDescriptor)\."
    r"|sun\.nio\.ch\.(?:FileChannelImpl|FileDispatcherImpl|UnixFileDispatcherImpl|IOUtil\.read)"
    r"|sun\.nio\.fs\.Unix\w*\.|java\.nio\.file\.Files\.(?:read|write|copy|newInputStream)"
    r"|_?io\.(?:FileIO|open)|os\.(?:read|write|pread|pwrite|fsync)$|shutil\.copy|kernel\.file\.)"
)
_NETWORK_PRIMITIVES = re.compile(
    r"^(?:java\.net\.(?:SocketInputStream|SocketOutputStream|Socket\$\w*Stream|PlainSocketImpl|AbstractPlainSocketImpl)\."
    r"|sun\.nio\.ch\.(?:NioSocketImpl|SocketChannelImpl|SocketDispatcher|DatagramChannelImpl)\."
    r"|(?:[\w.$]*\.)?io\.netty\.channel\.(?:epoll\.(?:AbstractEpollStreamChannel|Native\.(?:read|write|send|recv)\w*)"
    r"|socket\.nio\.NioSocketChannel)"
    r"|socket\.(?:socket\.)?(?:recv\w*|send\w*|create_connection)|socket\.SocketIO\.(?:readinto|write)$|ssl\.SSLSocket\.(?:recv|read|send|write)"
    r"|http\.client\.|urllib\.request\.|urllib3\.|requests\.|kernel\.socket\.)"
)


def primitive_vector(name: str) -> ResourceVector | None:
    """The vector of a runtime I/O primitive (see above), or None for any other function."""
    name = _LAMBDA_CLASS.sub("", name)
    if _DISK_PRIMITIVES.match(name):
        return ResourceVector.of(disk=1.0)
    if _NETWORK_PRIMITIVES.match(name):
        return ResourceVector.of(network=1.0)
    return None
