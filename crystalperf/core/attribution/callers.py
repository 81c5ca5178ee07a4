"""Who called a runtime library's function: the first frame outside the language's runtime on the stacks a
function was sampled in.

A top function in the JDK or in Python's standard library (``java.lang.ProcessImpl.<init>``,
``java.io.FileInputStream.read``, ``socket.socket.recv_into``) says what the thread did, not whose work it was:
a streaming aggregation whose state store forks ``chmod`` through Hadoop's local file system shows the first, and
so does a user function running ``subprocess``. The caller names the code to look at
(``org.apache.hadoop.util.Shell.runCommand``).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence

from crystalperf.core import trace as tr

# The JVM's own libraries (the JDK's packages and the JDK's internal ones).
_JVM_RUNTIME = ("java.", "javax.", "jdk.", "sun.", "com.sun.")
_PYTHON_RUNTIME = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__main__"}


def is_runtime_frame(name: str) -> bool:
    """A frame of the language's runtime library: the JDK's packages, or a module of Python's standard library."""
    if name.startswith(_JVM_RUNTIME):
        return True
    top = name.split(".", 1)[0]
    return top in _PYTHON_RUNTIME and "." in name


def caller(frames: Sequence[tr.Frame], stack: Sequence[int], function: str) -> str | None:
    """The first frame outside the runtime that called ``function`` on a stack (innermost frame first), None where
    the function is not a runtime frame, is not on the stack, or nothing outside the runtime called it."""
    if not is_runtime_frame(function):
        return None
    found = False
    for index in stack:
        name = frames[index].name
        if not found:
            found = name == function
        elif not is_runtime_frame(name):
            return name
    return None


def most_common(callers: Counter[str]) -> str | None:
    return callers.most_common(1)[0][0] if callers else None
