"""Run SGLang's own benchmark client, ``python -m sglang.bench_serving``, unchanged, without SGLang's server.

Executed by the benchmark client's interpreter (``sim/bench_client.py`` builds that environment: SGLang from
PyPI installed without its dependencies, plus what the client module imports), never by specwatch's.

``import sglang`` runs the package's ``__init__``, which loads the server runtime (torch, triton, the CUDA
kernels: gigabytes this machine has no use for). The client itself needs none of it: it sends HTTP and counts
tokens. So the packages on the way to ``sglang.benchmark.serving`` are entered without running their
``__init__`` (their modules load from the installed files as usual), and the one server module the client
imports for a constant, ``sglang.srt.disaggregation.utils`` (it imports torch), is replaced by a module
holding that constant as read from the installed file. Every line of the client's own code runs as shipped.

Usage: ``python bench_client_main.py [bench_serving arguments ...]`` (the same arguments as the module).
"""

from __future__ import annotations

import ast
import importlib.util
import runpy
import sys
import types
from pathlib import Path

# Packages entered without their __init__ (it imports the server runtime), and the server module the client
# takes constants from: name → the constants read from its file.
_BARE_PACKAGES = ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.disaggregation")
_CONSTANTS_FROM = {"sglang.srt.disaggregation.utils": ("FAKE_BOOTSTRAP_HOST",)}
# Hugging Face's ``datasets`` is imported by the MMMU dataset module at import time only; the client's other
# datasets never call it, so a module that says so stands in (installing it would add pyarrow and pandas).
_ABSENT = {"datasets": "load_dataset"}


def _root() -> Path:
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed in this environment (pip install --no-deps sglang)")
    return Path(next(iter(spec.submodule_search_locations)))


def _constants(path: Path, names: tuple[str, ...]) -> dict[str, object]:
    """Top-level ``NAME = literal`` assignments of ``path``, evaluated as literals (the module is not run)."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in names:
                found[target.id] = ast.literal_eval(node.value)
    missing = set(names) - set(found)
    if missing:
        raise SystemExit(f"{path}: no constant {sorted(missing)} (another SGLang version?)")
    return found


def _absent(name: str, function: str) -> types.ModuleType:
    module = types.ModuleType(name)

    def unavailable(*_args: object, **_kwargs: object) -> object:
        raise RuntimeError(f"{name}.{function} is not installed in this benchmark client environment")

    setattr(module, function, unavailable)
    return module


def prepare() -> None:
    """Make ``sglang.bench_serving`` importable without the server runtime (see the module docstring)."""
    root = _root()
    for name in _BARE_PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        module.__package__ = name
        sys.modules[name] = module
    for name, constants in _CONSTANTS_FROM.items():
        module = types.ModuleType(name)
        path = root.joinpath(*name.split(".")[1:]).with_suffix(".py")
        module.__dict__.update(_constants(path, constants))
        sys.modules[name] = module
    for name, function in _ABSENT.items():
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _absent(name, function)


def main() -> None:
    prepare()
    sys.argv[0] = "sglang.bench_serving"
    runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
