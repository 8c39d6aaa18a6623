"""Pure tensor functions of weirdnet, each with a plain reference beside its fast paths."""

from .scan import scan_backend_name, weird_scan, weird_scan_bidirectional
from .scan_cache import WeirdScanCache
from .scan_checks import levels_needed
from .scan_reference import weird_scan_reference

__all__ = [
    "WeirdScanCache",
    "levels_needed",
    "scan_backend_name",
    "weird_scan",
    "weird_scan_bidirectional",
    "weird_scan_reference",
]
