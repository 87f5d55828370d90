"""SGLang's own benchmark client (``python -m sglang.bench_serving``) run against simulated servers.

The client comes from PyPI into an environment of its own, cached between runs on one machine (SGLang's
package pins torch and the CUDA stack; the client needs none of it): ``pip install --no-deps sglang`` plus
what the client module imports, about 550 MB and two minutes on a fresh machine, nothing on the next run.
``sim/bench_client_main.py`` runs the unchanged client module there. The tokenizer the client counts with is
built locally (a word-level tokenizer saved as a Hugging Face tokenizer folder): nothing is downloaded from a
model hub, and the client runs with the hub offline.

``python -m sim.bench_client demo`` regenerates the benchmark results shipped with the demo
(``sim/bench_results/demo/``): the real client against the demo's recipes at several concurrencies.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SGLANG_VERSION = "0.5.23"
# SGLang's pins for the two it pins; the rest is what sglang.benchmark.serving and its datasets import.
REQUIREMENTS = (
    "transformers==5.19.0",
    "tokenizers==0.23.2",
    "aiohttp",
    "msgspec",
    "numpy",
    "orjson",
    "requests",
    "tqdm",
    "psutil",  # sglang.srt.utils.network (the client's URL helpers)
    "pyzmq",  # ditto
    "pillow",  # the image dataset module, imported with the others
    "pybase64",  # ditto
)
LAUNCHER = Path(__file__).with_name("bench_client_main.py")
RESULTS_DIR = Path(__file__).with_name("bench_results")
ENV_VARIABLE = "SPECWATCH_BENCH_CLIENT_ENV"
INSTALL_TIMEOUT_S = 1800.0
_READY = "installed.json"  # written last: an environment without it is half-built and is rebuilt
_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")


class ClientUnavailable(RuntimeError):
    """The client's environment could not be built (pip's own words follow)."""


def environment_dir() -> Path:
    """Where the client's environment lives: ``$SPECWATCH_BENCH_CLIENT_ENV``, else the user's cache, keyed by
    what is installed and the interpreter (a change of either builds a new one)."""
    configured = os.environ.get(ENV_VARIABLE)
    if configured:
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(json.dumps([SGLANG_VERSION, REQUIREMENTS]).encode()).hexdigest()[:8]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache / "specwatch" / f"sglang-bench-client-{SGLANG_VERSION}-{python}-{key}"


@dataclass(frozen=True, slots=True)
class ClientEnv:
    """A ready environment: its interpreter, the tokenizer built for it, and how long making it took (0 when
    it was cached)."""

    python: Path
    tokenizer: Path
    install_s: float


def ensure_client(directory: Path | None = None) -> ClientEnv:
    """The client's environment, built on first use (one builder at a time across processes)."""
    directory = directory or environment_dir()
    directory.parent.mkdir(parents=True, exist_ok=True)
    python, tokenizer = directory / "bin" / "python", directory / "tokenizer"
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run (another checkout) may be building it
        if (directory / _READY).exists():
            return ClientEnv(python, tokenizer, 0.0)
        started = time.monotonic()
        shutil.rmtree(directory, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(directory)], "create the client's virtual environment")
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, "--no-deps", f"sglang=={SGLANG_VERSION}"], f"install sglang {SGLANG_VERSION}")
        _run([*pip, *REQUIREMENTS], "install the client's imports")
        build_tokenizer(python, tokenizer)  # once, with the environment: loading transformers takes seconds
        seconds = time.monotonic() - started
        record = {"sglang": SGLANG_VERSION, "requirements": REQUIREMENTS, "install_s": round(seconds, 1)}
        (directory / _READY).write_text(json.dumps(record) + "\n", encoding="utf-8")
        return ClientEnv(python, tokenizer, seconds)


def _run(command: Sequence[str], what: str) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False, env=_quiet_env()
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-2000:]
        raise ClientUnavailable(f"could not {what} (exit {done.returncode}):\n{tail}")


def _quiet_env(home: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    if home is not None:
        env["HF_HOME"] = str(home)  # the hub's cache stays inside the run's folder
    return env


_TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = ["[UNK]", *sys.argv[2].split(","), *(f"w{i}" for i in range(int(sys.argv[3])))]
tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer.decoder = decoders.WordPiece()  # ids back to words joined by spaces
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def build_tokenizer(python: Path, directory: Path, *, vocabulary: int = 512) -> Path:
    """A word-level tokenizer saved as a Hugging Face tokenizer folder by the client's own libraries (one
    token per word, the simulated output's word among them, so the client's retokenized count equals the
    server's)."""
    done = subprocess.run(
        [str(python), "-P", "-c", _TOKENIZER_SCRIPT, str(directory), ",".join(_WORDS), str(vocabulary)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_quiet_env(directory.parent),
    )
    if done.returncode != 0:
        raise ClientUnavailable(f"could not build the tokenizer:\n{done.stderr[-2000:]}")
    return directory


def run_client(
    env: ClientEnv,
    base_url: str,
    output_file: Path,
    *,
    num_prompts: int,
    max_concurrency: int,
    input_len: int,
    output_len: int,
    extra: Sequence[str] = (),
    timeout_s: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """``python -m sglang.bench_serving --backend sglang`` against ``base_url`` on random token prompts of
    ``input_len`` and outputs of ``output_len`` tokens, appending its result line to ``output_file``."""
    command = [
        str(env.python),
        "-P",  # not the launcher's folder on sys.path: sim/http.py would shadow the standard library's
        str(LAUNCHER),
        "--backend",
        "sglang",
        "--base-url",
        base_url,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "1",
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(max_concurrency),
        "--tokenizer",
        str(env.tokenizer),
        "--output-file",
        str(output_file),
        "--disable-tqdm",
        *extra,
    ]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=output_file.parent,
        env=_quiet_env(output_file.parent),
    )


# -- the demo's shipped results ------------------------------------------------------------------------------
# One server per recipe of the demo, taken off its simulated load for the benchmark (so the client's requests
# are the batch), at concurrencies up to the speculative cap of 48; the demo's 1K chat prompts.
DEMO_SERVERS = ("k3-east-0", "k3-west-0", "k3-west-plain")
DEMO_CONCURRENCIES = (1, 8, 16, 32, 48)
DEMO_INPUT_LEN, DEMO_OUTPUT_LEN = 1024, 512


def result_files(scenario: str) -> list[Path]:
    """The benchmark result files shipped for the built-in ``scenario`` (``sim/bench_results/<name>/``);
    none for a scenario file."""
    if not scenario.replace("_", "").replace("-", "").isalnum():
        return []
    return sorted((RESULTS_DIR / scenario).glob("*.jsonl"))


def write_demo_results(out_dir: Path) -> list[Path]:
    """Run the client against the demo's recipes at speed 1 (real latencies); one file per server."""
    from sim.fleet import SimFleet

    env = ensure_client()
    out_dir.mkdir(parents=True, exist_ok=True)
    with SimFleet("demo", speed=1.0) as fleet:
        servers = [fleet.server(name) for name in DEMO_SERVERS]
        for server in servers:
            server.set_load(concurrency=0)
        while True:  # their own simulated requests finish first
            for server in servers:
                server.advance(fleet.sim_time_s())
            if not any(s.engine.published.gauges.running + s.engine.published.gauges.queued for s in servers):
                break
            time.sleep(1.0)
        written = []
        for server in servers:
            path = out_dir / f"{server.name}.jsonl"
            path.unlink(missing_ok=True)
            for concurrency in DEMO_CONCURRENCIES:
                done = run_client(
                    env,
                    server.url,
                    path,
                    num_prompts=max(8, 2 * concurrency),
                    max_concurrency=concurrency,
                    input_len=DEMO_INPUT_LEN,
                    output_len=DEMO_OUTPUT_LEN,
                    extra=["--tag", f"demo {server.name} c{concurrency}"],
                )
                if done.returncode != 0:
                    raise RuntimeError(f"bench_serving failed on {server.name}:\n{done.stdout[-3000:]}")
                print(f"{server.name} at {concurrency}: done", flush=True)
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.bench_client", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="regenerate the demo's shipped benchmark results")
    demo.add_argument("--out", type=Path, default=RESULTS_DIR / "demo", help="folder (default: the shipped)")
    commands.add_parser("install", help="build (or find) the client's environment and print where")
    options = parser.parse_args(argv)
    if options.command == "install":
        env = ensure_client()
        print(f"{env.python} (built in {env.install_s:.0f} s)" if env.install_s else f"{env.python} (cached)")
        return 0
    for path in write_demo_results(options.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
