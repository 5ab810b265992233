"""A pushdown machine over bytes that accepts exactly the JSON texts of a compiled schema
(schema.py), one byte at a time, and knows the shortest way to finish from where it stands.

A state is a tuple of alternatives (anyOf, and a number or literal that may have ended, make
more than one), each a stack of frames and the length of the whitespace run just written.
Stacks are linked tuples (frame, parent), None when the value is complete. The frames:

    ("V", node)                         a value of node, whitespace first allowed
    ("O", node, seen, phase, name)      an object: phase open | key | colon | after
    ("K", node, seen, prefix)           a key of a closed object, its escaped bytes so far
    ("A", node, count, phase)           an array: phase open | next | after
    ("S", node, length, pending, esc)   a string: characters so far (where bounded), the
                                        UTF-8 continuation bytes still due, the escape under way
    ("N", node, text)                   a number
    ("L", texts, pos)                   one of literal texts (enum, const, true, false, null)
    ("T", text, pos)                    exact text (around tool calls), no whitespace

Whitespace goes only where JSON allows it, at most WS_RUN bytes in a row (so a model cannot
pad forever); strings are valid UTF-8 (RFC 3629's ranges) without control characters; objects
and arrays nest at most MAX_NESTING deep (a recursive schema, or any JSON, included).
States are hashable, so transitions and the rest of the way are cached by the caller.
"""
from __future__ import annotations

from . import numeric
from .schema import Node, dumps

WS = frozenset(b" \t\n\r")
WS_RUN = 24
MAX_NESTING = 64              # objects and arrays within each other (the stack's depth bounds every state)
_ESCAPES = frozenset(b'"\\/bfnrt')
_HEX = frozenset(b"0123456789abcdefABCDEF")

ANY = Node("any", "any")
ANY_OBJECT = Node("object", "any object", props={}, keys={}, required=frozenset(), other=ANY)
ANY_ARRAY = Node("array", "any array", items=ANY, low=0, high=None)
ANY_STRING = Node("string", "any string", low=0, high=None)
ANY_NUMBER = Node("number", "any number", lo=None, hi=None)
ANY_LITERAL = Node("literal", "true, false or null", texts=(b"true", b"false", b"null"))
KEY = Node("string", "a key", low=0, high=None)
for _node, _text in ((ANY, b"0"), (ANY_OBJECT, b"{}"), (ANY_ARRAY, b"[]"), (ANY_STRING, b'""'), (ANY_NUMBER, b"0"),
                     (ANY_LITERAL, b"null"), (KEY, b'""')):
    _node.shortest = _text


def initial(node: Node, before: bytes = b"", after: bytes = b""):
    """The state before a value of node, with exact text before and after it."""
    stack = None
    if after:
        stack = (("T", after, 0), None)
    stack = (("V", node), stack)
    if before:
        stack = (("T", before, 0), stack)
    return ((stack, 0),)


def step(state, b: int):
    """The state after byte b, or None where b cannot come next."""
    out = {}
    for stack, run in state:
        for new, blank in _step(stack, b):
            run2 = run + 1 if blank else 0
            if run2 <= WS_RUN:
                out[(new, run2)] = None
    return tuple(out) or None


def ends(state) -> bool:
    """Whether the text so far is complete (nothing more needs to come)."""
    return any(_ends(stack) for stack, _ in state)


def _ends(stack) -> bool:
    while stack is not None:
        frame = stack[0]
        if frame[0] == "N" and numeric.complete(frame[2], frame[1]):
            stack = stack[1]
        elif frame[0] == "L" and any(len(t) == frame[2] for t in frame[1]):
            stack = stack[1]
        else:
            return False
    return True


def _step(stack, b: int) -> list:
    """[(stack, whether b was structural whitespace)] after byte b."""
    if stack is None:
        return [(None, True)] if b in WS else []
    frame, parent = stack
    kind = frame[0]
    if kind == "S":
        return _string(frame, parent, b)
    if kind == "V":
        if b in WS:
            return [(stack, True)]
        return [(s, False) for s in _start(frame[1], b, parent)]
    if kind == "O":
        return _object(frame, parent, b, stack)
    if kind == "A":
        return _array(frame, parent, b, stack)
    if kind == "K":
        _, node, seen, prefix = frame
        if b == 34:
            name = node.keys.get(prefix)
            return [((("O", node, seen | {name}, "colon", name), parent), False)] if name is not None and name not in seen else []
        longer = prefix + bytes((b,))
        if any(k.startswith(longer) and n not in seen for k, n in node.keys.items()):
            return [((("K", node, seen, longer), parent), False)]
        return []
    if kind == "N":
        _, node, text = frame
        longer = text + bytes((b,))
        if b in b"0123456789.eE+-" and numeric.feasible(longer, node):
            return [((("N", node, longer), parent), False)]
        return _step(parent, b) if numeric.complete(text, node) else []
    if kind == "L":
        _, texts, pos = frame
        out = []
        going = tuple(t for t in texts if len(t) > pos and t[pos] == b)
        if going:
            out.append(((("L", going, pos + 1), parent), False))
        if any(len(t) == pos for t in texts):
            out += _step(parent, b)
        return out
    if kind == "T":
        _, text, pos = frame
        if text[pos] != b:
            return []
        return [(parent if pos + 1 == len(text) else (("T", text, pos + 1), parent), False)]
    raise AssertionError(kind)


def _start(node: Node, b: int, parent) -> list:
    """The stacks after b, the first byte of a value of node."""
    kind = node.kind
    if kind == "any":
        return [s for n in (ANY_OBJECT, ANY_ARRAY, ANY_STRING, ANY_NUMBER, ANY_LITERAL) for s in _start(n, b, parent)]
    if kind == "anyof":
        out = {}
        for option in node.options:
            out.update(dict.fromkeys(_start(option, b, parent)))
        return list(out)
    if kind == "object":
        return [(("O", node, frozenset(), "open", None), parent)] if b == 123 and _depth(parent) < MAX_NESTING else []
    if kind == "array":
        return [(("A", node, 0, "open"), parent)] if b == 91 and _depth(parent) < MAX_NESTING else []
    if kind == "string":
        return [(("S", node, 0, 0, 0), parent)] if b == 34 else []
    if kind in ("integer", "number"):
        text = bytes((b,))
        return [(("N", node, text), parent)] if numeric.feasible(text, node) else []
    if kind == "literal":
        going = tuple(t for t in node.texts if t[0] == b)
        return [(("L", going, 1), parent)] if going else []
    raise AssertionError(kind)


def _depth(stack) -> int:
    depth = 0
    while stack is not None:
        depth, stack = depth + 1, stack[1]
    return depth


def _open_names(node, seen) -> bool:
    return node.other is not None or any(n not in seen for n in node.props)


def _object(frame, parent, b: int, stack) -> list:
    _, node, seen, phase, name = frame
    if b in WS:
        return [(stack, True)]
    if phase in ("open", "key") and b == 34:
        if node.other is not None:
            return [((("S", KEY, 0, 0, 0), (("O", node, seen, "colon", None), parent)), False)]
        return [((("K", node, seen, b""), parent), False)] if _open_names(node, seen) else []
    if phase == "colon":
        if b != 58:
            return []
        value = node.props[name] if name is not None else node.other
        return [((("V", value), (("O", node, seen, "after", None), parent)), False)]
    if b == 125 and phase in ("open", "after") and node.required <= seen:
        return [(parent, False)]
    if b == 44 and phase == "after" and _open_names(node, seen):
        return [((("O", node, seen, "key", None), parent), False)]
    return []


def _array(frame, parent, b: int, stack) -> list:
    _, node, count, phase = frame
    if b in WS:
        return [(stack, True)]
    if phase == "after":
        if b == 44 and (node.high is None or count < node.high):
            return [((("A", node, count, "next"), parent), False)]
        return [(parent, False)] if b == 93 and count >= node.low else []
    if phase == "open" and b == 93:
        return [(parent, False)] if node.low == 0 else []
    if node.high is not None and count >= node.high:
        return []
    return [(s, False) for s in _start(node.items, b, (("A", node, count + 1, "after"), parent))]


def _lead(b: int):
    """The UTF-8 continuation bytes a lead byte asks for: (how many, the first one's range)."""
    if 0xC2 <= b <= 0xDF:
        return (1, 0x80, 0xBF)
    if b == 0xE0:
        return (2, 0xA0, 0xBF)
    if 0xE1 <= b <= 0xEF:
        return (2, 0x80, 0x9F) if b == 0xED else (2, 0x80, 0xBF)
    if b == 0xF0:
        return (3, 0x90, 0xBF)
    if 0xF1 <= b <= 0xF3:
        return (3, 0x80, 0xBF)
    if b == 0xF4:
        return (3, 0x80, 0x8F)
    return None


def _string(frame, parent, b: int) -> list:
    _, node, length, pending, esc = frame
    counted = node.low > 0 or node.high is not None
    if pending:
        more, lo, hi = pending
        if not lo <= b <= hi:
            return []
        return [((("S", node, length, (more - 1, 0x80, 0xBF) if more > 1 else 0, 0), parent), False)]
    if esc == 1:
        if b == 117 and node.low == 0:                      # \uXXXX (not where lengths are counted from below)
            return [((("S", node, length, 0, -4), parent), False)]
        return [((("S", node, length, 0, 0), parent), False)] if b in _ESCAPES else []
    if esc < 0:
        return [((("S", node, length, 0, esc + 1), parent), False)] if b in _HEX else []
    if b == 34:
        return [(parent, False)] if length >= node.low else []
    if b < 0x20:
        return []
    room = node.high is None or length < node.high
    if not room:
        return []
    grown = length + 1 if counted else 0
    if b == 92:
        return [((("S", node, grown, 0, 1), parent), False)]
    if b < 0x80:
        return [((("S", node, grown, 0, 0), parent), False)]
    lead = _lead(b)
    return [((("S", node, grown, lead, 0), parent), False)] if lead else []


# --- the shortest way to finish ----------------------------------------------------------------
def rest(state) -> bytes:
    """The shortest bytes that complete the text from `state`."""
    return min((_rest(stack) for stack, _ in state), key=len)


def _rest(stack) -> bytes:
    out = []
    while stack is not None:
        frame, stack = stack
        out.append(_frame_rest(frame))
    return b"".join(out)


def _members(node, seen) -> list[bytes]:
    return [dumps(n) + b":" + (node.props[n].shortest if n in node.props else node.other.shortest)
            for n in sorted(node.required - seen)]


def _one_member(node, seen) -> bytes:
    """The cheapest member that may still be written (after a comma one must be)."""
    if node.other is not None:
        return b'"":' + node.other.shortest
    return min((dumps(n) + b":" + v.shortest for n, v in node.props.items() if n not in seen), key=len)


def _frame_rest(frame) -> bytes:
    kind = frame[0]
    if kind == "V":
        return frame[1].shortest
    if kind == "O":
        _, node, seen, phase, name = frame
        if phase == "colon":
            value = node.props[name] if name is not None else node.other
            return b":" + value.shortest + _frame_rest(("O", node, seen, "after", None))
        members = _members(node, seen)
        if phase == "key":
            return (b",".join(members) if members else _one_member(node, seen)) + b"}"
        if phase == "open":
            return b",".join(members) + b"}"
        return (b"," + b",".join(members) if members else b"") + b"}"
    if kind == "K":
        _, node, seen, prefix = frame
        best = None
        for key, name in node.keys.items():
            if key.startswith(prefix) and name not in seen:
                text = key[len(prefix):] + b'"' + _frame_rest(("O", node, seen | {name}, "colon", name))
                best = text if best is None or len(text) < len(best) else best
        return best
    if kind == "A":
        _, node, count, phase = frame
        item = node.items.shortest
        if phase == "open":
            return b",".join([item] * node.low) + b"]"
        if phase == "next":
            return item + _frame_rest(("A", node, count + 1, "after"))
        return b"".join([b"," + item] * max(node.low - count, 0)) + b"]"
    if kind == "S":
        _, node, length, pending, esc = frame
        text = b""
        if pending:
            more, lo, _ = pending
            text = bytes((lo,)) + b"\x80" * (more - 1)
        elif esc == 1:
            text = b"n"
        elif esc < 0:
            text = b"0" * -esc
        return text + b"a" * max(node.low - length, 0) + b'"'
    if kind == "N":
        return numeric.completion(frame[2], frame[1])
    if kind == "L":
        return min((t[frame[2]:] for t in frame[1]), key=len)
    if kind == "T":
        return frame[1][frame[2]:]
    raise AssertionError(kind)
