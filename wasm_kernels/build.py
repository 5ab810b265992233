"""Build the C kernels: natively (a shared library for ctypes) and for Pyodide (wasm32).

    python wasm_kernels/build.py             # native library into .cache/native/, wasm into build/kernels/
    python wasm_kernels/build.py --wasm --out DIR

As a module (buildtools, the simd backend): `build_native(out_dir)`, `build_wasm(out_dir, relaxed)`,
`build_wasm_threads(out_dir)` (the threaded flavour for web/kernel-pool.js), `native_library()` (cached by
source hash), `read_wasm_interface(path)`. Standard library only.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("gemm.c", "conv.c", "depthwise.c", "norm.c", "attention.c", "convert.c", "quant.c", "quant_acts.c",
           "quant_small.c", "quant_k.c", "pool.c", "program.c")
HEADERS = ("common.h", "exports.h", "gemm.h", "geometry.h", "depthwise.h", "half.h", "quant_common.h", "quant_acts.h", "quant_small.h",
           "quant_k.h", "pool.h")
EXPORTS = ("gemm_f32", "gemm_f16w_f32", "im2col_f32", "conv2d_f32", "depthwise_conv2d_f32", "softmax_f32", "layer_norm_f32",
           "rms_norm_f32", "add_layer_norm_f32", "scale_shift_f32", "clamp_f32", "activation_f32", "rope_f32", "silu_mul_f32", "attention_f32",
           "linear_q_f32", "embedding_q_f32", "index_copy_f32", "f16_to_f32", "bf16_to_f32", "f32_to_bf16", "engine_kernels_abi",
           "engine_kernels_features", "engine_threads", "engine_set_threads", "engine_run_program", "add_f32")
COMMON_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-math-errno",
                "-ffreestanding", "-fno-builtin", "-Wall")
# Natively the kernels split on a pthread pool (pool.c). The library is built on the machine that
# runs it, so it takes that machine's instructions (MACHINE_FLAGS: AVX2 and FMA on a recent x86,
# the GEMM ~1.5x faster than the SSE2 baseline), multiply-adds fused only where a kernel asks for
# one (madd, as in the relaxed wasm build) and never contracted elsewhere, so the ops written to be
# exact stay exact. A compiler that refuses them, or $ENGINE_KERNELS_PORTABLE=1, gives the portable
# baseline (SSE2 on x86-64).
NATIVE_FLAGS = COMMON_FLAGS + ("-DENGINE_THREADS", "-pthread", "-ffp-contract=off")
MACHINE_FLAGS = ("-march=native",)
WASM_FLAGS = ("--target=wasm32-unknown-emscripten", "-msimd128", "-nostdlib", "-Wl,--no-entry") + COMMON_FLAGS
WASM_NAMES = {False: "engine_kernels.simd.wasm", True: "engine_kernels.relaxed.wasm"}
# The threaded flavour: a standalone module (no emscripten, no libc) that every worker of a pool
# instantiates on one shared memory it imports (web/kernel-pool.js). Each instance has its own
# __stack_pointer (a global), exported so that a helper's can be pointed at a stack of its own;
# __heap_base says where free memory begins. --stack-first: an overflow of the caller's stack traps.
THREADS_NAME = "engine_kernels.threads.wasm"
THREADS_STACK = 1 << 20
THREADS_EXPORTS = ("engine_thread_main", "engine_threads_ready", "__heap_base", "__stack_pointer")
WASM_THREADS_FLAGS = ("--target=wasm32", "-msimd128", "-mrelaxed-simd", "-matomics", "-mbulk-memory",
                      "-DENGINE_THREADS", "-nostdlib", "-O3", "-std=gnu11", "-fvisibility=hidden",
                      "-fno-math-errno", "-ffreestanding", "-fno-builtin", "-Wall", "-Wl,--no-entry",
                      "-Wl,--import-memory", "-Wl,--shared-memory", "-Wl,--max-memory=4294967296",
                      "-Wl,--stack-first", f"-Wl,-z,stack-size={THREADS_STACK}", "-Wl,--export-dynamic",
                      "-Wl,--export=__heap_base", "-Wl,--export=__stack_pointer")
DEFAULT_CACHE = HERE.parent / ".cache" / "native"


class BuildError(RuntimeError):
    """No suitable compiler, or the compiler failed (the message says which and why)."""


def source_hash(extra: tuple = ()) -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    for item in extra:
        h.update(str(item).encode() + b"\0")
    return h.hexdigest()[:16]


def find_native_compiler() -> str:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise BuildError("no C compiler found (looked for $CC, cc, gcc, clang); install one (e.g. `apt-get install "
                     "gcc`) to use the simd backend — the numpy backend works without it")


def find_wasm_compiler() -> str:
    for candidate in (os.environ.get("WASM_CC"), "clang-19", "/usr/lib/llvm-19/bin/clang"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise BuildError("clang-19 not found (needed for the WebAssembly kernels; clang 14 emits an outdated "
                     "relaxed-SIMD opcode): `apt-get install clang-19 lld-19`, or set WASM_CC")


def _compile(compiler: str, flags: tuple, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    cmd = [compiler, *flags, "-I", str(HERE), *(str(HERE / s) for s in SOURCES), "-o", str(tmp)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BuildError(f"cannot run {compiler}: {e}") from e
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    os.replace(tmp, out)                        # atomic: a half-written library is never loaded
    return out


def _processor() -> str:
    """What the machine flags compile for: the processor's name and features (Linux), else its
    platform name; part of the library's cache name, so a cache shared by two machines keeps two."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = [line for line in info if line.startswith(("model name", "flags", "Features", "CPU part"))]
        return "".join(sorted(set(lines)))
    except OSError:
        import platform
        return f"{platform.machine()} {platform.processor()}"


def native_flags() -> tuple:
    """The flags of the native build here: NATIVE_FLAGS + MACHINE_FLAGS, or NATIVE_FLAGS alone
    with $ENGINE_KERNELS_PORTABLE set."""
    portable = os.environ.get("ENGINE_KERNELS_PORTABLE", "") not in ("", "0")
    return NATIVE_FLAGS if portable else NATIVE_FLAGS + MACHINE_FLAGS


def native_name(compiler: str) -> str:
    """The native library's file name: a hash of the sources, compiler, flags and (when built for
    this machine) the processor."""
    flags = native_flags()
    machine = (_processor(),) if flags != NATIVE_FLAGS else ()
    return f"engine_kernels-{source_hash((compiler,) + flags + machine)}.so"


def build_native(out_dir) -> Path:
    """The kernels as a native shared library in out_dir, named by source hash (reused if present)."""
    compiler = find_native_compiler()
    flags = native_flags()
    out = Path(out_dir) / native_name(compiler)
    if out.exists():
        return out
    try:
        _compile(compiler, flags, out)
    except BuildError:
        if flags == NATIVE_FLAGS:
            raise
        _compile(compiler, NATIVE_FLAGS, out)
    for stale in out.parent.glob("engine_kernels-*.so"):    # builds of older sources
        if stale != out:
            stale.unlink(missing_ok=True)
    return out


def build_wasm(out_dir, relaxed: bool) -> Path:
    """The kernels for Pyodide (wasm32 side module, loadable with ctypes.CDLL), checked: every
    export present and nothing imported but memory and the relocation globals."""
    flags = WASM_FLAGS + (("-mrelaxed-simd",) if relaxed else ())
    out = _compile(find_wasm_compiler(), flags, Path(out_dir) / WASM_NAMES[bool(relaxed)])
    exports, imports = read_wasm_interface(out)
    missing = sorted(set(EXPORTS) - set(exports))
    calls = sorted(f"{module}.{name}" for module, name, kind in imports if kind == "function")
    if missing or calls:
        raise BuildError(f"{out}: missing exports {missing} / unexpected function imports {calls} "
                         "(a libc call slipped in?)")
    return out


def build_wasm_threads(out_dir) -> Path:
    """The threaded kernels (relaxed SIMD + atomics, ENGINE_THREADS), checked: every export of the
    other builds, the pool's and the stack's, and nothing imported but the (shared) memory."""
    out = _compile(find_wasm_compiler(), WASM_THREADS_FLAGS, Path(out_dir) / THREADS_NAME)
    exports, imports = read_wasm_interface(out)
    missing = sorted(set(EXPORTS + THREADS_EXPORTS) - set(exports))
    if missing or imports != [("env", "memory", "memory")]:
        raise BuildError(f"{out}: missing exports {missing} / imports {imports} (expected only env.memory: "
                         "a libc call slipped in?)")
    return out


def native_library(cache_dir=None) -> Path:
    """build_native into $ENGINE_KERNELS_CACHE or <repo>/.cache/native (rebuilt when sources change)."""
    return build_native(cache_dir or os.environ.get("ENGINE_KERNELS_CACHE") or DEFAULT_CACHE)


# --- a minimal reader of the WebAssembly binary format (export and import sections) -----------------
_KINDS = {0: "function", 1: "table", 2: "memory", 3: "global", 4: "tag"}


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _name(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _uleb(data, pos)
    return data[pos:pos + length].decode("utf-8"), pos + length


def _skip_limits(data: bytes, pos: int) -> int:
    flags, pos = _uleb(data, pos)
    _, pos = _uleb(data, pos)
    if flags & 1:
        _, pos = _uleb(data, pos)
    return pos


def read_wasm_interface(path) -> tuple[dict, list]:
    """({export name: kind}, [(module, name, kind) of each import]) of a .wasm file."""
    data = Path(path).read_bytes()
    if data[:4] != b"\0asm":
        raise BuildError(f"{path} is not a WebAssembly module")
    exports, imports, pos = {}, [], 8
    while pos < len(data):
        section, pos = data[pos], pos + 1
        size, pos = _uleb(data, pos)
        end, cursor = pos + size, pos
        if section == 2:                               # imports
            count, cursor = _uleb(data, cursor)
            for _ in range(count):
                module, cursor = _name(data, cursor)
                name, cursor = _name(data, cursor)
                kind, cursor = data[cursor], cursor + 1
                if kind == 0:
                    _, cursor = _uleb(data, cursor)             # type index
                elif kind == 1:
                    cursor = _skip_limits(data, cursor + 1)     # reftype, limits
                elif kind == 2:
                    cursor = _skip_limits(data, cursor)
                elif kind == 3:
                    cursor += 2                                 # valtype, mutability
                else:
                    _, cursor = _uleb(data, cursor + 1)
                imports.append((module, name, _KINDS.get(kind, str(kind))))
        elif section == 7:                             # exports
            count, cursor = _uleb(data, cursor)
            for _ in range(count):
                name, cursor = _name(data, cursor)
                kind, cursor = data[cursor], cursor + 1
                _, cursor = _uleb(data, cursor)
                exports[name] = _KINDS.get(kind, str(kind))
        pos = end
    return exports, imports


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--native", action="store_true", help="build the native library (default: both)")
    ap.add_argument("--wasm", action="store_true", help="build the three wasm flavours (default: both)")
    ap.add_argument("--out", default=None, help="output folder (default: .cache/native and build/kernels)")
    args = ap.parse_args(argv)
    both = not (args.native or args.wasm)
    try:
        if args.native or both:
            print(build_native(args.out or DEFAULT_CACHE))
        if args.wasm or both:
            for relaxed in (False, True):
                print(build_wasm(args.out or HERE.parent / "build" / "kernels", relaxed))
            print(build_wasm_threads(args.out or HERE.parent / "build" / "kernels"))
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
