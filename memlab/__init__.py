"""memlab: honest memory numbers for memory-saving PyTorch training techniques.

Public API::

    memlab.Technique, memlab.Workload, memlab.Param, memlab.Problem
    memlab.list_techniques(), memlab.get_technique(name), memlab.load_plugin(path)
    memlab.measure(name, *, device="cpu", dtype="float32", mode="train", **params) -> Measurement
    memlab.timeline(name, ...) -> Timeline
"""
from ._version import __version__
from .measure import Measurement, Timeline, TimelineEvent, measure, timeline
from .measure.verify import Verification, verify_technique
from .params import Param
from .registry import get_technique, list_families, list_techniques, load_plugin
from .technique import Technique, TechniqueUnavailable
from .workload import Problem, Workload, get_workload, list_workloads

__all__ = [
    "__version__", "Technique", "TechniqueUnavailable", "Workload", "Problem", "Param",
    "list_techniques", "list_families", "get_technique", "load_plugin", "get_workload", "list_workloads",
    "measure", "timeline", "Measurement", "Timeline", "TimelineEvent", "Verification", "verify_technique",
]
