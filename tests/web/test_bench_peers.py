"""The bench page's thread section (bench.html?threads=1,2&ort=1): ours on simd at each kernel
thread count, and ONNX Runtime Web (built into dist/peers/ by `python build.py --peers`) with 1 and
2 threads on the same cases and inputs in the same page, its outputs checked against ours. These
check that it runs, reports and compares; timings belong to docs/benchmarks.md."""
import json

from tests.web.conftest import start_dev_server

CASES = {"effnet_b1", "minilm_1x128", "minilm_8x128"}


def run_bench(session, query: str, timeout_ms: int = 240_000) -> dict:
    """The bench page with only the sections `query` asks for; its results, which must hold no error."""
    page = session.open(f"bench.html?repeat=1&gemm=0&ops=0&qlinear=0&effnet=0&minilm=0&thread_repeat=1&{query}",
                        ready=False)
    page.wait_for_function("document.body.dataset.done === 'true'", timeout=timeout_ms)
    results = json.loads(page.text_content("[data-testid=bench-results]"))
    assert "error" not in results, results
    return results


def test_onnx_runtime_web_one_and_two_threads_beside_ours_per_thread_count(dev_server, session_factory):
    s = session_factory(dev_server.url)
    results = run_bench(s, "threads=1,2&ort=1")
    assert results["cross_origin_isolated"] is True
    boot = results["threads"]                        # the worker's pool, as its boot reports it
    assert boot["used"] >= 1 and (boot["used"] == 2 or boot["reason"]), boot
    ours = boot["runs"]
    assert [r["requested"] for r in ours] == [1, 2] and ours[0]["used"] == 1
    assert ours[1]["used"] == boot["used"] and (ours[1]["used"] == 2 or ours[1]["reason"]), ours
    assert all(r["device"] == "simd" and all(r[c] > 0 for c in CASES) for r in ours)

    runs = {r["threads"]: r for r in results["ort"]["runs"]}
    assert set(runs) == {1, 2} and results["ort"]["version"] == "1.30.0"
    for n, run in runs.items():
        assert set(run["cases"]) == CASES, run
        for name, case in run["cases"].items():
            assert case["median_ms"] > 0 and case["create_ms"] > 0 and len(case["runs_ms"]) == 1, (n, name, case)
        # the same model on the same inputs: the peer's outputs are ours (float32 weights against the
        # site's float16 MiniLM weights: ~1e-6 apart in cosine)
        assert run["cases"]["effnet_b1"]["same_top1"] is True and run["cases"]["effnet_b1"]["max_abs_diff"] < 1e-2
        assert run["cases"]["minilm_1x128"]["min_cosine"] > 0.9999 and run["cases"]["minilm_8x128"]["min_cosine"] > 0.9999
    ratios = {(r["case"], r["threads"]): r["ratio"] for r in results["ort_vs_ours"]}
    assert {(c, 1) for c in CASES} <= set(ratios) and all(r > 0 for r in ratios.values())
    table = s.page.text_content("[data-testid=threads-table]")
    assert "ours/ORT" in table and "MiniLM 8x128" in table and "least cosine" in table
    assert s.page.text_content("[data-testid=bench-threads]").startswith(f"kernel threads: {boot['used']}")
    assert not s.foreign_requests(), s.foreign_requests()


def test_not_isolated_says_so_instead_of_a_two_thread_number(site, session_factory):
    host = start_dev_server(site, isolation=False)
    try:
        s = session_factory(host.url)
        results = run_bench(s, "threads=2&ort=1&ort_threads=2&thread_cases=effnet_b1")
    finally:
        host.stop()
    assert results["cross_origin_isolated"] is False
    (ours,) = results["threads"]["runs"]
    assert ours["requested"] == 2 and ours["used"] == 1 and ours["reason"] and ours["effnet_b1"] > 0
    assert "minilm_1x128" not in ours
    (ort,) = results["ort"]["runs"]
    assert ort == {"round": 0, "threads": 2,
                   "skipped": "the page is not cross-origin isolated: ONNX Runtime Web would run on 1 thread"}
    assert "not cross-origin isolated" in s.page.text_content("[data-testid=threads-table]")
    assert "cross-origin isolated: no" in s.page.text_content("[data-testid=bench-threads]")
