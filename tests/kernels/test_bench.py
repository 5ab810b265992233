"""`python -m engine bench gemm`: simd and numpy timed in the same run (numbers are reported,
never asserted)."""
import json

from engine import cli
from engine.bench.ops import bench_gemm, bench_ops, format_gemm, format_ops


def test_bench_gemm_reports_both_devices():
    result = bench_gemm(repeat=1, device="simd", shapes=((8, 16, 24), (1, 5, 3)))
    assert result["devices"] == ["numpy", "simd"]
    for case in result["cases"]:
        assert case["simd"]["ms"] > 0 and case["numpy"]["ms"] > 0 and case["simd"]["gflops"] >= 0
    table = format_gemm(result)
    assert "simd GFLOP/s" in table and "    8 x   16 x   24" in table


def test_cli(capsys, monkeypatch):
    import engine.bench.ops
    monkeypatch.setattr(engine.bench.ops, "GEMM_SHAPES", ((4, 4, 4),))
    assert cli.main(["bench", "gemm", "--device", "simd", "--repeat", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == "gemm" and result["cases"][0]["m"] == 4
    assert cli.main(["bench", "gemm", "--weights", "x.safetensors"]) == 2
    assert "takes no --weights" in capsys.readouterr().err


def test_bench_ops_times_each_op_on_each_device(capsys):
    import engine
    result = bench_ops(repeat=1, device="simd", inner=1)
    assert result["devices"] == ["numpy", "simd"] and result["adapters"]["simd"] == "simd"
    assert {c["op"] for c in result["cases"]} >= {"matmul", "conv2d 3x3", "depthwise 3x3", "softmax", "layer_norm"}
    assert all(c[d]["ms"] > 0 for c in result["cases"] for d in result["devices"])
    # the fused kernels' ops are timed again as their composites (the kernel taken out of the table)
    assert {c["op"] for c in result["cases"] if "composite_ms" in c["simd"]} == {"gelu", "attention",
                                                                                 "add_layer_norm"}
    assert not any("composite_ms" in c["numpy"] for c in result["cases"])
    from engine.backends.simd.backend import SimdBackend
    assert "attention" in SimdBackend.fused and "fused" not in vars(engine.get_backend("simd"))   # restored
    assert "depthwise 3x3" in format_ops(result) and "composite simd" in format_ops(result)
    assert cli.main(["bench", "ops", "--device", "simd", "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "ops"


def test_bench_qlinear_counts_bytes_and_flops(monkeypatch):
    """A tiny configuration: the structure and the arithmetic, not the timings."""
    import math

    import engine
    from engine.bench.quant import bench_qlinear, format_qlinear
    monkeypatch.setattr(engine.get_backend("simd"), "quantized_in", None)     # as a backend without the kernels
    result = bench_qlinear(devices=["numpy", "simd"], types=("Q8_0", "q4_k"), shapes=((256, 3), (64, 5)),
                           rows=(1, 2), repeat=1, min_time=0)
    assert result["devices"] == ["numpy", "simd"] and result["types"] == ["f32", "q8_0", "q4_k"]
    assert set(result["skipped"]) == {"simd"} and result["failed"] == []
    assert result["not_applicable"] == [{"type": "q4_k", "in": 64, "out": 5,
                                         "why": "64 is not a multiple of the block size 256"}]
    bytes_of = {("f32", 256, 3): 4 * 256 * 3, ("q8_0", 256, 3): 3 * 8 * 34, ("q4_k", 256, 3): 3 * 144,
                ("f32", 64, 5): 4 * 64 * 5, ("q8_0", 64, 5): 5 * 2 * 34}
    keys = [(c["device"], c["in"], c["out"], c["rows"], c["type"]) for c in result["cases"]]
    assert keys == [("numpy", k, n, r, t) for k, n in ((256, 3), (64, 5)) for r in (1, 2)
                    for t in ("f32", "q8_0", "q4_k") if (t, k, n) in bytes_of] + \
                   [("simd", k, n, r, "f32") for k, n in ((256, 3), (64, 5)) for r in (1, 2)]
    f32_ms = {(c["device"], c["in"], c["rows"]): c["ms"] for c in result["cases"] if c["type"] == "f32"}
    for c in result["cases"]:
        assert c["bytes"] == bytes_of[c["type"], c["in"], c["out"]]
        assert all(math.isfinite(c[k]) and c[k] > 0 for k in ("ms", "gbps", "gflops", "vs_f32"))
        assert math.isclose(c["gbps"], c["bytes"] / c["ms"] / 1e6, rel_tol=1e-2, abs_tol=2e-3)
        assert math.isclose(c["gflops"], 2 * c["rows"] * c["in"] * c["out"] / c["ms"] / 1e6, rel_tol=1e-2,
                            abs_tol=2e-3)
        assert math.isclose(c["vs_f32"], f32_ms[c["device"], c["in"], c["rows"]] / c["ms"], rel_tol=1e-2,
                            abs_tol=2e-3)
    table = format_qlinear(result)
    assert "simd: skipped (no quantized kernels" in table and "q4_k 64 -> 5: not applicable" in table
    assert "   numpy      256 -> 3     2  q8_0         816" in table


def test_cli_qlinear(capsys):
    assert cli.main(["bench", "qlinear", "--device", "numpy", "--device", "simd", "--types", "q4_0",
                     "--shapes", "32x3,64x1", "--rows", "1,3", "--repeat", "1", "--min-time", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == "qlinear" and result["devices"] == ["numpy", "simd"]
    assert result["shapes"] == [[32, 3], [64, 1]] and result["rows"] == [1, 3] and len(result["cases"]) == 16
    assert cli.main(["bench", "qlinear", "--device", "numpy", "--types", "q8_0", "--shapes", "32x2",
                     "--rows", "1", "--repeat", "1", "--min-time", "0"]) == 0
    assert "vs f32" in capsys.readouterr().out
    for bad, says in ((["--types", "iq4_xs"], "not a computable quantized type"),
                      (["--shapes", "32"], "INxOUT"), (["--shapes", "axb"], "cannot read"),
                      (["--rows", "0"], "must be positive"), (["--device", "tpu"], "unknown device"),
                      (["--weights", "x.gguf"], "takes no --weights")):
        assert cli.main(["bench", "qlinear", "--repeat", "1", *bad]) == 2
        assert says in capsys.readouterr().err, bad
    assert cli.main(["bench", "gemm", "--types", "q4_0"]) == 2
    assert "options of bench qlinear" in capsys.readouterr().err
    assert cli.main(["bench", "gemm", "--device", "numpy", "--device", "simd"]) == 2
    assert "takes one --device" in capsys.readouterr().err


def test_bench_qlinear_reports_a_failing_kernel_and_goes_on(monkeypatch, capsys):
    import engine
    simd = engine.get_backend("simd")
    monkeypatch.setattr(simd, "fused", {k: v for k, v in simd.fused.items() if k != "linear_q"})
    assert cli.main(["bench", "qlinear", "--device", "simd", "--device", "numpy", "--types", "q4_0,q8_0",
                     "--shapes", "32x3", "--rows", "1", "--repeat", "1", "--min-time", "0"]) == 1
    table = capsys.readouterr().out
    assert "  simd q4_0 FAILED on 32 -> 3: KeyError: 'linear_q'" in table
    assert "  simd q8_0 FAILED on 32 -> 3: KeyError: 'linear_q'" in table
    assert "    simd       32 -> 3     1   f32" in table and "   numpy       32 -> 3     1  q8_0" in table


def test_cli_threads_runs_each_count_with_torch_at_the_same_count(capsys, monkeypatch):
    import engine
    import engine.bench.ops
    monkeypatch.setattr(engine.bench.ops, "GEMM_SHAPES", ((4, 4, 4),))
    engine.set_num_threads(1)
    assert cli.main(["bench", "gemm", "--device", "simd", "--repeat", "1", "--threads", "2,1"]) == 0
    out = capsys.readouterr().out
    first, second = out.index("== 2 threads"), out.index("== 1 thread")
    assert first < second and ", 2 threads" in out[first:second] and ", 1 thread" in out[second:]
    assert engine.get_num_threads() == 1                              # restored
    try:
        import torch  # noqa: F401
        assert "2 threads (torch 2)" in out[first:second]
    except ImportError:
        pass
    assert cli.main(["bench", "gemm", "--threads", "0,2"]) == 2
    assert "--threads: positive thread counts" in capsys.readouterr().err
