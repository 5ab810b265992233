"""The threaded WebAssembly build (engine_kernels.threads.wasm) on a pool of Node.js workers that
share one memory, started by web/kernel-pool.js as the browser worker starts it.

Each case calls a public simd kernel natively (engine.backends.simd) and records the C calls it
makes (library.recording); tests/kernels/threads_run.mjs replays exactly those calls, with the
operands copied into the pool's heap, on 1, 2 and 3 threads. Checked: the same bits on every
thread count (the splits write disjoint outputs and keep each sum's order), the native result
within the tolerances of the other wasm tests (float64 references; relaxed FMA here, none in
the native baseline, so twice the reference tolerance apart at most), and that the split really
ran on 2 and 3 threads (the pool's count of split calls). Helpers that cannot start leave fewer
threads and a reason, within the timeout; one that dies after the start leaves the calling thread
alone (the kernels go on, and say why).

Skips with the reason when clang-19 or node is missing, except under CI (tests/helpers.need)."""
import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from engine import quants
from engine.backends.simd import kernels as K
from engine.backends.simd import library
from engine.backends.simd import quantized as Q
from tests.helpers import need, need_wasm_compiler
from tests.kernels.conftest import require_simd
from tests.kernels.reference import (
    attention_reference,
    gemm_reference,
    linear_q_reference,
    random_blocks,
)
from wasm_kernels import build

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "kernels" / "threads_run.mjs"
HELPER = ROOT / "web" / "kernel-helper.js"
NODE = ["node", "--experimental-wasm-relaxed-simd"]
THREADS = (1, 2, 3)
pytestmark = pytest.mark.slow


def _conv_tolerance(x, weight, bias, stride, padding, groups=1):
    """1.2e-5 of sum |x| |w| + |bias| per output (the conv checks' tolerance in wasm_checks.py)"""
    kh, kw = weight.shape[2:]
    padded = np.pad(np.abs(x.astype(np.float64)), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    c, o = x.shape[1] // groups, weight.shape[0] // groups
    scale = np.concatenate([np.einsum("nchwij,ocij->nohw", windows[:, g * c:(g + 1) * c],
                                      np.abs(weight[g * o:(g + 1) * o].astype(np.float64))) for g in range(groups)], 1)
    return 1.2e-5 * (scale + np.abs(bias).reshape(-1, 1, 1)) + 1e-30


# name -> case(rng): (inputs {name: array}, run() -> output array, tolerance of one result vs exact)
def gemm_batch(rng):
    a, b = rng.standard_normal((4, 96, 128), dtype=np.float32), rng.standard_normal((4, 128, 96), dtype=np.float32)
    return {"a": a, "b": b}, lambda: K.gemm(a, b), gemm_reference(a, b)[1]


def gemm_columns(rng):
    a, b = rng.standard_normal((96, 200), dtype=np.float32), rng.standard_normal((200, 520), dtype=np.float32)
    bias = rng.standard_normal(520, dtype=np.float32)
    return {"a": a, "b": b, "bias": bias}, lambda: K.gemm(a, b, bias, "gelu"), gemm_reference(a, b, bias, "gelu")[1]


def gemm_columns_b_transposed(rng):
    a, bt = rng.standard_normal((40, 300), dtype=np.float32), rng.standard_normal((264, 300), dtype=np.float32)
    return {"a": a, "bt": bt}, lambda: K.gemm(a, bt.T), gemm_reference(a, bt.T)[1]


def gemm_rows(rng):
    a, b = rng.standard_normal((700, 300), dtype=np.float32), rng.standard_normal((300, 7), dtype=np.float32)
    return {"a": a, "b": b}, lambda: K.gemm(a, b, None, "relu"), gemm_reference(a, b, None, "relu")[1]


def gemv(rng):
    a, b = rng.standard_normal((1, 576), dtype=np.float32), rng.standard_normal((576, 1536), dtype=np.float32)
    return {"a": a, "b": b}, lambda: K.gemm(a, b), gemm_reference(a, b)[1]


def linear_f16_gemv(rng):
    x, w = rng.standard_normal((1, 576), dtype=np.float32), (rng.standard_normal((1536, 576)) * 0.05).astype(np.float16)
    return {"x": x, "w": w}, lambda: K.linear(x, w), gemm_reference(x, w.astype(np.float32).T)[1]


def linear_f16_panels(rng):
    x, w = rng.standard_normal((64, 256), dtype=np.float32), (rng.standard_normal((300, 256)) * 0.05).astype(np.float16)
    bias = rng.standard_normal(300, dtype=np.float32)
    return {"x": x, "w": w, "bias": bias}, lambda: K.linear(x, w, bias), \
        gemm_reference(x, w.astype(np.float32).T, bias)[1]


def conv2d_batch(rng):
    x, w = rng.standard_normal((2, 16, 28, 28), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    bias = rng.standard_normal(32, dtype=np.float32)
    return {"x": x, "w": w, "bias": bias}, lambda: K.conv2d(x, w, bias, 1, 1, activation="relu"), \
        _conv_tolerance(x, w, bias, 1, 1)


def conv2d_one_image(rng):
    x, w = rng.standard_normal((1, 24, 40, 40), dtype=np.float32), rng.standard_normal((48, 24, 3, 3), dtype=np.float32)
    bias = rng.standard_normal(48, dtype=np.float32)
    return {"x": x, "w": w, "bias": bias}, lambda: K.conv2d(x, w, bias, 2, 1), _conv_tolerance(x, w, bias, 2, 1)


def conv2d_pointwise(rng):
    x, w = rng.standard_normal((1, 64, 28, 28), dtype=np.float32), rng.standard_normal((96, 64, 1, 1), dtype=np.float32)
    bias = rng.standard_normal(96, dtype=np.float32)
    return {"x": x, "w": w, "bias": bias}, lambda: K.conv2d(x, w, bias), _conv_tolerance(x, w, bias, 1, 0)


def depthwise(rng):
    x, w = rng.standard_normal((1, 96, 28, 28), dtype=np.float32), rng.standard_normal((96, 1, 5, 5), dtype=np.float32)
    bias = rng.standard_normal(96, dtype=np.float32)
    return {"x": x, "w": w, "bias": bias}, lambda: K.depthwise_conv2d(x, w, bias, 2, 2, activation="relu6"), \
        _conv_tolerance(x, w, bias, 2, 2, groups=96)


def attention_heads(rng):
    qkv = rng.standard_normal((2, 37, 3, 6, 64), dtype=np.float32)     # a fused projection's output
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (N, H, L, D) views
    return {"qkv": qkv}, lambda: K.attention(q, k, v, is_causal=True), attention_reference(q, k, v, causal=True)[1]


def attention_grouped(rng):
    q = rng.standard_normal((1, 8, 20, 64), dtype=np.float32)
    k, v = rng.standard_normal((1, 2, 50, 64), dtype=np.float32), rng.standard_normal((1, 2, 50, 64), dtype=np.float32)
    mask = rng.random((1, 1, 20, 50)) < 0.9
    mask[..., 0] = True
    return {"q": q, "k": k, "v": v, "mask": mask}, lambda: K.attention(q, k, v, mask), \
        attention_reference(q, k, v, mask)[1]


def _linear_q(qtype, m, rows, cols):
    def case(rng):
        weight = random_blocks(qtype, rows, cols, rng)
        x, bias = rng.standard_normal((m, cols), dtype=np.float32), rng.standard_normal(rows, dtype=np.float32)
        w = quants.dequantize(weight, qtype).reshape(rows, cols)
        return {"x": x, "weight": weight, "bias": bias}, \
            lambda: Q.linear_q(x, bias, weight=weight, qtype=qtype, rows=rows, cols=cols), linear_q_reference(x, w, bias)[1]
    return case


CASES = {f.__name__: f for f in (gemm_batch, gemm_columns, gemm_columns_b_transposed, gemm_rows, gemv, linear_f16_gemv,
                                 linear_f16_panels, conv2d_batch, conv2d_one_image, conv2d_pointwise, depthwise,
                                 attention_heads, attention_grouped)}
CASES.update({"linear_q q4_1 decode": _linear_q("q4_1", 1, 1536, 576),
              "linear_q q4_1 prefill": _linear_q("q4_1", 37, 576, 576),
              "linear_q q4_k decode": _linear_q("q4_k", 1, 1536, 512),
              "linear_q q6_k prefill": _linear_q("q6_k", 9, 960, 512),
              "linear_q q8_0 prefill": _linear_q("q8_0", 24, 600, 576)})


def _locate(address, buffers):
    """(name, byte offset) of the buffer holding `address`"""
    for name, array in buffers.items():
        base = array.__array_interface__["data"][0]
        if base <= address < base + max(array.nbytes, 1):
            return name, address - base
    raise AssertionError(f"a kernel argument points at {address:#x}, outside every known buffer")


def _replayable(name, calls, buffers):
    """the last call (the one with enough scratch) as the runner's arguments"""
    assert calls, f"{name}: no C call was made"
    export, _, args, _ = calls[-1]
    argtypes = library.SIGNATURES[export][1]
    args = list(args[:-2] if export in library.SCRATCH else args)
    replay = []
    for value, kind in zip(args, argtypes):
        if kind is library.POINTER:
            if not value:
                replay.append(0)
            else:
                buffer, offset = _locate(value, buffers)
                replay.append({"buffer": buffer, "offset": offset})
        else:
            value = value.value if hasattr(value, "value") else value      # a c_float
            replay.append(value if isinstance(value, (int, float)) else int(value))
    if export in library.SCRATCH:
        replay += [0, 0]
    return export, replay


@pytest.fixture(scope="module")
def threads_wasm(tmp_path_factory):
    need_wasm_compiler()
    need(shutil.which("node") is not None, "node is not installed (the pool runs on Node.js workers)")
    return build.build_wasm_threads(tmp_path_factory.mktemp("threads"))


def _run(job, tmp):
    path = tmp / "job.json"
    path.write_text(json.dumps(job))
    run = subprocess.run(NODE + [str(RUNNER), "run", str(path)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def replayed(threads_wasm, tmp_path_factory):
    """{case: (native output, tolerance, {threads: output}, {threads: did it split})}, the summary, the job"""
    require_simd()                      # before the tests' own autouse check: this fixture records native calls
    tmp = tmp_path_factory.mktemp("replay")
    rng = np.random.default_rng(25)
    job = {"wasm": str(threads_wasm), "threads": list(THREADS), "timeoutMs": 30000, "out": str(tmp / "out"),
           "buffers": {}, "calls": []}
    native = {}
    for index, (case_name, case) in enumerate(CASES.items()):
        inputs, run, tolerance = case(rng)
        with library.recording() as calls:
            output = run()
        buffers = {f"{index}-{name}": array for name, array in inputs.items()}
        buffers[f"{index}-out"] = output
        export, args = _replayable(case_name, calls, buffers)
        for name, array in inputs.items():
            file = tmp / f"{index}-{name}.bin"
            assert array.flags.c_contiguous, f"{case_name}: {name} is a view (give its base)"
            file.write_bytes(array.tobytes())
            job["buffers"][f"{index}-{name}"] = {"file": str(file)}
        job["buffers"][f"{index}-out"] = {"bytes": output.nbytes}
        job["calls"].append({"name": export, "args": args, "outputs": [f"{index}-out"],
                             "scratch": export in library.SCRATCH})
        native[case_name] = (output, tolerance)
    summary = _run(job, tmp)
    results = {}
    for index, case_name in enumerate(CASES):
        output, tolerance = native[case_name]
        per_thread = {entry["requested"]: np.fromfile(tmp / "out" / f"t{entry['requested']}" / f"{index}_{index}-out.bin",
                                                      output.dtype).reshape(output.shape)
                      for entry in summary}
        split = {entry["requested"]: entry["calls"][index]["split"] for entry in summary}
        results[case_name] = (output, tolerance, per_thread, split)
    return results, summary, job


def test_threads_build_imports_only_its_memory(threads_wasm):
    exports, imports = build.read_wasm_interface(threads_wasm)
    assert imports == [("env", "memory", "memory")]              # no libc, no emscripten runtime
    functions = {name for name, kind in exports.items() if kind == "function"}
    assert set(build.EXPORTS) | {"engine_thread_main", "engine_threads_ready"} <= functions
    assert exports["__heap_base"] == exports["__stack_pointer"] == "global"
    data = threads_wasm.read_bytes()
    assert b"dylink.0" not in data and b"relaxed-simd" in data and b"atomics" in data


def test_pool_starts_every_thread(replayed):
    _, summary, _ = replayed
    assert [(entry["requested"], entry["threads"], entry["reason"]) for entry in summary] == \
        [(t, t, None) for t in THREADS]
    bases = [entry["heapBase"] for entry in summary]
    assert bases[1] - bases[0] == bases[2] - bases[1] == build.THREADS_STACK    # one stack per helper


@pytest.mark.parametrize("case", CASES)
def test_same_bits_on_every_thread_count(replayed, case):
    output, _, per_thread, _ = replayed[0][case]
    one = per_thread[1]
    assert not np.isnan(one).any() or np.isnan(output).any(), f"{case}: outputs left unwritten"
    for threads, result in per_thread.items():
        assert result.tobytes() == one.tobytes(), \
            f"{case}: {threads} threads differ from 1 at {np.argwhere(result != one)[:3].tolist()}"


@pytest.mark.parametrize("case", CASES)
def test_native_result_within_tolerance(replayed, case):
    output, tolerance, per_thread, _ = replayed[0][case]
    error = np.abs(per_thread[1].astype(np.float64) - output.reshape(per_thread[1].shape))
    worst = float((error / (2 * np.broadcast_to(tolerance, error.shape).reshape(error.shape))).max())
    assert worst <= 1.0, f"{case}: wasm vs native {worst:.3g} x the tolerance"


@pytest.mark.parametrize("case", CASES)
def test_split_runs_on_two_and_three_threads(replayed, case):
    """the pool's count of split calls (engine_pool_splits) grows on 2 and 3 threads, not on 1"""
    _, _, _, split = replayed[0][case]
    assert split == {1: False, 2: True, 3: True}, f"{case}: split {split}"


def test_each_instance_has_its_own_stack(threads_wasm):
    """a second instance on the memory writes its locals into the caller's stack until its
    __stack_pointer is moved (as kernel-helper.js moves it); then only into its own region"""
    run = subprocess.run(NODE + [str(RUNNER), "stacks", str(threads_wasm)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    for row in json.loads(run.stdout):
        assert row["result"] == 0, row
        if row["ownStack"]:
            assert row["callerStackChanged"] == 0 and row["regionChanged"] > 0, row
        else:
            assert row["callerStackChanged"] > 0 and row["regionChanged"] == 0, row


def test_helpers_that_cannot_start_give_one_thread_and_a_reason(threads_wasm, tmp_path):
    hanging = tmp_path / "hanging-helper.js"
    hanging.write_text("setInterval(() => {}, 1000);\n")           # loads, never answers
    for helper, why in ((tmp_path / "missing.js", "Cannot find module"), (hanging, "did not start within 1500 ms")):
        started = time.monotonic()
        summary = _run({"wasm": str(threads_wasm), "helper": str(helper), "threads": [3], "timeoutMs": 1500}, tmp_path)
        assert time.monotonic() - started < 20
        (entry,) = summary
        assert entry["threads"] == 1 and entry["requested"] == 3
        for tid in (1, 2):
            assert f"helper worker {tid} failed to start: {why}" in entry["reason"], entry


def _replay_some(replayed, tmp_path, **changes):
    """the GEMM cases again on 3 threads asked for, with `changes` to the job; their outputs"""
    results, _, job = replayed
    names = [name for name in CASES if name.startswith("gemm")]
    indices = [list(CASES).index(name) for name in names]
    job = dict(job, threads=[3], out=str(tmp_path), calls=[job["calls"][i] for i in indices], **changes)
    (entry,) = _run(job, tmp_path)
    for position, (name, index) in enumerate(zip(names, indices)):
        output = np.fromfile(tmp_path / "t3" / f"{position}_{index}-out.bin", np.float32)
        assert output.tobytes() == results[name][2][1].tobytes(), f"{name}: not the 1-thread result"
    return entry


def test_a_helper_that_fails_leaves_the_others(replayed, tmp_path):
    """helper 1 missing, helper 2 running: 2 threads (helper 2 takes the pool's first slot)"""
    entry = _replay_some(replayed, tmp_path, helper=[str(tmp_path / "missing.js"), str(HELPER)])
    assert entry["threads"] == 2 and entry["reason"].startswith("helper worker 1 failed to start: Cannot find module")
    assert all(call["split"] for call in entry["calls"])


def test_a_helper_that_dies_after_the_start_leaves_one_thread(replayed, tmp_path):
    """the kernels keep working (on the calling thread: the dead helper's slot is unknown) and say why"""
    entry = _replay_some(replayed, tmp_path, stop=[2])
    assert entry["threads"] == 3 and entry["threadsAfterStop"] == 1
    assert entry["reasonAfterStop"].startswith("helper worker 2 stopped: exited"), entry


def test_a_kernel_that_traps_on_the_pool_throws_and_the_pool_goes_on(threads_wasm):
    """a GEMM whose output runs past the memory's end, split over 2 and 3 threads: the threads
    writing those rows trap (helpers and the caller alike); the call throws within the timeout,
    never waits for a helper that will not answer (wasm_kernels/pool.c, engine_pool_helper_failed
    and engine_pool_release), and the pool goes on on one thread with the bits it had"""
    run = subprocess.run(NODE + [str(RUNNER), "trap", str(threads_wasm), "2", "3"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    for row in json.loads(run.stdout):
        assert row["threads"] == row["requested"] and row["splitBefore"] >= 1, row
        assert row["error"] and row["error"].startswith("gemm_f32 on the kernel pool: "), row
        assert "its result is void" in row["error"] and "trapped" in row["error"], row
        assert row["threadsAfter"] == 1 and "the kernels run on 1 thread" in row["reasonAfter"], row
        assert row["sameAfter"] and not row["splitAfter"], row
