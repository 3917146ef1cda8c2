# syntax=docker/dockerfile:1
# The two shipped images, for registries (`make push-images REGISTRY=... TAG=...`):
#   --target extension      gardener-extension-cri-resmgr: Python, the helm CLI, the charts at /charts
#   --target installation   cri-resmgr-installer / cri-resmgr-agent: the frozen cri-resmgr program (no Python),
#                           the single-file executable the installer copies to nodes, and nsenter
# hacks/build-images.py writes equivalent images as docker-archive tars without a container engine.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG BASE_IMAGE=debian:bookworm-slim
ARG HELM_VERSION=v3.17.3

# ---- the single-file executable (PyInstaller one-file); glibc of bookworm, runs on newer nodes too
FROM ${PYTHON_IMAGE} AS executable
RUN apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY resmgr resmgr
COPY installer installer
COPY extension extension
COPY hacks/exe_entry.py hacks/build-executable.sh hacks/cri-resmgr.spec hacks/
RUN python -m venv /venv && /venv/bin/pip install --no-cache-dir . "pyinstaller>=6.10" \
    && PYTHON=/venv/bin/python bash hacks/build-executable.sh /out/cri-resmgr

# ---- helm CLI
FROM ${PYTHON_IMAGE} AS helm
ARG HELM_VERSION
ARG TARGETARCH=amd64
ADD https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz /tmp/helm.tar.gz
RUN tar -xzf /tmp/helm.tar.gz -C /tmp && install -m 0755 /tmp/linux-${TARGETARCH}/helm /usr/local/bin/helm

# ---- extension image
FROM ${PYTHON_IMAGE} AS extension
COPY pyproject.toml README.md /src/
COPY resmgr /src/resmgr
COPY installer /src/installer
COPY extension /src/extension
RUN pip install --no-cache-dir /src && rm -rf /src
COPY --from=helm /usr/local/bin/helm /usr/local/bin/helm
COPY charts /charts
RUN groupadd -g 65532 nonroot && useradd -u 65532 -g 65532 -d /home/nonroot -m -s /sbin/nologin nonroot
ENV CRI_RESMGR_CHARTS_DIR=/charts HOME=/home/nonroot
USER 65532:65532
ENTRYPOINT ["gardener-extension-cri-resmgr"]

# ---- installation-and-agent image (bookworm-slim has nsenter from util-linux, glibc and zlib).
# Containers run the unpacked build (no writable /tmp needed, fast probes); the one-file executable is what
# the installer copies to nodes.
FROM ${BASE_IMAGE} AS installation
COPY --from=executable /out/cri-resmgr.dir /opt/cri-resmgr/lib
COPY --from=executable /out/cri-resmgr /opt/cri-resmgr/bin/cri-resmgr
RUN for c in cri-resmgr cri-resmgr-agent cri-resmgr-agent-probe cri-resmgr-installer; do \
        ln -s /opt/cri-resmgr/lib/cri-resmgr /usr/local/bin/$c; done \
    && command -v nsenter
ENTRYPOINT ["/usr/local/bin/cri-resmgr-installer"]
