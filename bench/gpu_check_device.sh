#!/bin/bash
# bench/gpu_check.py on the lent GPU machine (python3 3.12 with torch, no network, nothing of ours
# installed): install the wheels `make gpu-kit` put in .whl/ (carried with the call), lay the
# repository out as the installed package, run the check, and leave its JSON in $OUT.
#   device run:  command "bash bench/gpu_check_device.sh", carry [".whl"], timeout_s 600
# Arguments go to gpu_check.py (e.g. --stages segment). Exit status: gpu_check's.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build}
SITE=/tmp/vsi-site
mkdir -p "$SITE" "$OUT"
if [ ! -d .whl ] || ! ls .whl/*.whl >/dev/null 2>&1; then
  echo "no .whl/: run 'make gpu-kit' here first and carry .whl with the call" >&2; exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 2
for sdist in .whl/*.tar.gz; do
  [ -e "$sdist" ] && { python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" "$sdist" || exit 2; }
done
# depth_anything_3.api imports its export helpers at module level: pycolmap (COLMAP export) and
# moviepy (Gaussian-splat videos). Inference calls neither; stand-ins that fail on any use.
for mod in pycolmap moviepy; do
  mkdir -p "$SITE/$mod"
  cat > "$SITE/$mod/__init__.py" <<PY
"""Stand-in on the GPU check's machine: $mod is not carried there (see bench/gpu_kit.txt)."""
def __getattr__(name):
    raise ImportError("$mod is not installed on this machine (bench/gpu_check_device.sh stands it in "
                      "for depth_anything_3's export helpers, which the GPU check never calls)")
PY
done
echo 'from moviepy import __getattr__  # noqa: F401' > "$SITE/moviepy/editor.py"
# the package as installed: vsi_wild/ with stages, tasks and flows mapped in (pyproject's package-dir)
TREE=/tmp/vsi-tree
rm -rf "$TREE" && mkdir -p "$TREE/vsi_wild"
ln -s "$PWD"/vsi_wild/* "$TREE/vsi_wild/"
for m in stages tasks flows; do ln -s "$PWD/$m" "$TREE/vsi_wild/$m"; done
export PYTHONPATH="$TREE:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 YOLO_OFFLINE=1
export YOLO_CONFIG_DIR=/tmp/yolo-config VSI_WILD_WEIGHTS=${VSI_WILD_WEIGHTS:-/tmp/no-weights}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
python3 bench/gpu_check.py --out "$OUT/gpu_check.json" "$@" 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
