"""`python -m engine bench gemm`: simd and numpy timed in the same run (numbers are reported,
never asserted)."""
import json

from engine import cli
from engine.bench import bench_gemm, format_table


def test_bench_gemm_reports_both_devices():
    result = bench_gemm(repeat=1, device="simd", shapes=((8, 16, 24), (1, 5, 3)))
    assert result["devices"] == ["numpy", "simd"]
    for case in result["cases"]:
        assert case["simd"]["ms"] > 0 and case["numpy"]["ms"] > 0 and case["simd"]["gflops"] >= 0
    table = format_table(result)
    assert "simd GFLOP/s" in table and "    8 x   16 x   24" in table


def test_cli(capsys, monkeypatch):
    import engine.bench
    monkeypatch.setattr(engine.bench, "GEMM_SHAPES", ((4, 4, 4),))
    assert cli.main(["bench", "gemm", "--device", "simd", "--repeat", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == "gemm" and result["cases"][0]["m"] == 4
    assert cli.main(["bench", "gemm", "--weights", "x.safetensors"]) == 2
    assert "takes no --weights" in capsys.readouterr().err


def test_bench_ops_times_each_op_on_each_device(capsys):
    import engine
    from engine.bench import bench_ops
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
    assert "depthwise 3x3" in format_table(result) and "composite simd" in format_table(result)
    assert cli.main(["bench", "ops", "--device", "simd", "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "ops"
