"""The webgpu backend (in progress): WGSL compute shaders on a WebGPU device, natively through
PyPI `wgpu` and in the browser through navigator.gpu. See gpu.py (device layer) and
kernels.py (shaders as functions on device buffers)."""
