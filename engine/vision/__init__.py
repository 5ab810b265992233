"""Image input for the models: decoding (PNG and .npy natively, the rest through Pillow
when present) and Pillow-compatible resizing, in NumPy only so it runs under Pyodide."""
from .image import as_image, from_pillow, image_size, read_image, to_float, to_grayscale
from .transforms import center_crop, resize, resize_shorter, resize_weights

__all__ = ["read_image", "as_image", "image_size", "from_pillow", "to_float", "to_grayscale",
           "resize", "resize_weights", "resize_shorter", "center_crop"]
