"""Pickles that attack the unpickler itself, and pickles that try to change the reader's stand-ins.

1. What the C unpickler does with untrusted objects before any check of ours sees them: it hashes
   dict keys and set members. A tuple nested 150,000 deep overflows the C stack there (the process
   dies: SIGSEGV); tuples shared through the memo hash in exponential time; ints the file picks to
   share a hash make every insertion probe all the others. engine.formats.pickle_check walks the opcodes
   first and refuses each, naming the file. The crashing ones run in a child process, so a
   regression fails the test instead of killing the test run.
2. BUILD or attribute writes on an allowed global (torch.Size, builtins.object, a dtype, the tensor
   rebuilder...) would change the engine's shared stand-ins for every later load: each is refused,
   and the next load reads as if the hostile one never happened.
"""
from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from collections import OrderedDict

import pytest

from engine.errors import InvalidHeader, UnsafePickle, WeightsError
from engine.formats import load_pth, read_module_checkpoint
from engine.formats import pickled
from engine.formats.pickle_check import MAX_CHOSEN_KEYS, MAX_NESTING
from engine.untrusted import shown
from tests.io.test_hostile_pth_modules import FakeModule
from tests.io.test_pth import FakeStorage, FakeTensor, make_legacy, make_zip, pickle_with_storages

CLS = f"c{FakeModule.__module__}\nFakeModule\n".encode()
READERS = {"load_pth": load_pth, "read_module_checkpoint": read_module_checkpoint}


def text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def put(index: int) -> bytes:
    return b"r" + struct.pack("<I", index)


def get(index: int) -> bytes:
    return b"j" + struct.pack("<I", index)


def module_pickle(name: str, value: bytes) -> bytes:
    """{"model": a module whose setting `name` is the object `value` builds}."""
    return (b"\x80\x02}" + text("model") + CLS + b")\x81}" + text("_modules") + b"}s" + text(name) + value
            + b"sbs.")


def deep_tuple(depth: int) -> bytes:
    return b")" + b"\x85" * depth            # ((((),),),) ...: EMPTY_TUPLE, then TUPLE1 `depth` times


def shared_tuples(levels: int) -> bytes:
    """t0 = (), t(i+1) = (t_i, t_i), through memo slot 0: `levels` tuples, 2**levels unfolded."""
    return b")" + put(0) + b"0" + (get(0) + get(0) + b"\x86" + put(0) + b"0") * levels + get(0)


# every place the unpickler hashes an object: (name, pickle bytes of a value that hashes `key`)
HASHED = {
    "dict key (SETITEM)": lambda key: b"}" + key + b"Ns",
    "dict key (DICT)": lambda key: b"(" + key + b"Nd",
    "set member (ADDITEMS)": lambda key: b"\x8f(" + key + b"\x90",
    "frozenset member (FROZENSET)": lambda key: b"(" + key + b"\x91",
    "set of a list (REDUCE builtins.set)": lambda key: b"cbuiltins\nset\n]" + key + b"a\x85R",
    "OrderedDict key (REDUCE)": lambda key: b"ccollections\nOrderedDict\n)R" + key + b"Ns",
    "OrderedDict of pairs (REDUCE)": lambda key: b"ccollections\nOrderedDict\n]" + key + b"N\x86a\x85R",
    "key inside a tensor reference": lambda key: b"}ctorch._utils\n_rebuild_tensor_v2\n(NK\x00" + key
                                                 + b"NNNtRNs",
}


def _load_in_child(cases: dict) -> dict:
    """Load each {name: checkpoint bytes} in a fresh Python; {name: what happened}, a crash included."""
    script = textwrap.dedent("""
        import json, sys
        from engine.formats import load_pth, read_module_checkpoint
        readers = {"load_pth": load_pth, "read_module_checkpoint": read_module_checkpoint}
        name, reader = sys.argv[1], sys.argv[2]
        try:
            readers[reader](sys.stdin.buffer.read(), name=name)
            print(json.dumps({"result": "loaded"}))
        except Exception as e:
            print(json.dumps({"result": type(e).__name__, "message": str(e), "file": getattr(e, "file", None)}))
    """)
    out = {}
    for (name, reader), data in cases.items():
        started = time.perf_counter()
        run = subprocess.run([sys.executable, "-c", script, name, reader], input=data, capture_output=True,
                             timeout=60)
        seconds = time.perf_counter() - started
        if run.returncode:
            out[name, reader] = {"result": f"exit {run.returncode}", "stderr": run.stderr.decode()[-500:]}
        else:
            out[name, reader] = {**json.loads(run.stdout), "seconds": seconds}
    return out


def test_a_deeply_nested_tuple_hashed_anywhere_is_refused_not_a_crash():
    # 150,000 levels: what overflows the C stack in hash(); the file deflates to about a kilobyte
    key = deep_tuple(150_000)
    cases = {}
    for where, value in HASHED.items():
        blob = module_pickle("deep", value(key))
        cases[where, "read_module_checkpoint"] = make_zip(blob, {})
        cases[where, "load_pth"] = make_legacy(blob, [])
    assert len(zlib.compress(cases["dict key (SETITEM)", "load_pth"], 9)) < 2000
    for case, got in _load_in_child(cases).items():
        assert got["result"] == "InvalidHeader", (case, got)
        assert got["file"] == case[0], (case, got)
        assert f"nest {MAX_NESTING + 1} levels deep, past the limit of {MAX_NESTING}" in got["message"], (case, got)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("where", HASHED)
def test_tuples_shared_through_the_memo_do_not_hash_forever(where, reader):
    # 60 levels of (t, t): 2**60 items to hash unfolded, 60 tuples in the file
    blob = module_pickle("shared", HASHED[where](shared_tuples(60)))
    started = time.perf_counter()
    with pytest.raises(InvalidHeader, match="steps to hash") as info:
        READERS[reader](make_zip(blob, {}), name="dag.pt")
    assert info.value.file == "dag.pt" and time.perf_counter() - started < 5
    # the same shape at 12 levels is 4096 items: hashed, and read
    read_module_checkpoint(make_zip(module_pickle("shared", b"}" + shared_tuples(12) + b"Ns"), {}))


def _int(value: int) -> bytes:
    return pickle.dumps(value, protocol=2)[2:-1]


@pytest.mark.parametrize("where", ["dict key (SETITEM)", "set member (ADDITEMS)", "set of a list (REDUCE builtins.set)"])
def test_keys_chosen_to_share_a_hash_are_refused(where):
    # k * (2**61 - 1) all hash to 0: each insertion compares with every key before it
    keys = b"".join(_int(k * ((1 << 61) - 1)) for k in range(1, 30_000))
    values = {"dict key (SETITEM)": b"}(" + b"".join(_int(k * ((1 << 61) - 1)) + b"N" for k in range(1, 30_000)) + b"u",
              "set member (ADDITEMS)": b"\x8f(" + keys + b"\x90",
              "set of a list (REDUCE builtins.set)": b"cbuiltins\nset\n](" + keys + b"e\x85R"}[where]
    started = time.perf_counter()
    with pytest.raises(InvalidHeader, match=f"over {MAX_CHOSEN_KEYS} dict keys or set members whose hash the file "
                                            f"chooses") as info:
        read_module_checkpoint(make_zip(module_pickle("names", values), {}), name="flood.pt")
    assert info.value.file == "flood.pt" and time.perf_counter() - started < 5


def test_ordinary_keys_are_not_counted():
    # 50,000 small int keys (a class-name table), strings, None and booleans: nothing to refuse
    names = {i: f"class {i}" for i in range(50_000)}
    data = make_zip(pickle_with_storages({"model": FakeModule(names=names, flags={None: 1, True: 2, "x": 3}),
                                          "date": "2024"}, False), {})
    got = read_module_checkpoint(data)
    assert got.modules[""].attrs["names"] == names and got.modules[""].attrs["flags"] == {None: 1, True: 2, "x": 3}


# --- the stand-ins stay as they were -----------------------------------------------------------------

def _build(target: bytes, state: bytes) -> bytes:
    """A pickle that gives `target` (an allowed global) the BUILD state `state`, then holds a module."""
    return b"\x80\x02" + target + state + b"b0" + module_pickle("x", b"N")[2:]


# slot state {"__defaults__": ((7,),)} and a dict state, on every global either unpickler allows
DEFAULTS = b"N}" + text("__defaults__") + b"K\x07\x85\x85s\x86"
DICT_STATE = b"}" + text("marker") + text("set") + b"s"
ALLOWED = sorted({*pickled.GLOBALS, *pickled.MODULE_GLOBALS, "collections.OrderedDict", "builtins.set",
                  "builtins.frozenset"})


@pytest.mark.parametrize("state", [DEFAULTS, DICT_STATE], ids=["slots", "dict"])
@pytest.mark.parametrize("name", ALLOWED)
def test_state_given_to_an_allowed_global_is_refused(name, state):
    module, _, attribute = name.rpartition(".")
    blob = _build(f"c{module}\n{attribute}\n".encode(), state)
    with pytest.raises(UnsafePickle, match=f"refusing to give state to {name}") as info:
        read_module_checkpoint(make_zip(blob, {}), name="poison.pt")
    assert info.value.file == "poison.pt"


def test_a_hostile_load_leaves_nothing_for_the_next_one():
    # first: torch.Size's defaults and builtins.object's attributes, as BUILD would set them
    for hostile in (_build(b"ctorch\nSize\n", DEFAULTS), _build(b"cbuiltins\nobject\n", DICT_STATE),
                    _build(b"ctorch._utils\n_rebuild_tensor_v2\n", DEFAULTS)):
        with pytest.raises(UnsafePickle):
            read_module_checkpoint(make_zip(hostile, {}))
    # then: torch.Size() with no arguments is (), a tensor rebuilt as always, object rebuilt as always
    plain = module_pickle("shape", b"ctorch\nSize\n)R")
    assert read_module_checkpoint(make_zip(plain, {})).modules[""].attrs["shape"] == ()
    weight = FakeTensor(FakeStorage("0", 3), 0, (3,), (1,))
    got = read_module_checkpoint(make_zip(pickle_with_storages({"model": FakeModule(parameters={"w": weight})},
                                                               False), {"0": bytes(12)}))
    assert got.tensors["w"].tolist() == [0.0, 0.0, 0.0]
    assert not hasattr(pickled.MODULE_GLOBALS["builtins.object"], "__dict__")
    for stand_in in pickled.MODULE_GLOBALS.values():
        with pytest.raises((UnsafePickle, AttributeError)):
            stand_in.__defaults__ = (1,)


def test_a_record_class_cannot_be_changed():
    # BUILD on the class itself (not an instance): its slot state would set class attributes
    blob = _build(CLS, b"N}" + text("qualified_name") + b"Ks\x86")
    with pytest.raises(WeightsError) as info:
        read_module_checkpoint(make_zip(blob, {}), name="cls.pt")
    assert info.value.file == "cls.pt"


def test_ordered_dicts_and_sets_still_read_as_before():
    module = FakeModule(tags={"a", "b"}, frozen=frozenset({1, 2}), order=OrderedDict([("x", 1), ("y", 2)]))
    got = read_module_checkpoint(make_zip(pickle_with_storages({"model": module}, False), {}))
    attrs = got.modules[""].attrs
    assert attrs["order"] == {"x": 1, "y": 2} and list(attrs["order"]) == ["x", "y"]
    assert "tags" not in attrs and "frozen" not in attrs       # sets are not plain settings (as before)
    blob = module_pickle("pairs", b"ccollections\nOrderedDict\n](" + text("a") + b"K\x01\x86" + text("b")
                         + b"K\x02\x86e\x85R")
    assert read_module_checkpoint(make_zip(blob, {})).modules[""].attrs["pairs"] == {"a": 1, "b": 2}


# --- messages about hostile values -------------------------------------------------------------------

def test_shown_stays_short_whatever_the_value():
    t = ()
    for _ in range(80):
        t = (t, t)                            # 2**80 items unfolded
    nested: list = []
    for _ in range(100_000):
        nested = [nested]                     # past the recursion limit
    started = time.perf_counter()
    assert shown(t, 50) == "(" * 50 + "..."
    assert shown(nested, 20) == "[" * 20 + "..."
    assert shown(10 ** 5000) == "<int too large to show>"
    assert time.perf_counter() - started < 1
    for value in ({"a": [1, (2,), {3}], "b": frozenset(), "c": b"x"}, (), (1,), [None, True, 1.5], set(),
                  pickled.TensorRef(1, 2, (3,), (1,)), "é" * 100):
        for limit in (5, 30, 200):
            full = repr(value)
            assert shown(value, limit) == (full if len(full) <= limit else full[:limit] + "...")
