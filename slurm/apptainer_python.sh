#!/bin/bash
# apptainer_python.sh: the Python of the Apptainer image $IMAGE (containers/unified-gpu.def), with the
# checkout $REPO bound and first on the path. slurm/*.sh use it as PYTHON when IMAGE is set.
set -euo pipefail
: "${IMAGE:?IMAGE = the .sif of containers/unified-gpu.def}"
: "${REPO:?REPO = the unified checkout}"
exec apptainer exec --nv --bind "$REPO" --pwd "$PWD" --env "PYTHONPATH=$REPO" "$IMAGE" python "$@"
