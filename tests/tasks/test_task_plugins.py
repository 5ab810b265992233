"""Tasks as plugins (engine/tasks/): a new task is a model file and a task module, and the command
line, the page's worker and the site's start-up list pick it up with no shared file edited.

The new task here lives in a temporary folder: a model package named by $ENGINE_MODELS and a task
package named by $ENGINE_TASKS, found the way engine/tasks/ itself is searched. Its files are the
ones docs/adding-a-model.md walks through.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

MODEL_FILE = '''
"""A linear regressor, y = x W^T + b: the smallest model a new task can run."""
from __future__ import annotations

import os
from dataclasses import dataclass

import engine.nn as nn
from engine import load_safetensors, registry


@dataclass(frozen=True)
class Config:
    in_features: int = 3        # numbers per row
    out_features: int = 1       # values predicted per row


class LinearRegressor(nn.Module):
    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        self.proj = nn.Linear(config.in_features, config.out_features)

    def forward(self, x):
        return self.proj(x)                                   # (N, in) -> (N, out)


def load(weights, device: str | None = None) -> LinearRegressor:
    """The model with `weights`: a mapping of tensors by name, or a safetensors file, index or URL."""
    model = LinearRegressor()
    model.load_state_dict(load_safetensors(weights) if isinstance(weights, (str, os.PathLike)) else weights)
    return model.to(device) if device else model


ENTRY = registry.Model(
    name="linear-regressor",
    tasks=("tabular-regression",),
    pipeline="tabular-regression",
    title="Tabular regression · a linear model",
    load=load,
    sources=(registry.Source("repo", files={"weights": "linear_regressor.safetensors"}),),
)
'''

TASK_MODULE = '''
"""Tabular regression: rows of numbers -> the values a model predicts for them."""
from __future__ import annotations

import json

import numpy as np

from engine.tasks import state
from engine.tasks.base import Command, Pipeline, add_device_argument

TASK = "tabular-regression"


class TabularRegression(Pipeline):
    def __init__(self, entry, device: str | None = None, weights=None):
        super().__init__(entry, device, weights)
        self.model = self.build(device)

    def __call__(self, rows) -> np.ndarray:
        from engine.tensor import from_numpy
        x = np.atleast_2d(np.asarray(rows, np.float32))                  # (N, in)
        return self.run(lambda model: model(from_numpy(x, self.device)).numpy())


PIPELINE = TabularRegression


def _add_arguments(p) -> None:
    p.add_argument("values", nargs="+", type=float, metavar="X")
    p.add_argument("--weights", default=None, help="a safetensors file")
    add_device_argument(p)


def _regress(args) -> int:
    from engine.tasks import pipeline
    pipe = pipeline(TASK, device=args.device, weights=args.weights)
    print(json.dumps(pipe([args.values]).tolist()))
    return 0


COMMANDS = {"regress": Command(help="predict a value from a row of numbers",
                               description="Predict a value from a row of numbers with a linear model.",
                               add_arguments=_add_arguments, run=_regress)}


async def regress_rows(rows) -> str:
    pipe = state.loaded(TASK)
    rows = state.from_json(rows)
    async with state.lock:
        values = pipe(rows)
    return json.dumps({"values": values.tolist(), "device": state.current["device"]})


WORKER = (regress_rows,)
'''


@pytest.fixture
def plugin(tmp_path):
    """A model package and a task package in tmp_path, and its weights: (env, weights path, W, b)."""
    (tmp_path / "toymodels").mkdir()
    (tmp_path / "toymodels" / "__init__.py").write_text('"""A model package of one model file."""\n')
    (tmp_path / "toymodels" / "linear_regressor.py").write_text(MODEL_FILE)
    (tmp_path / "toytasks").mkdir()
    (tmp_path / "toytasks" / "__init__.py").write_text("")
    (tmp_path / "toytasks" / "tabular_regression.py").write_text(TASK_MODULE)
    from engine import save_safetensors
    rng = np.random.default_rng(0)
    weight, bias = rng.standard_normal((1, 3)).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    path = tmp_path / "linear_regressor.safetensors"
    save_safetensors({"proj.weight": weight, "proj.bias": bias}, path)
    env = {**os.environ, "ENGINE_MODELS": "toymodels", "ENGINE_TASKS": "toytasks",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return env, path, weight, bias


def python(env, *args, input=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, input=input)


def test_a_new_task_is_a_model_file_and_a_task_module(plugin):
    env, path, weight, bias = plugin
    x = [0.5, -1.0, 2.0]
    want = np.asarray([x], np.float32) @ weight.T + bias

    # the command line gains the task's subcommand, beside the engine's own and the other tasks'
    r = python(env, "-m", "engine", "--help")
    assert r.returncode == 0, r.stderr
    assert "regress" in r.stdout and "digit" in r.stdout and "bench" in r.stdout
    r = python(env, "-m", "engine", "regress", *map(str, x), "--weights", str(path))
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(json.loads(r.stdout), want, rtol=1e-6)
    r = python(env, "-m", "engine", "tasks")
    assert r.returncode == 0 and r.stdout.split()[:2] == ["tabular-regression", "linear-regressor"], r.stdout

    # engine.pipeline(task) runs it; the worker exports its entry point under its own name and it
    # answers from the loaded pipeline; the site's start-up list compiles its modules (its task is
    # the registry's first, so the first card's)
    script = textwrap.dedent(f"""
        import asyncio, json
        import numpy as np
        import engine
        from engine.tasks import state
        from engine.web import worker
        from buildtools import bytecode
        pipe = engine.pipeline("tabular-regression", weights={str(path)!r}, model="linear-regressor")
        direct = pipe([{x!r}]).tolist()
        state.current["pipelines"]["tabular-regression"] = pipe
        answer = json.loads(asyncio.run(worker.regress_rows(json.dumps([{x!r}]))))
        print(json.dumps({{"direct": direct, "worker": answer["values"], "exports": list(worker.EXPORTS),
                          "start": list(bytecode.start_modules())}}))
    """)
    r = python(env, "-c", script)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    np.testing.assert_allclose(out["direct"], want, rtol=1e-6)
    np.testing.assert_allclose(out["worker"], want, rtol=1e-6)
    assert "regress_rows" in out["exports"] and "predict_digit" in out["exports"] and "devices" in out["exports"]
    assert {"toymodels.linear_regressor", "toytasks.tabular_regression"} <= set(out["start"])


def test_a_task_module_cannot_take_a_name_already_taken(plugin, tmp_path):
    """Two modules bringing the same command or entry point: a clear error, not one silently winning."""
    env, *_ = plugin
    (tmp_path / "toytasks" / "clash.py").write_text(textwrap.dedent('''
        from engine.tasks.base import Command

        async def predict_digit(pixels, width, height):
            return "{}"

        COMMANDS = {"bench": Command(help="", description="", add_arguments=lambda p: None, run=lambda a: 0)}
        WORKER = (predict_digit,)
    '''))
    r = python(env, "-m", "engine", "--help")
    assert r.returncode != 0 and "'bench'" in r.stderr and "engine's own" in r.stderr
    r = python(env, "-c", "import engine.web.worker")
    assert r.returncode != 0 and "'predict_digit'" in r.stderr


# the entry points the page (web/app.py, web/cards/, web/bench.js) calls by name
PAGE_COMMANDS = {"devices", "tasks", "set_device", "inspect_model", "run", "predict_digit", "classify_image",
                 "embed_texts", "chat", "complete_text", "chat_stop", "chat_reset", "chat_context", "chat_defaults", "bench_digit",
                 "bench_image", "bench_text", "bench_gemm", "bench_ops", "bench_qlinear", "bench_llm", "bench_threads",
                 "bench_peer_cases", "transcribe_audio", "transcribe_stop", "speech_transcript", "speech_model",
                 "detect_image", "bench_yolo", "bench_yolo_cases", "read_text"}


def test_the_worker_exports_every_command_of_the_page_and_imports_no_task_s_heavy_parts():
    """Importing the worker imports every task module (for their entry points), but no tokenizer,
    generation or model code beyond the registry's: those load when their card opens."""
    script = textwrap.dedent("""
        import json, sys
        from engine.web import worker
        from engine import tasks
        print(json.dumps({"exports": list(worker.EXPORTS), "tasks": sorted(tasks.modules()),
                          "callable": all(callable(getattr(worker, n)) for n in worker.EXPORTS),
                          "loaded": sorted(m for m in sys.modules if m.startswith(("engine.text", "engine.generation",
                                                                                   "engine.bench", "models")))}))
    """)
    r = python({k: v for k, v in os.environ.items() if k not in ("ENGINE_MODELS", "ENGINE_TASKS")}, "-c", script)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert PAGE_COMMANDS <= set(out["exports"]) and len(out["exports"]) == len(set(out["exports"]))
    assert out["callable"]
    assert out["tasks"] == ["digit_classification", "image_classification", "object_detection", "ocr", "pose_estimation",
                            "sentence_embedding", "speech_recognition", "text_generation", "voice_activity"]
    assert out["loaded"] == [], out["loaded"]


def test_a_task_not_loaded_is_a_clear_error():
    import asyncio

    from engine.errors import InputError
    from engine.web import worker
    with pytest.raises(InputError, match="text-generation model is not loaded"):
        worker.chat_defaults()
    with pytest.raises(InputError, match="image-classification model is not loaded"):
        asyncio.run(worker.classify_image(bytes(16), 2, 2))


def test_a_pipeline_by_model_name():
    """engine.pipeline(task, model=NAME): a model that is not the task's first; one that does not
    serve the task is refused before anything loads."""
    import engine
    from engine.errors import InputError
    digit = ROOT / "samples" / "digits" / "3.png"
    assert engine.pipeline("digit-classification", model="mnist_cnn")(digit, top_k=1)[0]["label"] == "3"
    with pytest.raises(InputError, match="efficientnet_lite0 does not serve the task 'digit-classification'"):
        engine.pipeline("digit-classification", model="efficientnet_lite0")
    with pytest.raises(InputError, match="unknown model 'nope'"):
        engine.pipeline("digit-classification", model="nope")
