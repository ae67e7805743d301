"""Test sessions for the ir-stack monorepo.

`nox` with no arguments runs what CI needs: every layer's tests in isolation, the integration
tests, lint and typecheck. Each `tests` session creates a fresh environment holding only torch,
that package, the sibling packages it declares (installed from their local paths) and the test
tools, which proves the layer stands alone.

Torch is installed first, pinned by ``IR_STACK_TORCH`` (default ``torch==2.13.0``, the CPU build
on our machines), so that resolving ``torch>=2.11,<2.15`` installs nothing more.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = [
    "ir-spec",
    "ir-dispatch",
    "ir-passes",
    "ir-kernels-triton",
    "ir-kernels-cuda",
    "ir-piecewise",
    "ir-stack",
]
TORCH = shlex.split(os.environ.get("IR_STACK_TORCH", "torch==2.13.0"))
TEST_TOOLS = ["pytest>=8", "hypothesis>=6.100", "pytest-benchmark>=4", "pytest-xdist>=3.5"]
#: Extra local distributions a package's tests install (e.g. test providers).
TEST_EXTRAS: dict[str, list[str]] = {
    "ir-dispatch": [
        "packages/ir-dispatch/tests/providers/good",
        "packages/ir-dispatch/tests/providers/broken",
        # an out-of-tree platform (ir.platforms) with its own kernels (ir.providers)
        "packages/ir-dispatch/tests/platforms/npu",
    ],
    # Triton's interpreter (kernels on CPU) needs numpy, which triton does not declare
    "ir-kernels-triton": ["numpy"],
    # the Hugging Face converter is tested on randomly initialised transformers models
    "ir-stack": ["transformers>=4.56", "matplotlib>=3.7"],
}
#: Environment per package's test session.
TEST_ENV: dict[str, dict[str, str]] = {"ir-kernels-triton": {"TRITON_INTERPRET": "1"}}
#: pytest arguments per package's test session: the interpreted Triton kernels spread over
#: every core (two cores: 306 s to 163 s), and so do the compilations of ir-passes',
#: ir-piecewise's and ir-stack's tests (two cores: ir-stack about 1050 s to 850 s). The cuda
#: tests gain little so (415 s to 393 s): their time is the host-emulation build and the nvcc
#: check, which use every core already.
TEST_ARGS: dict[str, list[str]] = {
    # the offline reduction-layout compiles are the `layouts` session's
    "ir-kernels-triton": [
        "-n",
        "auto",
        "--ignore=packages/ir-kernels-triton/tests/test_layouts.py",
    ],
    "ir-passes": ["-n", "auto"],
    "ir-piecewise": ["-n", "auto"],
    "ir-stack": ["-n", "auto"],
}

nox.options.sessions = [
    "tests",
    "integration",
    "downstream",
    "layouts",
    "lint",
    "typecheck",
    "docs",
    "workflows",
]
#: Lowest torch the packages allow (the minimums session), and where to find its CPU build.
TORCH_MIN = shlex.split(
    os.environ.get(
        "IR_STACK_TORCH_MIN",
        "torch==2.11.0 --extra-index-url https://download.pytorch.org/whl/cpu",
    )
)
nox.options.default_venv_backend = "venv"
#: Keep each session's environment after it ends (for ``nox -r``); by default it is deleted,
#: because a dozen environments with torch need about 15 GB and CI machines may have less.
KEEP_VENVS = os.environ.get("IR_STACK_KEEP_VENVS", "") not in ("", "0")
nox.options.error_on_missing_interpreters = True


SessionFunction = Callable[..., None]


def frees_its_environment(function: SessionFunction) -> SessionFunction:
    """Delete the session's environment when it ends, passed or failed (unless KEEP_VENVS)."""

    @functools.wraps(function)
    def run_then_free(session: nox.Session, **kwargs: str) -> None:
        try:
            function(session, **kwargs)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if not KEEP_VENVS and location and Path(location, "pyvenv.cfg").exists():
                session.log(f"deleting {location} (set IR_STACK_KEEP_VENVS=1 to keep it)")
                shutil.rmtree(location, ignore_errors=True)

    return run_then_free


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
    assert match is not None, requirement
    return match.group(0).lower().replace("_", "-")


def sibling_closure(package: str) -> list[str]:
    """`package` and every sibling it depends on, directly or not, dependencies first."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        meta = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())
        for req in meta["project"].get("dependencies", []):
            dep = _requirement_name(req)
            if dep in PACKAGES:
                visit(dep)
        order.append(name)

    visit(package)
    return order


def install_packages(session: nox.Session, packages: list[str]) -> None:
    """Install torch first, then the given packages (and their siblings) from local paths, then
    byte-compile the environment (`byte_compile`)."""
    session.install("--no-compile", *TORCH)
    closure: list[str] = []
    for package in packages:
        closure += [p for p in sibling_closure(package) if p not in closure]
    session.install("--no-compile", *(str(ROOT / "packages" / p) for p in closure))
    byte_compile(session)


def byte_compile(session: nox.Session) -> None:
    """Byte-compile the environment's installed modules on every core. pip compiles one module
    at a time: on two cores torch took 43 s to install that way, against 12 s without it and 19
    s for this over the whole environment. Compiled they must be: where PYTHONDONTWRITEBYTECODE
    is set (our machines), every process would otherwise compile what it imports afresh."""
    site = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    )
    assert isinstance(site, str), site
    # exit status 1 where a module does not compile under this Python (torch ships a test
    # helper in 3.12 syntax); pip skips those too, and a broken module fails on import anyway
    session.run(
        "python",
        "-m",
        "compileall",
        "-q",
        "-j",
        "0",
        site.strip(),
        silent=True,
        success_codes=[0, 1],
    )


@nox.session(tags=["tests"])
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
@frees_its_environment
def tests(session: nox.Session, package: str) -> None:
    """One layer's tests in an environment with only that layer and its dependencies."""
    install_packages(session, [package])
    run_package_tests(session, package)


def run_package_tests(session: nox.Session, package: str) -> None:
    """Install the test tools, show what the environment holds, run the package's tests."""
    session.install(*TEST_TOOLS, *TEST_EXTRAS.get(package, []))
    session.run("python", "-m", "pip", "list", "--format=freeze")
    session.run(
        "pytest",
        f"packages/{package}/tests",
        *TEST_ARGS.get(package, []),
        *session.posargs,
        env=TEST_ENV.get(package, {}),
    )


#: A model library that depends on ir-spec alone (`downstream` and `integration` sessions).
DOWNSTREAM = "tests-integration/downstream_model"


@nox.session(tags=["tests"])
@frees_its_environment
def integration(session: nox.Session) -> None:
    """End-to-end tests with every layer installed, plus the out-of-tree provider example and
    the downstream model library (its own tests run here too, beside the whole stack)."""
    install_packages(session, PACKAGES)
    # the transformers tutorial converts a randomly initialised transformers model
    session.install(
        *TEST_TOOLS, "numpy", "transformers>=4.56", "tests-integration/oot_provider", DOWNSTREAM
    )
    session.run(
        "pytest", "tests-integration", "-n", "auto", *session.posargs, env={"TRITON_INTERPRET": "1"}
    )


@nox.session(tags=["tests"])
@frees_its_environment
def downstream(session: nox.Session) -> None:
    """The downstream model library with ir-spec and nothing else of the stack: its native
    path, gradients and stock ``torch.compile`` (the promise that a model library may depend
    on ir-spec alone)."""
    install_packages(session, ["ir-spec"])
    session.install("pytest>=8", DOWNSTREAM)
    session.run("python", "-m", "pip", "list", "--format=freeze")
    others = [p.replace("-", "_") for p in PACKAGES if p != "ir-spec"]
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; "
        f"found = [m for m in {others!r} if importlib.util.find_spec(m)]; "
        "sys.exit(f'installed beside ir-spec: {found}' if found else 0)",
    )
    session.run("pytest", f"{DOWNSTREAM}/tests", *session.posargs)


@nox.session(tags=["checks"])
@frees_its_environment
def layouts(session: nox.Session) -> None:
    """Without a GPU: the Triton norms compiled for sm_90 give a decode row the same reduction
    layout, hence the same bits, whether one program or several share it (batch invariance of
    `norms.rules.split_for`; the package's `tests/test_layouts.py`), for the installed Triton."""
    install_packages(session, ["ir-kernels-triton"])
    session.install("pytest>=8")
    session.run("pytest", "packages/ir-kernels-triton/tests/test_layouts.py", *session.posargs)


@nox.session(tags=["checks"])
@frees_its_environment
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(tags=["checks"])
@frees_its_environment
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's sources and the benchmarks."""
    install_packages(session, PACKAGES)
    # the test tools: the CPU benchmarks' fixtures (Hugging Face's library is checked as Any)
    session.install("mypy>=1.10", *TEST_TOOLS)
    session.run("mypy", *(f"packages/{p}/src" for p in PACKAGES), "benchmarks")


@nox.session(tags=["docs"])
@frees_its_environment
def docs(session: nox.Session) -> None:
    """Build the documentation site with --strict (broken links and references fail)."""
    install_packages(session, PACKAGES)
    session.install("mkdocs-material>=9.5", "mkdocstrings[python]>=0.26")
    assets = ROOT / "docs" / "assets"
    assets.mkdir(exist_ok=True)
    for plot in (ROOT / "benchmarks" / "results").glob("*.png"):
        (assets / plot.name).write_bytes(plot.read_bytes())
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(ROOT / "site"),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


@nox.session(tags=["checks"])
@frees_its_environment
def workflows(session: nox.Session) -> None:
    """Validate every GitHub workflow against the GitHub Actions schema (vendored, offline)."""
    session.install("check-jsonschema>=0.28")
    files = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *files)


def _lowest(requirement: str) -> str:
    """`name>=x,<y` -> `name==x` (the lowest version a requirement allows)."""
    from packaging.requirements import Requirement

    req = Requirement(requirement)
    floor = next((s.version for s in req.specifier if s.operator in (">=", "==", "~=")), None)
    return f"{req.name}=={floor}" if floor else str(req)


@nox.session(tags=["minimums"])
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
@frees_its_environment
def minimums(session: nox.Session, package: str) -> None:
    """One layer's tests against the lowest versions its metadata allows (torch 2.11 included;
    IR_STACK_TORCH_MIN says where to get it)."""
    session.install(*TORCH_MIN)
    pins: list[str] = []
    for name in sibling_closure(package):
        meta = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())
        pins += [
            _lowest(r)
            for r in meta["project"].get("dependencies", [])
            if _requirement_name(r) not in PACKAGES and _requirement_name(r) != "torch"
        ]
    session.install(*pins, *(str(ROOT / "packages" / p) for p in sibling_closure(package)))
    run_package_tests(session, package)


@nox.session(tags=["gpu"])
@frees_its_environment
def gpu(session: nox.Session) -> None:
    """Every test that runs differently on a GPU: both kernel providers' matrices (the cuda
    kernels built on first use, which needs nvcc), the passes, piecewise compilation with CUDA
    graphs and the integration tests (needs a CUDA GPU; the tests skip or run reduced without
    one). Spread it over processes with ``nox -s gpu -- -n 8``."""
    install_packages(session, PACKAGES)
    # the transformers tutorial converts a randomly initialised transformers model
    session.install(
        *TEST_TOOLS, "numpy", "transformers>=4.56", "tests-integration/oot_provider", DOWNSTREAM
    )
    session.run(
        "pytest",
        # ir-spec's and ir-dispatch's own tests too: the GPU machine's torch is the oldest we
        # support, and their helpers have GPU paths
        "packages/ir-spec/tests",
        "packages/ir-dispatch/tests",
        "packages/ir-kernels-triton/tests",
        "packages/ir-kernels-cuda/tests",
        "packages/ir-passes/tests",
        "packages/ir-piecewise/tests",
        "tests-integration",
        *session.posargs,
    )


#: Where the GPU suites' current results live, one per suite and device (`nox -s bench`).
RESULTS = ROOT / "benchmarks" / "results"
#: Per suite: how much worse (percent) a row of a new GPU result may be than the committed one
#: before `nox -s bench -- --compare-with DIR` fails, and the rows compared (our providers and
#: modes; Inductor's and stock torch.compile's own drift is not ours). A kernel at a decode
#: size takes little more than an empty launch, whose replays differ by up to a tenth between
#: hosts: hence the wider margin for kernels.
BENCH_GPU_COMPARE = {
    "kernels": (15.0, ["--where", "provider=triton,cuda"]),
    "e2e": (10.0, ["--where", "mode=ir_stack,ir_stack piecewise,eager best kernels"]),
}
#: The CPU suites' saved baseline (pytest-benchmark's storage; `nox -s bench-cpu --
#: --save-baseline` measures a new one in its place).
BENCH_CPU_BASELINE = ROOT / "benchmarks" / "cpu" / "baseline"
#: Fail where a benchmark's fastest round is this much slower than the baseline's. Why min:
#: 8 runs at load 12 on 2 cores moved mins by up to 9 %, medians 16 %, means 5x: 25 % on min.
BENCH_CPU_FAIL = "min:25%"


@nox.session(tags=["bench"])
@frees_its_environment
def bench(session: nox.Session) -> None:
    """The benchmark suites on a GPU (`ir-stack bench`), their results into benchmarks/results.
    Arguments go to `ir-stack bench` (e.g. ``-- --only kernels,e2e --out DIR``); with
    ``--compare-with DIR`` each new result of a suite in `BENCH_GPU_COMPARE` is then compared
    with the one of its suite and device in DIR, and a regression beyond the threshold fails
    the session (the comparisons are written beside the new results)."""
    install_packages(session, PACKAGES)
    session.install("liger-kernel==0.8.5", "matplotlib>=3.7", "transformers>=4.56")
    args = list(session.posargs)
    baseline = None
    if "--compare-with" in args:
        at = args.index("--compare-with")
        if at + 1 >= len(args):
            session.error("--compare-with: expected the directory of the results to compare with")
        baseline = Path(args[at + 1])
        del args[at : at + 2]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else RESULTS
    session.run("ir-stack", "bench", "--out", str(out), *args)
    if baseline is None:
        return
    regressed = []
    for new in sorted(out.glob("*.json")):
        suite = new.stem.split("-")[0]
        old = baseline / new.name
        if suite not in BENCH_GPU_COMPARE or not old.is_file():
            session.log(f"{new.name}: no committed result of this suite and device to compare")
            continue
        threshold, where = BENCH_GPU_COMPARE[suite]
        compare = ["ir-stack", "bench", "compare", str(old), str(new), "--threshold"]
        compare += [str(threshold), *where, "--out", str(new.with_name(f"compare-{new.stem}.md"))]
        try:  # exit status 1: a regression; every result is compared before the session fails
            session.run(*compare)
        except nox.command.CommandFailed:
            regressed.append(new.name)
    if regressed:
        session.error(f"{', '.join(regressed)}: worse than {baseline} beyond the threshold")


@nox.session(name="bench-cpu", tags=["bench"])
@frees_its_environment
def bench_cpu(session: nox.Session) -> None:
    """The CPU benchmarks (benchmarks/cpu: eager dispatch, maybe_inplace, selection) against
    the saved baseline: fails where a benchmark is worse than `BENCH_CPU_FAIL` allows.
    ``-- --save-baseline`` measures a new baseline in place of the old one instead."""
    install_packages(session, ["ir-dispatch"])
    session.install("pytest>=8", "pytest-benchmark>=4")
    args = [a for a in session.posargs if a != "--save-baseline"]
    pytest = ["pytest", "benchmarks/cpu", "-p", "no:cacheprovider"]
    pytest += [f"--benchmark-storage=file://{BENCH_CPU_BASELINE}", "--benchmark-sort=name"]
    pytest += ["--benchmark-columns=min,median,iqr,rounds", "--benchmark-group-by=group"]
    if "--save-baseline" in session.posargs:
        for old in BENCH_CPU_BASELINE.glob("*/*.json"):
            old.unlink()
        session.run(*pytest, "--benchmark-save=baseline", *args)
        return
    saved = sorted(BENCH_CPU_BASELINE.glob("*/*.json"))
    if not saved:
        session.error(f"no baseline in {BENCH_CPU_BASELINE}: nox -s bench-cpu -- --save-baseline")
    compare = [f"--benchmark-compare={saved[-1]}", f"--benchmark-compare-fail={BENCH_CPU_FAIL}"]
    session.run(*pytest, *compare, *args)
