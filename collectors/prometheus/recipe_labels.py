"""Recipe flags read from a series' labels (SGLang's ``--extra-metric-labels``, plus ``model_name``): pure
parsing, shared by the live source's recipe book, the history reader and the Grafana export.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from collectors.model import RECIPE_FLAGS, FlagValue, Recipe

# Label names read as recipe flags (from --extra-metric-labels), besides each flag's own name.
LABEL_ALIASES: Mapping[str, tuple[str, ...]] = {
    "model": ("model", "model_name"),
    "version": ("version", "sglang_version"),
}


def coerce_label(text: str) -> FlagValue:
    """A label value as the flag's type: bools, ints and floats as such, 'none'/'null'/'' as None."""
    lowered = text.strip().lower()
    if lowered in ("", "none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# Every label a recipe is read from.
RECIPE_LABELS: frozenset[str] = frozenset(
    label for flag in RECIPE_FLAGS for label in LABEL_ALIASES.get(flag, (flag,))
)


def recipe_from_labels(labels: Mapping[str, str]) -> Recipe | None:
    """A recipe from flags given as labels (``--extra-metric-labels``), plus ``model_name``.

    None unless at least one flag besides the model is given: a model alone is not a recipe, and a recipe
    with every flag unknown would read as "all defaults". Parsed once per distinct set of recipe labels
    (a fleet's targets share a few recipes; every cycle asks for each target's).
    """
    return _recipe_of(tuple(sorted((k, v) for k, v in labels.items() if k in RECIPE_LABELS)))


@functools.lru_cache(maxsize=1024)
def _recipe_of(items: tuple[tuple[str, str], ...]) -> Recipe | None:
    labels = dict(items)
    flags: dict[str, FlagValue] = {}
    for flag in RECIPE_FLAGS:
        for label in LABEL_ALIASES.get(flag, (flag,)):
            if label in labels:
                flags[flag] = coerce_label(labels[label])
                break
    if not set(flags) - {"model"}:
        return None
    return Recipe.from_flags(flags)
