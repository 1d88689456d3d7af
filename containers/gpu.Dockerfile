# The locked GPU stack of unified (requirements/gpu-lock.txt) in an image; build from the checkout root:
#   podman build -f containers/gpu.Dockerfile -t unified-gpu .          # wheels/ holds the CUDA extensions
#   podman build -f containers/gpu.Dockerfile --build-arg SKIP_CUDA_SDISTS=1 -t unified-gpu .
# Apptainer from it: apptainer build unified-gpu.sif docker-daemon://unified-gpu:latest (or unified-gpu.def).
# Run: the checkout is bound at run time (slurm/lwm_warmup.sh: IMAGE=...), unified itself is not installed.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ARG SKIP_CUDA_SDISTS=0
COPY requirements/gpu-lock.txt /opt/unified/requirements/gpu-lock.txt
COPY containers/ /opt/unified/containers/
COPY wheels/ /opt/unified/wheels/
RUN SKIP_CUDA_SDISTS=${SKIP_CUDA_SDISTS} bash /opt/unified/containers/install_gpu_stack.sh
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
