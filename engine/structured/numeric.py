"""JSON numbers byte by byte: which prefixes can still become a number within a node's bounds,
and the shortest way to finish one.

The grammar is RFC 8259's: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, integers without the
fraction and the exponent. A number with bounds is written without an exponent (so that the
values a prefix can still reach are a few intervals, checked exactly with fractions); digits
are capped (DIGITS before the point, DIGITS after it, 3 in the exponent), so no answer runs
on in one number.
"""
from __future__ import annotations

import math
from fractions import Fraction

DIGITS = 18
_DIGIT = frozenset(b"0123456789")


def syntax(text: bytes, integer: bool, exponent: bool) -> str | None:
    """The grammar's state after `text` ("start", "minus", "zero", "int", "dot", "frac", "e",
    "esign", "exp"), or None where it is no number's prefix."""
    state, count = "start", 0
    for b in text:
        digit = b in _DIGIT
        if state == "start":
            state, count = ("minus", 0) if b == 45 else ("zero", 1) if b == 48 else ("int", 1) if digit else (None, 0)
        elif state == "minus":
            state, count = ("zero", 1) if b == 48 else ("int", 1) if digit else (None, 0)
        elif state in ("zero", "int"):
            if digit and state == "int" and count < DIGITS:
                count += 1
            elif b == 46 and not integer:
                state, count = "dot", 0
            elif b in (101, 69) and exponent and not integer:
                state, count = "e", 0
            else:
                return None
        elif state in ("dot", "frac"):
            if digit and count < DIGITS:
                state, count = "frac", count + 1
            elif b in (101, 69) and state == "frac" and exponent:
                state, count = "e", 0
            else:
                return None
        elif state in ("e", "esign", "exp"):
            if digit and count < 3:
                state, count = "exp", count + 1
            elif b in (43, 45) and state == "e":
                state = "esign"
            else:
                return None
        if state is None:
            return None
    return state


COMPLETE = frozenset({"zero", "int", "frac", "exp"})


def _bounded(node) -> bool:
    return node.lo is not None or node.hi is not None


def _inside(value: Fraction, node) -> bool:
    if node.lo is not None and (value < node.lo[0] or (value == node.lo[0] and node.lo[1])):
        return False
    if node.hi is not None and (value > node.hi[0] or (value == node.hi[0] and node.hi[1])):
        return False
    return True


def _reachable(text: bytes, integer: bool):
    """The values numbers starting with `text` can take: (low, high, high_included) magnitudes
    and the sign."""
    negative = text.startswith(b"-")
    body = text[1:] if negative else text
    spans = []
    if not body:
        spans.append((Fraction(0), None, False))
    elif b"." in body:
        whole, frac = body.split(b".")
        base = Fraction((whole + b"." + (frac or b"0")).decode())
        spans.append((base, base + Fraction(1, 10 ** len(frac)), False))
    elif body == b"0":
        spans.append((Fraction(0), Fraction(0) if integer else Fraction(1), integer))
    else:
        d = int(body)
        for more in range(DIGITS - len(body) + 1):
            scale = 10 ** more
            spans.append((Fraction(d * scale), Fraction((d + 1) * scale - (1 if integer else 0)), integer))
    return negative, spans


def _meets(low: Fraction, high, high_in: bool, node, negative: bool) -> bool:
    """Whether magnitudes in [low, high) (high] if high_in; high None: unbounded) with the sign
    reach a value within the node's bounds."""
    if negative:                       # values in (-high, -low]
        lo_v, lo_in, hi_v, hi_in = (None if high is None else -high), high_in, -low, True
    else:
        lo_v, lo_in, hi_v, hi_in = low, True, high, high_in
    if node.lo is not None and hi_v is not None:
        b, strict = node.lo
        if hi_v < b or (hi_v == b and (strict or not hi_in)):
            return False
    if node.hi is not None and lo_v is not None:
        b, strict = node.hi
        if lo_v > b or (lo_v == b and (strict or not lo_in)):
            return False
    return True


def feasible(text: bytes, node) -> bool:
    """Whether `text` can still become a number of the node (its kind and bounds)."""
    integer = node.kind == "integer"
    state = syntax(text, integer, not _bounded(node))
    if state is None:
        return False
    if not _bounded(node):
        return True
    negative, spans = _reachable(text, integer)
    return any(_meets(lo, hi, hi_in, node, negative) for lo, hi, hi_in in spans)


def complete(text: bytes, node) -> bool:
    """Whether `text` is a whole number of the node."""
    integer = node.kind == "integer"
    if syntax(text, integer, not _bounded(node)) not in COMPLETE:
        return False
    return not _bounded(node) or _inside(Fraction(text.decode()), node)


def completion(text: bytes, node) -> bytes | None:
    """The shortest bytes that make `text` a whole number of the node ("" if it is one)."""
    if complete(text, node):
        return b""
    if not _bounded(node):
        state = syntax(text, node.kind == "integer", True)
        return b"0" if state in ("start", "minus", "dot", "e", "esign") else None
    best = None
    for candidate in _candidates(text, node):
        if candidate.startswith(text) and complete(candidate, node) and (best is None or len(candidate) < len(best)):
            best = candidate
    return None if best is None else best[len(text):]


def _candidates(text: bytes, node):
    """Numbers within the bounds that start with `text`, the shortest among them included."""
    integer = node.kind == "integer"
    lo = node.lo[0] if node.lo is not None else None
    hi = node.hi[0] if node.hi is not None else None
    points = [Fraction(0)] + [v for v in (lo, hi) if v is not None]
    if text not in (b"", b"-"):
        negative, spans = _reachable(text, integer)
        for low, high, _ in spans:
            for v in (low, high) if high is not None else (low,):
                points.append(-v if negative else v)
    for point in points:
        for step in ([0, 1, -1] if integer else [0]):
            for value in _near(point, node, integer, step):
                for digits in range(DIGITS + 1):
                    written = _write(value, digits, text)
                    if written is not None:
                        yield written


def _near(point: Fraction, node, integer: bool, step: int):
    """Values within the bounds at or next to `point`: the point, or the bounds' nearest insides."""
    base = Fraction(math.ceil(point) + step) if integer else point
    out = [base]
    if node.lo is not None:
        b, strict = node.lo
        out.append(Fraction(math.floor(b) + 1 if (strict or b != math.floor(b)) else b) if integer else b)
    if node.hi is not None:
        b, strict = node.hi
        out.append(Fraction(math.ceil(b) - 1 if (strict or b != math.ceil(b)) else b) if integer else b)
    if not integer:
        lo_b = node.lo[0] if node.lo is not None else None
        hi_b = node.hi[0] if node.hi is not None else None
        if lo_b is not None and hi_b is not None:
            out.append((lo_b + hi_b) / 2)
        for b in (lo_b, hi_b):
            if b is not None:
                for k in range(1, DIGITS):
                    for sign in (1, -1):
                        out.append(b + sign * Fraction(1, 10 ** k))
    return [v for v in out if _inside(v, node)]


def _write(value: Fraction, digits: int, text: bytes) -> bytes | None:
    """`value` written with `digits` fraction digits (None where that is not exact), or with as
    many as `text` has."""
    scaled = value * 10 ** digits
    if scaled.denominator != 1:
        return None
    n = abs(scaled.numerator)
    whole, frac = divmod(n, 10 ** digits)
    body = str(whole).encode() + (b"." + str(frac).zfill(digits).encode() if digits else b"")
    if b"." in text and digits == 0:
        body += b".0"
    return (b"-" if value < 0 or (value == 0 and text.startswith(b"-")) else b"") + body
