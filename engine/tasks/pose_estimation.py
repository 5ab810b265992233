"""Pose estimation: an image -> people, each with a box and the 17 COCO body keypoints (YOLO11n-pose).

    pose = engine.pipeline("pose-estimation")
    pose("zidane.jpg")      # [{"score", "box": {...}, "keypoints": [{"name", "x", "y", "score"}, ...]}, ...]

    python -m engine detect zidane.jpg --task pose

The pipeline, the command and the worker's entry point are object detection's
(engine/tasks/object_detection.py): this module names that pipeline for the registry entries
whose `pipeline` is "pose-estimation".
"""
from __future__ import annotations

from .object_detection import POSE, Detection

TASK = POSE
PIPELINE = Detection
