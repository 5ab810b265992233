"""Hostile whole-module checkpoints: code that must not run, nestings past Python's recursion limit,
sizes and counts the file cannot back, damaged archives. Each is an engine error naming the file
(and the module path or tensor where there is one), never an execution, a RecursionError or a hang."""
from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import time
import tracemalloc
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

from engine.errors import (
    InvalidHeader,
    InvalidOffsets,
    TruncatedFile,
    UnsafePickle,
    WeightsError,
)
from engine.formats import load_pth, read_module_checkpoint
from tests.io.test_pth import (
    FakeStorage,
    FakeTensor,
    make_zip,
    pickle_with_storages,
    save,
    text,
)


class FakeModule:
    """Pickles as an nn.Module does: NEWOBJ of its class, then BUILD with its __dict__."""

    def __init__(self, parameters=None, modules=None, **attrs):
        self._parameters = OrderedDict(parameters or {})
        self._buffers = OrderedDict()
        self._modules = OrderedDict(modules or {})
        self.__dict__.update(attrs)


class Call:
    """Pickles as a call of `function` (a REDUCE)."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def boom(marker):                     # a harmless-looking global outside every allowlist
    open(marker, "w").close()


def module_file(model, storages=None, **entries) -> bytes:
    return make_zip(pickle_with_storages({"model": model, **entries}, False), storages or {})


def refused(data: bytes, error=WeightsError, match: str | None = None, reader=read_module_checkpoint):
    with pytest.raises(error, match=match) as info:
        reader(data, name="hostile.pt")
    assert info.value.file == "hostile.pt", info.value
    return info.value


# --- code that must not run --------------------------------------------------------------------------

@pytest.mark.parametrize("function", [os.system, eval, boom])
@pytest.mark.parametrize("reader", [read_module_checkpoint, load_pth])
def test_a_call_in_a_module_never_runs(function, reader, tmp_path):
    marker = tmp_path / "pwned"
    argument = {os.system: f"touch {marker}", eval: f"open({str(marker)!r}, 'w').close()"}.get(function, str(marker))
    pickle.loads(pickle.dumps(Call(function, argument), protocol=2))      # the payload is live
    assert marker.exists()
    marker.unlink()
    data = module_file(FakeModule(settings=Call(function, argument)))
    name = {os.system: "system", eval: "eval"}.get(function, "test_hostile_pth_modules.boom")
    refused(data, UnsafePickle, name, reader)
    assert not marker.exists()


def test_a_system_global_is_refused_even_where_it_would_stay_inert():
    # NEWOBJ of os.system: not a call, but nothing from os belongs in a model
    blob = b"\x80\x02}(" + text("model") + b"cos\nsystem\n)\x81u."
    refused(make_zip(blob, {}), UnsafePickle, "os.system")


def test_getattr_gives_a_reference_that_cannot_be_called(tmp_path):
    # getattr(FakeModule, "__init__")() : the stand-in returns an inert reference; calling it is refused
    cls = f"c{FakeModule.__module__}\nFakeModule\n".encode()
    blob = b"\x80\x02}(" + text("model") + b"cbuiltins\ngetattr\n(" + cls + text("__init__") + b"tR)Ru."
    refused(make_zip(blob, {}), UnsafePickle, "getattr")


def test_calling_a_class_is_refused():
    # REDUCE of a class outside the allowlist: from the file alone it could be a function
    blob = b"\x80\x02}(" + text("model") + f"c{FakeModule.__module__}\nFakeModule\n)R".encode() + b"u."
    refused(make_zip(blob, {}), UnsafePickle, "refusing to call .*FakeModule")


def test_a_pickle_naming_twenty_thousand_classes():
    names = b"".join(f"c{FakeModule.__module__}.c{i}\nC\n".encode() for i in range(20_000))
    refused(make_zip(b"\x80\x02(" + names + b"l.", {}), InvalidHeader, "names over 10000 classes")


# --- nesting ------------------------------------------------------------------------------------

def put(index: int) -> bytes:
    return b"r" + struct.pack("<I", index)


def get(index: int) -> bytes:
    return b"j" + struct.pack("<I", index)


def record_chain(depth: int) -> bytes:
    """{"model": m0} where m_i's _modules is {"m": m_(i+1)}, `depth` records deep: built innermost
    first through memo slot 0 (pickle.dumps itself would hit the recursion limit)."""
    cls = f"c{FakeModule.__module__}\nFakeModule\n".encode()
    first = cls + b")\x81}" + text("_modules") + b"}sb" + put(0) + b"0"
    level = cls + b")\x81}" + text("_modules") + b"}" + text("m") + get(0) + b"ssb" + put(0) + b"0"
    return b"\x80\x02" + first + level * (depth - 1) + b"}" + text("model") + get(0) + b"s."


def nested_lists(depth: int) -> bytes:
    """A module whose setting `deep` is a list nested `depth` levels."""
    cls = f"c{FakeModule.__module__}\nFakeModule\n".encode()
    lists = b"]" * depth + b"a" * (depth - 1)
    return (b"\x80\x02}" + text("model") + cls + b")\x81}" + text("_modules") + b"}s" + text("deep") + lists
            + b"sbs.")


def test_a_record_chain_a_hundred_thousand_deep():
    start = time.perf_counter()
    error = refused(make_zip(record_chain(100_000), {}), InvalidHeader, "nest deeper than 64 levels")
    assert "m.m.m" in str(error) and len(str(error)) < 2000
    assert time.perf_counter() - start < 10
    read_module_checkpoint(make_zip(record_chain(60), {}))          # real depths read


def test_lists_nested_a_hundred_thousand_deep():
    # the opcode walk refuses it before anything is built; under its limit, the settings' own limit holds
    refused(make_zip(nested_lists(100_000), {}), InvalidHeader, "containers nest 257 levels deep, past the limit of 256")
    refused(make_zip(nested_lists(40), {}), InvalidHeader, "'deep' nests deeper than 32 levels")
    assert read_module_checkpoint(make_zip(nested_lists(20), {})).modules[""].attrs["deep"] == \
        [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]
    assert sys.getrecursionlimit() <= 100_000            # the nestings above are deeper than it


def test_nesting_stacked_through_memo_references():
    # [L200, L199, ..., L0] with L(i+1) = [Li]: each list is converted (and memoized) before the one
    # holding it, so no path is deep; the heights still are
    chain = [[]]
    for _ in range(200):
        chain.append([chain[-1]])
    refused(module_file(FakeModule(deep=chain[::-1])), InvalidHeader, "'deep' nests deeper than 32 levels")


def test_a_list_inside_itself():
    cls = f"c{FakeModule.__module__}\nFakeModule\n".encode()
    blob = (b"\x80\x02}" + text("model") + cls + b")\x81}" + text("_modules") + b"}s" + text("loop") + b"]" + put(0)
            + get(0) + b"asbs.")
    refused(make_zip(blob, {}), InvalidHeader, "'loop' contains itself")


def test_a_module_inside_itself_and_a_shared_one_are_visited_once():
    parent = FakeModule()
    parent._modules["self"] = parent
    assert list(read_module_checkpoint(module_file(parent)).modules) == [""]
    # 60 levels, each holding the next twice: 2**60 paths, 61 records
    node = FakeModule()
    for _ in range(60):
        node = FakeModule(modules={"a": node, "b": node})
    start = time.perf_counter()
    got = read_module_checkpoint(module_file(node))
    assert len(got.modules) == 61 and time.perf_counter() - start < 5


def test_a_shared_setting_is_converted_once():
    shared = [list(range(1000))] * 1000          # a million items through a thousand memo references
    many = {f"m{i}": FakeModule(values=shared) for i in range(1000)}
    start = time.perf_counter()
    got = read_module_checkpoint(module_file(FakeModule(modules=many)))
    assert len(got.modules["m999"].attrs["values"]) == 1000 and time.perf_counter() - start < 5


def test_a_protocol_1_pickle_rebuilds_records_through_copyreg():
    # copyreg._reconstructor(cls, object, None): object.__new__ of a record class, then BUILD
    weight = FakeTensor(FakeStorage("0", 3), 0, (3,), (1,))

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            return ("storage", o.kind, o.key, "cpu", o.numel) if isinstance(o, FakeStorage) else None
    out = io.BytesIO()
    Pickler(out, protocol=1).dump({"model": FakeModule(modules={"conv": FakeModule(parameters={"w": weight}, k=3)})})
    assert b"_reconstructor" in out.getvalue()
    got = read_module_checkpoint(make_zip(out.getvalue(), {"0": np.arange(3, dtype="<f4").tobytes()}))
    assert got.tensors["conv.w"].tolist() == [0, 1, 2] and got.modules["conv"].attrs == {"k": 3}
    # its arguments are checked: a base other than object is refused
    blob = out.getvalue().replace(b"c__builtin__\nobject\n", b"ccollections\nOrderedDict\n", 1)
    refused(make_zip(blob, {"0": bytes(12)}), InvalidHeader, "only records over builtins.object")


# --- what the records hold ----------------------------------------------------------------------------

def test_malformed_records_name_the_module():
    refused(module_file(FakeModule(parameters={"w": "text"})), InvalidHeader, "parameter 'w' is a str")
    error = refused(module_file(FakeModule(modules={"sub": FakeModule(parameters={"w": 3})})), InvalidHeader)
    assert error.tensor == "sub.w" and "module 'sub'" in str(error)
    refused(module_file(FakeModule(modules={"x": 5})), InvalidHeader, "submodule 'x' is a int")
    refused(module_file(5), InvalidHeader, "holds no torch module")
    bad = FakeModule()
    bad._modules = [1, 2]
    refused(module_file(bad), InvalidHeader, "its _modules is a list")


def test_a_huge_size_names_the_tensor():
    weight = FakeTensor(FakeStorage("0", 3), 0, (2 ** 62,), (1,))
    data = module_file(FakeModule(modules={"conv": FakeModule(parameters={"weight": weight})}), {"0": bytes(12)})
    error = refused(data, InvalidOffsets, "reach element 4611686018427387903 of a storage of 3 elements")
    assert error.tensor == "conv.weight"
    numel = FakeTensor(FakeStorage("0", 10 ** 5000), 0, (3,), (1,))
    refused(module_file(FakeModule(parameters={"w": numel}), {"0": bytes(12)}), InvalidHeader,
            "malformed storage reference")


def test_one_storage_named_again_and_again_is_refused_before_memory_runs_out():
    numel = 1 << 16                       # 256 KB, named by 4000 distinct tensors: 1 GB of copies
    refs = {f"w{i}": FakeTensor(FakeStorage("0", numel), 0, (numel,), (1,)) for i in range(4000)}
    data = module_file(FakeModule(parameters=refs), {"0": bytes(4 * numel)})
    tracemalloc.start()
    refused(data, InvalidOffsets, "more than the file can back")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 300 << 20
    # one tensor object named 4000 times (the memo) is one array
    ref = FakeTensor(FakeStorage("0", numel), 0, (numel,), (1,))
    got = read_module_checkpoint(module_file(FakeModule(parameters={f"w{i}": ref for i in range(4000)}),
                                             {"0": bytes(4 * numel)}))
    assert len(got.tensors) == 4000 and got.tensors["w0"] is got.tensors["w3999"]


# --- damaged archives -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> bytes:
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    return open(save({"model": net, "version": "1"}, tmp_path_factory.mktemp("m") / "net.pt", "zip"), "rb").read()


def rewritten(data: bytes, drop=(), cut=()) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            if not any(info.filename.endswith(d) for d in drop):
                body = old.read(info)
                new.writestr(info, body[:len(body) // 2] if any(info.filename.endswith(c) for c in cut) else body)
    return out.getvalue()


def test_damaged_module_archives(small_checkpoint):
    assert list(read_module_checkpoint(small_checkpoint).tensors)[:2] == ["0.weight", "0.bias"]
    refused(small_checkpoint[:len(small_checkpoint) // 2], TruncatedFile, "zip archive is truncated")
    refused(rewritten(small_checkpoint, cut=["data.pkl"]), TruncatedFile, "truncated inside a pickle")
    error = refused(rewritten(small_checkpoint, drop=["data/0"]), InvalidHeader, "lacks the storage entry")
    assert error.tensor == "0.weight"
    error = refused(rewritten(small_checkpoint, cut=["data/1"]), TruncatedFile)
    assert error.tensor == "0.bias"
    assert np.isfinite(read_module_checkpoint(small_checkpoint).tensors["1.running_var"]).all()
