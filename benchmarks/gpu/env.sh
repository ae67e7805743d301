# Source on the GPU machine: packages from source, carried wheels (.whl) into /tmp/site.
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | tr '\n' ':')/tmp/site"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
# Byte-compiled modules as after a pip install: this machine's torch has no .pyc files and
# cannot write them beside the sources, so every process would compile thousands of modules
# (seconds, inside startup timings). Keep them under /tmp, compiled once up front.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
if [ ! -d /tmp/pycache ]; then
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m compileall -q -j 0 "$site" "$PWD/packages" >/dev/null 2>&1 || true
fi
