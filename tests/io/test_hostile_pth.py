"""Hostile .pth checkpoints, classes of finding of the readers' fuzzer (tests/fuzz): zip features
torch never writes (other compression methods, encryption, damaged deflate streams, entries that
inflate to gigabytes), pickles whose opcodes claim more than they hold, and sizes or counts too big
for NumPy or for Python's int-to-str limit. Each is a WeightsError naming the file."""
from __future__ import annotations

import io
import pickle
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from engine.errors import InvalidHeader, InvalidOffsets, TruncatedFile, WeightsError
from engine.formats import load_pth
from tests.fuzz.containers import deflated_zeros, zip_entries, zip_with_raw_entry
from tests.io.test_pth import FakeStorage, FakeTensor, make_legacy, make_zip, pickle_with_storages


def checkpoint(fmt: str, obj, storages: dict) -> bytes:
    blob = pickle_with_storages(obj, fmt == "legacy")
    if fmt == "zip":
        return make_zip(blob, storages)
    return make_legacy(blob, [(key, len(data) // 4, data) for key, data in storages.items()])


def simple(fmt: str = "zip") -> bytes:
    return checkpoint(fmt, {"w": FakeTensor(FakeStorage("0", 3), 0, (3,), (1,))},
                      {"0": np.arange(3, dtype="<f4").tobytes()})


def rezipped(data: bytes, method: int, flag_bits: int = 0) -> bytes:
    """The archive written again with every entry compressed by `method` (and `flag_bits` set)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            fresh = zipfile.ZipInfo(info.filename)
            fresh.compress_type = method
            new.writestr(fresh, old.read(info))
    data = bytearray(out.getvalue())
    for signature, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):       # the flags of every record
        pos = data.find(signature)
        while pos >= 0:
            struct.pack_into("<H", data, pos + at, struct.unpack_from("<H", data, pos + at)[0] | flag_bits)
            pos = data.find(signature, pos + 4)
    return bytes(data)


def refused(data: bytes, error=WeightsError, match: str | None = None):
    with pytest.raises(error, match=match) as info:
        load_pth(data, name="hostile.pt")
    assert info.value.file == "hostile.pt"
    return info.value


# --- zip features ----------------------------------------------------------------------------------

def test_deflated_entries_are_read():
    assert load_pth(rezipped(simple(), zipfile.ZIP_DEFLATED))["w"].numpy().tolist() == [0, 1, 2]


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_other_compression_methods(method):
    refused(rezipped(simple(), method), InvalidHeader, f"compression method {method}")


def test_encrypted_entries():
    refused(rezipped(simple(), zipfile.ZIP_STORED, flag_bits=0x1), InvalidHeader, "encrypted")
    refused(rezipped(simple(), zipfile.ZIP_STORED, flag_bits=0x41), InvalidHeader, "encrypted")


def test_a_damaged_deflate_stream():
    data = bytearray(rezipped(simple(), zipfile.ZIP_DEFLATED))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("archive/data.pkl")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start:start + 8] = b"\xff" * 8
    refused(bytes(data), TruncatedFile, "cannot read zip entry 'archive/data.pkl'")


def test_an_unsupported_zip_version():
    data = bytearray(simple())
    pos = data.find(b"PK\x01\x02")
    struct.pack_into("<H", data, pos + 6, 64)            # "version needed to extract": 6.4
    refused(bytes(data), TruncatedFile, "zip archive is truncated or corrupt: NotImplementedError")


def test_a_pickle_entry_that_inflates_to_a_gigabyte_is_not_inflated():
    size = 1 << 30
    data = zip_with_raw_entry(zip_entries(simple()), "archive/data.pkl", deflated_zeros(size), size)
    tracemalloc.start()
    start = time.perf_counter()
    refused(data, InvalidHeader, "data.pkl is over")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200 << 20 and time.perf_counter() - start < 5


def test_a_storage_entry_shorter_than_its_tensor_is_refused_before_reading():
    data = checkpoint("zip", {"w": FakeTensor(FakeStorage("0", 1000), 0, (1000,), (1,))},
                      {"0": bytes(12)})
    refused(data, TruncatedFile, "has 12 bytes, but its 1000 float32 elements need 4000")


# --- what pickle opcodes claim ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_a_memo_index_of_two_billion_is_refused_before_the_unpickler_allocates(fmt):
    blob = bytearray(pickle_with_storages({"w": FakeTensor(FakeStorage("0", 3), 0, (3,), (1,))}, fmt == "legacy"))
    at = blob.index(b"q\x00")                            # BINPUT 0 -> LONG_BINPUT 2**31 - 1
    blob[at:at + 2] = b"r" + struct.pack("<I", 2 ** 31 - 1)
    data = make_zip(bytes(blob), {"0": bytes(12)}) if fmt == "zip" else make_legacy(bytes(blob), [("0", 3, bytes(12))])
    tracemalloc.start()
    refused(data, InvalidHeader, "memo index 2147483647")
    assert tracemalloc.get_traced_memory()[1] < 50 << 20
    tracemalloc.stop()


def test_a_length_past_the_end_is_refused_before_the_unpickler_allocates():
    # BINBYTES8 claiming 2**62 bytes: the C unpickler allocates the claim before reading
    blob = b"\x80\x04\x8e" + struct.pack("<Q", 2 ** 62) + b"abc."
    refused(make_zip(blob, {}), TruncatedFile, "remain")


# --- sizes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("size, stride", [
    ((10 ** 5000,), (1,)),            # had no str() for the message
    ((1,) * 65, (1,) * 65),            # NumPy's limit of 64 dimensions
    ((2 ** 63,), (1,)),
    ((2 ** 40, 2 ** 40), (0, 0)),      # more elements than an int64 counts
], ids=["huge-int", "65-dims", "2**63", "overflowing-count"])
def test_sizes_numpy_cannot_hold(fmt, size, stride):
    data = checkpoint(fmt, {"w": FakeTensor(FakeStorage("0", 3), 0, size, stride)}, {"0": bytes(12)})
    error = refused(data, InvalidHeader, "malformed layout")
    assert error.tensor == "w" and len(str(error)) < 1000


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_a_huge_numel_in_a_storage_reference(fmt):
    data = checkpoint(fmt, {"w": FakeTensor(FakeStorage("0", 10 ** 5000), 0, (3,), (1,))}, {"0": bytes(12)})
    refused(data, InvalidHeader, "malformed storage reference")


def test_the_stride_of_a_dimension_of_one_is_not_used():
    data = checkpoint("zip", {"w": FakeTensor(FakeStorage("0", 3), 1, (1, 2), (2 ** 62, 1))},
                      {"0": np.arange(3, dtype="<f4").tobytes()})
    assert load_pth(data)["w"].numpy().tolist() == [[1, 2]]
    data = checkpoint("zip", {"w": FakeTensor(FakeStorage("0", 3), 0, (2, 2), (2 ** 62, 1))},
                      {"0": bytes(12)})
    refused(data, InvalidOffsets, "reach element")
