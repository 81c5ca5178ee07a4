"""Bytecode fallback: read one method from a JVM class file and render it as Java-like text.

The paper needs source; a Spark or Hadoop jar on a cluster rarely comes with its ``-sources.jar``. The
class file still says what a method does: which methods it calls (``FileChannel.read``,
``SocketDispatcher.write0``), which fields it touches, which constants it uses, and whether it loops.
We render exactly that as a small Java method so the code classifier, which reads Java ASTs, can read it.

Why our own reader rather than ``javap`` or a PyPI parser: a JRE on a cluster has no ``javap``, and one
JVM start per class (~0.3 s) for hundreds of classes would dominate the analysis; the PyPI class-file
parsers are unmaintained or pull in heavy dependencies, and the core must stay stdlib-only. The part of
the JVM specification (§4) needed here — constant pool, methods, the Code and LineNumberTable
attributes, instruction lengths — is small and frozen.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

MAX_STATEMENTS = 300


class ClassFileError(ValueError):
    """Not a class file, or a truncated/corrupt one."""


@dataclass
class Method:
    name: str
    descriptor: str
    access: int
    code: bytes = b""
    lines: list[tuple[int, int]] = field(default_factory=list)  # (start pc, source line)

    def line_range(self) -> tuple[int, int] | None:
        if not self.lines:
            return None
        return min(line for _, line in self.lines), max(line for _, line in self.lines)


@dataclass
class ClassFile:
    name: str  # dotted binary name
    super_name: str | None
    source_file: str | None
    constants: list[tuple[int, Any] | None]
    methods: list[Method]

    def utf8(self, index: int) -> str:
        entry = self.constants[index]
        if entry is None or entry[0] != 1:
            raise ClassFileError(f"constant {index} is not a UTF-8 string")
        return str(entry[1])

    def class_name(self, index: int) -> str:
        entry = self.constants[index]
        if entry is None or entry[0] != 7:
            raise ClassFileError(f"constant {index} is not a class")
        return self.utf8(int(entry[1])).replace("/", ".")

    def member(self, index: int) -> tuple[str, str, str]:
        """(owner class, name, descriptor) of a field/method/interface-method reference."""
        entry = self.constants[index]
        if entry is None or entry[0] not in (9, 10, 11):
            raise ClassFileError(f"constant {index} is not a member reference")
        owner_index, nat_index = entry[1]
        nat = self.constants[nat_index]
        if nat is None or nat[0] != 12:
            raise ClassFileError(f"constant {nat_index} is not a name-and-type")
        name_index, desc_index = nat[1]
        return self.class_name(owner_index), self.utf8(name_index), self.utf8(desc_index)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ClassFileError("truncated class file")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u1(self) -> int:
        return self.take(1)[0]

    def u2(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u4(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])


def _constant_pool(r: _Reader) -> list[tuple[int, Any] | None]:
    count = r.u2()
    pool: list[tuple[int, Any] | None] = [None] * count
    i = 1
    while i < count:
        tag = r.u1()
        if tag == 1:
            pool[i] = (1, r.take(r.u2()).decode("utf-8", errors="replace"))
        elif tag in (3, 4):
            pool[i] = (tag, r.take(4))
        elif tag in (5, 6):
            pool[i] = (tag, r.take(8))
            i += 1  # 8-byte constants take two slots (JVMS §4.4.5)
        elif tag in (7, 8, 16, 19, 20):
            pool[i] = (tag, r.u2())
        elif tag in (9, 10, 11, 12, 17, 18):
            pool[i] = (tag, (r.u2(), r.u2()))
        elif tag == 15:
            pool[i] = (tag, (r.u1(), r.u2()))
        else:
            raise ClassFileError(f"unknown constant pool tag {tag} at entry {i}")
        i += 1
    return pool


def parse_class(data: bytes) -> ClassFile:
    """Parse the parts of a class file the renderer needs."""
    r = _Reader(data)
    if r.u4() != 0xCAFEBABE:
        raise ClassFileError("not a class file (bad magic number)")
    r.u2(), r.u2()
    constants = _constant_pool(r)
    partial = ClassFile("", None, None, constants, [])
    r.u2()
    this_index, super_index = r.u2(), r.u2()
    partial.name = partial.class_name(this_index)
    partial.super_name = partial.class_name(super_index) if super_index else None
    r.take(2 * r.u2())  # interfaces
    for _ in range(r.u2()):  # fields
        r.take(6)
        for _ in range(r.u2()):
            r.u2()
            r.take(r.u4())
    for _ in range(r.u2()):
        access, name_index, desc_index = r.u2(), r.u2(), r.u2()
        method = Method(partial.utf8(name_index), partial.utf8(desc_index), access)
        for _ in range(r.u2()):
            attr_name = partial.utf8(r.u2())
            body = r.take(r.u4())
            if attr_name == "Code":
                _read_code(partial, method, body)
        partial.methods.append(method)
    for _ in range(r.u2()):
        attr_name = partial.utf8(r.u2())
        body = r.take(r.u4())
        if attr_name == "SourceFile" and len(body) == 2:
            partial.source_file = partial.utf8(struct.unpack(">H", body)[0])
    return partial


def _read_code(cls: ClassFile, method: Method, body: bytes) -> None:
    r = _Reader(body)
    r.u2(), r.u2()
    method.code = r.take(r.u4())
    r.take(8 * r.u2())  # exception table
    for _ in range(r.u2()):
        attr_name = cls.utf8(r.u2())
        attr = r.take(r.u4())
        if attr_name == "LineNumberTable":
            n = struct.unpack(">H", attr[:2])[0]
            method.lines.extend(struct.unpack(">HH", attr[2 + 4 * k : 6 + 4 * k]) for k in range(n))


# Operand bytes per opcode (JVMS §6.5); the switches and ``wide`` are variable and handled apart.
_OPERANDS = {op: 1 for op in (0x10, 0x12, *range(0x15, 0x1A), *range(0x36, 0x3B), 0xA9, 0xBC)}
_OPERANDS.update({op: 2 for op in (0x11, 0x13, 0x14, 0x84, *range(0x99, 0xA9), 0xC6, 0xC7,
                                    *range(0xB2, 0xB9), 0xBB, 0xBD, 0xC0, 0xC1)})
_OPERANDS.update({0xB9: 4, 0xBA: 4, 0xC8: 4, 0xC9: 4, 0xC5: 3})
_BRANCHES = {*range(0x99, 0xA9), 0xC6, 0xC7, 0xC8}
_INVOKES = {0xB6, 0xB7, 0xB8, 0xB9}
_FIELDS = {0xB2: "get", 0xB3: "put", 0xB4: "get", 0xB5: "put"}


def instructions(code: bytes) -> list[tuple[int, int, bytes]]:
    """(pc, opcode, operand bytes) for every instruction of a Code attribute."""
    out = []
    pc = 0
    while pc < len(code):
        op = code[pc]
        if op in (0xAA, 0xAB):  # tableswitch / lookupswitch: padded to a 4-byte boundary
            start = pc + 1 + (-(pc + 1) % 4)
            if op == 0xAA:
                low, high = struct.unpack(">ii", code[start + 4 : start + 12])
                length = 12 + 4 * (high - low + 1)
            else:
                (pairs,) = struct.unpack(">i", code[start + 4 : start + 8])
                length = 8 + 8 * pairs
            end = start + length
        elif op == 0xC4:  # wide
            end = pc + (6 if pc + 1 < len(code) and code[pc + 1] == 0x84 else 4)
        else:
            end = pc + 1 + _OPERANDS.get(op, 0)
        if end > len(code) or end <= pc:
            raise ClassFileError(f"instruction at pc {pc} runs past the end of the code")
        out.append((pc, op, code[pc + 1 : end]))
        pc = end
    return out


def _simple(class_name: str) -> str:
    return class_name.rsplit(".", 1)[-1].replace("$", "_")


def _java_type(descriptor: str, i: int = 0) -> tuple[str, int]:
    dims = 0
    while descriptor[i] == "[":
        dims, i = dims + 1, i + 1
    base = {"B": "byte", "C": "char", "D": "double", "F": "float", "I": "int", "J": "long", "S": "short",
            "Z": "boolean", "V": "void"}.get(descriptor[i])
    if base is None:
        end = descriptor.index(";", i)
        base, i = _simple(descriptor[i + 1 : end].replace("/", ".")), end
    return base + "[]" * dims, i + 1


def _signature(name: str, descriptor: str) -> str:
    params: list[str] = []
    i = 1
    while descriptor[i] != ")":
        t, i = _java_type(descriptor, i)
        params.append(f"{t} p{len(params)}")
    ret, _ = _java_type(descriptor, i + 1)
    return f"{ret} {name}({', '.join(params)})"


def _span(lines: tuple[int, int] | None) -> int:
    return lines[1] - lines[0] if lines else 0


def choose_method(cls: ClassFile, name: str, line: int | None) -> Method | None:
    """The method a frame is in; overloads told apart by the line's place in their line tables."""
    candidates = [m for m in cls.methods if m.name == name and m.code]
    if line is not None and len(candidates) > 1:
        inside = [m for m in candidates if (r := m.line_range()) and r[0] <= line <= r[1]]
        if inside:
            return min(inside, key=lambda m: _span(m.line_range()))
    return candidates[0] if candidates else None


def describe_method(cls: ClassFile, name: str, line: int | None = None) -> str | None:
    """The method as Java-like text: its calls, field accesses, constants and control structure in
    instruction order. None when the class has no such method with code."""
    method = choose_method(cls, name, line)
    if method is None:
        return None
    shown_name = _simple(cls.name) if name == "<init>" else ("static_init" if name == "<clinit>" else name)
    statements: list[str] = []

    def add(statement: str) -> None:
        if len(statements) < MAX_STATEMENTS and (not statements or statements[-1] != statement):
            statements.append(statement)

    for _pc, op, operands in instructions(method.code):
        if op in _INVOKES:
            owner, member, _ = cls.member(struct.unpack(">H", operands[:2])[0])
            if member == "<init>":
                add(f"new {_simple(owner)}();")
            else:
                add(f"{'this' if owner == cls.name else _simple(owner)}.{member}();")
        elif op in _FIELDS:
            owner, member, _ = cls.member(struct.unpack(">H", operands)[0])
            target = "this" if owner == cls.name else _simple(owner)
            add(f"{target}.{member} = value;" if _FIELDS[op] == "put" else f"value = {target}.{member};")
        elif op == 0xBA:
            add("invokeDynamic();")
        elif op in (0x12, 0x13):
            index = operands[0] if op == 0x12 else struct.unpack(">H", operands)[0]
            entry = cls.constants[index]
            if entry is not None and entry[0] == 8:
                text = cls.utf8(int(entry[1])).replace("\\", " ").replace('"', " ")[:80]
                add(f'value = "{text}";')
        elif op in _BRANCHES:
            (offset,) = struct.unpack(">i" if op == 0xC8 else ">h", operands)
            if offset < 0:
                add("while (loop) { }")
            elif op not in (0xA7, 0xC8):
                add("if (condition) { }")
        elif op in (0xAA, 0xAB):
            add("switch (key) { }")
        elif op == 0xBF:
            add("throw error;")
        elif op == 0xC2:
            add("synchronized (lock) { }")
        elif op == 0xBB:
            pass  # ``new`` is shown with its constructor call
    span = method.line_range()
    where = f" (lines {span[0]}-{span[1]}" + (f" of {cls.source_file})" if cls.source_file else ")") if span else ""
    body = "\n".join(f"    {s}" for s in statements)
    return f"// bytecode of {cls.name}.{name}{where}\n{_signature(shown_name, method.descriptor)} {{\n{body}\n}}"
