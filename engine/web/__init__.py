"""Browser-only glue (Pyodide): the thin layer that touches JS. Everything here imports
natively too; `js` and `pyodide.ffi` are imported inside the functions that use them."""
