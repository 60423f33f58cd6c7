# The GPU worker image: a Prefect process worker on the `gpu` pool, with the `models` extra.
#   docker build -t vsi-wild-gpu:0.1.0 .
#   docker run --gpus '"device=0"' -e PREFECT_API_URL=http://prefect.cluster:4200/api \
#     -v /srv/vsi-wild/weights:/weights:ro -v /srv/vsi-wild/data:/data vsi-wild-gpu:0.1.0
# Weights are never baked in: they are mounted at /weights (VSI_WILD_WEIGHTS, the default of
# models.weights_dir). See docs/cluster.md.
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

# Ubuntu 24.04's python3 is 3.12 (pyproject: >=3.11,<3.13); ffmpeg decodes and encodes the videos.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ffmpeg \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 vsi

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VSI_WILD_HOME=/opt/vsi-wild \
    VSI_WILD_WEIGHTS=/weights \
    HF_HUB_OFFLINE=1 \
    YOLO_OFFLINE=1 \
    DO_NOT_TRACK=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false

RUN python3 -m venv /opt/venv
WORKDIR /opt/vsi-wild

# The package with its pinned extras (versions come from pyproject.toml: DL3013 does not apply to a
# local project), then configs and prefect.yaml (changing a config does not reinstall torch).
COPY pyproject.toml README.md ./
COPY vsi_wild/ vsi_wild/
COPY stages/ stages/
COPY tasks/ tasks/
COPY flows/ flows/
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[models,cluster]"
COPY configs/ configs/
COPY prefect.yaml ./

RUN mkdir -p /weights /data && chown vsi /data
VOLUME ["/weights", "/data"]
USER 10001

ENTRYPOINT ["prefect", "worker", "start", "--pool", "gpu", "--type", "process"]
CMD ["--limit", "1"]
