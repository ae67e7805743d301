"""The benchmark suites: what each answers, where it runs, and the modules that run and render it.

Only names live here (modules are imported when a suite runs or a result is rendered), so that
``ir-stack bench --help`` and `ir_stack.bench.results` import nothing heavy.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Suite:
    """One suite: its question, the module whose ``main(argv)`` runs it, the module with its
    ``markdown(result)`` and ``plot(result, path)``, whether it needs a CUDA GPU, and the
    modules it needs importable (a run of every suite leaves it out where one is missing)."""

    name: str
    question: str
    runner: str
    report: str
    gpu_only: bool
    needs: tuple[str, ...] = ()
    #: whether the suite takes ``--model tiny|1b`` (the reference models)
    takes_model: bool = False
    #: processes it runs, one GPU each where it runs on GPUs (gloo ranks on the CPU)
    ranks: int = 1


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            "kernels",
            "How close is each op's kernel, per provider, to the device's copy bandwidth, and "
            "to what Inductor, F.rms_norm and Liger give for the same op?",
            "ir_stack.bench.kernels",
            "ir_stack.bench.kernel_report",
            gpu_only=True,
        ),
        Suite(
            "fusions",
            "Is each rotary fusion (QK-norm + RoPE, RoPE + KV-cache write) faster than the "
            "best unfused ops and than Inductor's code of the composition, at every token "
            "count?",
            "ir_stack.bench.fusions",
            "ir_stack.bench.fusions_report",
            gpu_only=True,
        ),
        Suite(
            "attention",
            "How close does decode attention over a KV cache come to the copy bandwidth, "
            "from one sequence up, and how does it compare with PyTorch's SDPA?",
            "ir_stack.bench.attention",
            "ir_stack.bench.attention_report",
            gpu_only=True,
        ),
        Suite(
            "e2e",
            "How fast does the reference model decode and prefill in each mode, against stock "
            "torch.compile and a whole-model CUDA graph?",
            "ir_stack.bench.e2e",
            "ir_stack.bench.e2e_report",
            gpu_only=False,
            takes_model=True,
        ),
        Suite(
            "tp",
            "How fast does the tensor-parallel reference model decode and prefill over two "
            "ranks in each mode, against stock torch.compile of the same model and a "
            "whole-model CUDA graph?",
            "ir_stack.bench.tp",
            "ir_stack.bench.e2e_report",
            gpu_only=False,
            takes_model=True,
            ranks=2,
        ),
        Suite(
            "tp-kernels",
            "How fast is the fused all-reduce + residual add + RMSNorm over two ranks, "
            "against NCCL's all-reduce and the norm kernel, across message sizes?",
            "ir_stack.bench.tp_kernels",
            "ir_stack.bench.tp_kernels",
            gpu_only=False,
            ranks=2,
        ),
        Suite(
            "startup",
            "How long from compile to the first outputs, with empty caches and with warm ones?",
            "ir_stack.bench.startup",
            "ir_stack.bench.startup",
            gpu_only=False,
            takes_model=True,
        ),
        Suite(
            "memory",
            "How much memory above the inputs does a chain of in-place-able residual norms "
            "take, eager and compiled with the IR passes?",
            "ir_stack.bench.memory",
            "ir_stack.bench.memory",
            gpu_only=True,
        ),
        Suite(
            "hf",
            "How fast is a transformers model after convert_hf_model, eager and compiled, "
            "against the original (and Liger's patches), forward and generate?",
            "ir_stack.bench.hf",
            "ir_stack.bench.hf_report",
            gpu_only=True,
            needs=("transformers",),
        ),
        Suite(
            "profile",
            "Where does a compiled step's GPU time go (matrix products, attention, IR ops, "
            "cache writes, Inductor's code), and how far is the step from reading its weights "
            "once?",
            "ir_stack.bench.profile",
            "ir_stack.bench.profile",
            gpu_only=True,
            takes_model=True,
        ),
        Suite(
            "dispatch",
            "What does an eager op call cost beyond calling its implementation directly, and "
            "what do maybe_inplace and selection cost?",
            "ir_stack.bench.dispatch",
            "ir_stack.bench.dispatch",
            gpu_only=False,
        ),
    )
}
