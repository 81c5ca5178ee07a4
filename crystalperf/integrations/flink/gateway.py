"""Keeping the job's py4j calls on the Java thread that planned its tables, whatever thread frees a Java object.

Flink's SQL planner keeps its metadata provider in a Java thread-local that only the thread creating a
``TableEnvironment`` sets (FLINK-23020, not fixed in Flink 2.3): a SQL statement explained or executed on any
other Java thread fails with ``NullPointerException: metadataHandlerProvider``. PyFlink's py4j client gives
each of its connections a Java thread of its own and lends them from one pool, last returned first lent,
opening a new one when the pool is empty.

When a py4j Java object dies, its finaliser sends a delete from whatever Python thread freed it, and the cyclic
collector runs on whichever thread happens to allocate: our samplers allocate all the time. A delete sent while
the job's thread is between two calls borrows the job's connection; the job's next call then finds the pool
empty, opens a new connection, and from then on keeps being lent that one (the last returned). Every SQL call
after that fails in the planner: 100 of 100 explains in ``bench``-style runs with a collector thread.

:func:`isolate_deletes` sends the deletes of every thread but the main one over a connection kept aside for
them, so they never borrow from the pool: the job's thread keeps the connection (and Java thread) it had.
Deletes are the only commands this changes; the main thread's deletes still go the way py4j sends them.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from typing import Any

log = logging.getLogger(__name__)

_install_lock = threading.Lock()


class _DeleteChannel:
    """One py4j connection per gateway client, used only to delete Java objects.

    A finaliser may run inside another delete (a collection during the send), so a sender never waits for the
    channel: it queues its delete, and whoever holds the channel sends the queue before letting go.
    """

    def __init__(self) -> None:
        self._busy = threading.Lock()
        self._queued: deque[tuple[Any, str]] = deque()
        self._connections: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def delete(self, client: Any, target_id: str) -> None:
        self._queued.append((client, target_id))
        while self._queued and self._busy.acquire(blocking=False):
            try:
                while self._queued:
                    queued_client, queued_id = self._queued.popleft()
                    self._send(queued_client, queued_id)
            finally:
                self._busy.release()

    def _send(self, client: Any, target_id: str) -> None:
        from py4j import protocol as proto

        if target_id in (proto.ENTRY_POINT_OBJECT_ID, proto.GATEWAY_SERVER_OBJECT_ID) or not client.is_connected:
            return
        connection = self._connections.get(client)
        try:
            if connection is None:
                connection = client._create_connection()
                self._connections[client] = connection
            connection.send_command(proto.MEMORY_COMMAND_NAME + proto.MEMORY_DEL_SUBCOMMAND_NAME + target_id + "\ne\n")
        except Exception:
            # py4j drops a failed delete the same way; a connection that failed mid-command is out of step
            self._connections.pop(client, None)
            if connection is not None:
                try:
                    connection.close()
                except Exception:
                    pass
            log.debug("crystalperf: deleting a Java object failed", exc_info=True)


def isolate_deletes() -> bool:
    """Route py4j's finaliser deletes off the main thread to a connection of their own (once per process).

    Applies to py4j's plain ``GatewayClient`` (PyFlink's); a pinned-thread client (PySpark's ``JavaClient``)
    keeps a Java thread per Python thread and is left as it is. Returns whether the routing is in place.
    """
    try:
        import py4j.java_gateway as gateway
    except ImportError:
        return False
    with _install_lock:
        current = gateway._garbage_collect_object
        if getattr(current, "_crystalperf_channel", None) is not None:
            return True
        plain_client = gateway.GatewayClient
        finalizers = gateway.ThreadSafeFinalizer
        decode = gateway.smart_decode
        channel = _DeleteChannel()

        def collect(gateway_client: Any, target_id: str) -> None:
            try:
                if type(gateway_client) is not plain_client or threading.current_thread() is threading.main_thread():
                    current(gateway_client, target_id)
                    return
                finalizers.remove_finalizer(decode(gateway_client.address) + decode(gateway_client.port) + target_id)
                channel.delete(gateway_client, target_id)
            except Exception:
                pass  # a finaliser, maybe at interpreter exit: nothing to tell and nobody to tell it to

        collect._crystalperf_channel = channel  # type: ignore[attr-defined]
        collect.__wrapped__ = current  # type: ignore[attr-defined]
        # JavaObject's finaliser looks the function up in py4j's module each time it runs
        gateway._garbage_collect_object = collect
    return True
