"""The kernel tables against engine.ops' declarations: every backend has a kernel for each primitive
op, offers fused kernels only under the declared names (engine.ops.FUSED), among them the quantized
ones every backend must have; and every fused kernel a composite asks for is declared."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from engine import ops

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"numpy": "engine.backends.numpy.kernels", "simd": "engine.backends.simd.backend",
          "webgpu": "engine.backends.webgpu.backend"}


@pytest.mark.parametrize("backend", TABLES)
def test_each_backend_s_tables_are_the_declared_ones(backend):
    module = importlib.import_module(TABLES[backend])      # a table, not the device: no GPU needed
    ops.check_tables(backend, module.KERNELS, module.FUSED)
    assert ops.QUANTIZED <= set(module.FUSED) <= ops.FUSED


def test_a_table_off_the_declarations_is_refused():
    from engine.backends.numpy.kernels import FUSED, KERNELS
    with pytest.raises(RuntimeError, match=r"not declared in engine.ops.FUSED: \['fast_gelu'\]"):
        ops.check_tables("test", KERNELS, {**FUSED, "fast_gelu": None})
    with pytest.raises(RuntimeError, match=r"lacks the quantized kernels \['embedding_q'\]"):
        ops.check_tables("test", KERNELS, {k: v for k, v in FUSED.items() if k != "embedding_q"})
    with pytest.raises(RuntimeError, match=r"its op table misses \['MATMUL'\]"):
        ops.check_tables("test", {k: v for k, v in KERNELS.items() if k is not ops.Op.MATMUL}, FUSED)


def test_the_composites_ask_only_for_declared_fused_kernels():
    asked = set()
    for path in (ROOT / "engine").rglob("*.py"):
        if "backends" in path.parts:
            continue
        text = path.read_text()
        asked |= set(re.findall(r'(?:run_fused|_fused_f32)\(\s*"([a-z_0-9]+)"', text))
        asked |= set(re.findall(r'"([a-z_0-9]+)" (?:not )?in [\w.]*fused\b', text))
    assert {"softmax", "linear", "conv2d", "mul_add"} <= asked           # the scan finds them
    assert asked <= ops.FUSED, asked - ops.FUSED
