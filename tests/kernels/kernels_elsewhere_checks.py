"""Runs inside Pyodide under Node.js with no kernels written (tests/kernels/pyodide_run.mjs ... -):
a Pyodide program that is not our page, as a third-party page is. SCRIPT_ARG is the site's URL.
Evaluates to a JSON string of what the engine said and did at each step."""
import json
import os
import sys
import warnings

sys.path.insert(0, "/repo")

import numpy as np  # noqa: E402

import engine  # noqa: E402
from engine import device, runtime, threads  # noqa: E402
from engine.backends.simd import library  # noqa: E402

SITE = SCRIPT_ARG  # noqa: F821  (set by pyodide_run.mjs)
out = {"platform": sys.platform}

# no site known: why, and the automatic choice says so
out["no_site"] = device.unavailable_reason("simd")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["no_site_best"] = device.best_available()
out["no_site_warnings"] = [str(w.message) for w in caught if w.category is RuntimeWarning]

# a site that is down, then one without the kernels: nothing written, each URL named
out["down"] = await library.ensure_kernels("http://127.0.0.1:9/")  # noqa: F704
out["missing"] = await library.ensure_kernels(SITE + "nothing-here/")  # noqa: F704
out["written_after_failures"] = os.path.exists(library.PYODIDE_PATH)

# the blocking path: Node without JSPI cannot wait, and says which call to await instead
runtime.set_site(SITE)
library._tried = False                        # ask again, as the next first use would
out["blocking"] = device.unavailable_reason("simd")

# the awaitable path: fetched from the site, validated, written, loaded
out["ensure"] = await library.ensure_kernels()  # noqa: F704
out["reason_after"] = device.unavailable_reason("simd")
out["flavour"] = library.get().flavour
out["best"] = device.best_available()
rng = np.random.default_rng(0)
a, b = rng.standard_normal((37, 61), dtype=np.float32), rng.standard_normal((61, 29), dtype=np.float32)
with library.recording() as calls:             # the product runs in the fetched module
    got = (engine.tensor(a, device="simd") @ engine.tensor(b, device="simd")).numpy()
out["kernel_calls"] = sorted({name for name, *_ in calls})
out["matmul_error"] = float(np.abs(got - a @ b).max())
out["threads"] = [threads.get_num_threads(), threads.describe()]
json.dumps(out)
