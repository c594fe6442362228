"""Every scheme's descriptor names a class that fills the node's scheme slot."""

from __future__ import annotations

import inspect

from services.schemes import scheme_class
from services.spec.schemes import Scheme


def test_each_descriptor_names_a_scheme_class_with_every_slot_method() -> None:
    slot = ("on_restart", "before_batch", "after_batch", "on_input_move", "on_control", "on_check", "on_stop")
    for scheme in Scheme:
        cls = scheme_class(scheme)
        assert inspect.isclass(cls), scheme
        missing = [m for m in (*slot, "progress", "overlap_writes") if not hasattr(cls, m)]
        assert missing == [], f"{scheme.value}: {cls.__name__} lacks {missing}"
