"""Outputs of ir-piecewise's toy model from pieces compiled in the process (A), the same pieces
loaded from the compile cache (B), and the loaded pieces replayed as piecewise CUDA graphs (C),
at every capture size; prints the largest |difference| per size for each pair. Start it with
empty Inductor and Triton caches (``TORCHINDUCTOR_CACHE_DIR``/``TRITON_CACHE_DIR`` set to new
directories), or A is loaded too. Argument: ``det`` for Inductor's deterministic mode,
``default`` otherwise (round 46, `docs/concepts/cache.md`). Run on the GPU machine from the
repository root after ``source benchmarks/gpu/env.sh``."""

import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packages" / "ir-piecewise" / "tests"))

from toy_model import ToyModel, toy_config  # noqa: E402

import ir_dispatch  # noqa: E402,F401  (installs the dispatcher)
import ir_piecewise  # noqa: E402
from ir_piecewise import CUDAGraphMode, counters  # noqa: E402

CAPTURE = (1, 2, 4, 8, 16, 32, 64)
RUNS = (
    ("A fresh", CUDAGraphMode.NONE),
    ("B loaded", CUDAGraphMode.NONE),
    ("C loaded, graphs", CUDAGraphMode.PIECEWISE),
)


def inputs(n: int) -> torch.Tensor:
    return torch.randn(n, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(n))


def main() -> None:
    deterministic = sys.argv[1:] == ["det"]
    model = ToyModel().cuda().eval()
    cache_root = Path(tempfile.mkdtemp())
    outputs: dict[str, dict[int, torch.Tensor]] = {}
    with torch.no_grad(), torch._inductor.config.patch(deterministic=deterministic):
        for name, mode in RUNS:
            torch._dynamo.reset()
            counters.reset()
            config = toy_config(cache_root, cudagraph_mode=mode, cudagraph_capture_sizes=CAPTURE)
            compiled = ir_piecewise.compile(model, config)
            compiled(inputs(max(CAPTURE)))
            outputs[name] = {n: compiled(inputs(n)).clone() for n in CAPTURE}
            print(
                f"{name}: {counters.num_backend_compilations} compiled, "
                f"{counters.num_cache_hits} loaded"
            )
    mode_name = "deterministic" if deterministic else "default"
    names = list(outputs)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            diffs = " ".join(
                f"{n}:{float((outputs[first][n] - outputs[second][n]).abs().max()):.2g}"
                for n in CAPTURE
            )
            print(f"{mode_name}, {first} vs {second}: {diffs}")


if __name__ == "__main__":
    main()
