# Source on the GPU machine: packages from source, carried wheels (.whl) into /tmp/site.
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | tr '\n' ':')/tmp/site"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
