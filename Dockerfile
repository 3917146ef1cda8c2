# syntax=docker/dockerfile:1
# The two shipped images, built daemonlessly here with buildah (`make build-dockerfile-images`, see
# hacks/build-dockerfile-images.py) or with any BuildKit-compatible engine elsewhere:
#   --target extension      gardener-extension-cri-resmgr: Python venv with the package, the helm CLI,
#                           the charts at /charts; runs as uid 65532. It also carries
#                           gardener-extension-admission-cri-resmgr (the garden's admission, started by its
#                           chart with that command)
#   --target installation   cri-resmgr-installer / cri-resmgr-agent: the frozen cri-resmgr program (no Python),
#                           the single-file executable the installer copies to nodes, and nsenter
#
# Inputs (nothing is downloaded but Python packages from PyPI):
#   PYTHON_IMAGE  Debian bookworm with python3 (venv module, shared libpython) and binutils (PyInstaller needs both);
#                 make one from the test rootfs with hacks/build-dockerfile-images.py, or use python:3.11-slim-bookworm
#                 (binutils is then installed with apt)
#   BASE_IMAGE    Debian bookworm for the installation image (glibc, zlib, nsenter from util-linux)
#   build context `helm`: a directory holding a linux `helm` binary (--build-context helm=DIR)
#   secret `pip_ca` (optional): a CA bundle for pip, where PyPI is reached through a TLS-inspecting proxy
#                 (--secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt); never stored in a layer
# hacks/build-images.py writes equivalent images as docker-archive tars without any engine.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

# ---- a venv with the package and its dependencies (shared by the executable build and the extension image)
FROM ${PYTHON_IMAGE} AS venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml ./
# The package's readme is metadata only; a stub keeps documentation edits from rebuilding the images.
RUN echo "gardener-extension-cri-resmgr" > README.md
COPY resmgr resmgr
COPY installer installer
COPY noderecord noderecord
COPY extension extension
COPY admission admission
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python3 -m venv /venv && /venv/bin/pip install /src && rm -rf /src/build

# ---- the single-file executable (PyInstaller one-file) and its unpacked one-dir twin
FROM venv AS executable
RUN command -v objdump >/dev/null \
    || { apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/lib/apt/lists/*; }
COPY hacks/exe_entry.py hacks/build-executable.sh hacks/cri-resmgr.spec hacks/
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && /venv/bin/pip install "pyinstaller>=6.10" \
    && PYTHON=/venv/bin/python CRI_RESMGR_DEV_CACHE=/tmp/exe-cache bash hacks/build-executable.sh /out/cri-resmgr \
    && rm -rf /tmp/exe-cache

# ---- extension image
FROM ${PYTHON_IMAGE} AS extension
COPY --from=venv /venv /venv
COPY --from=helm helm /usr/local/bin/helm
COPY charts /charts
RUN echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >> /etc/passwd \
    && echo "nonroot:x:65532:" >> /etc/group \
    && install -d -o 65532 -g 65532 -m 0755 /home/nonroot \
    && helm version --short
ENV PATH=/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CRI_RESMGR_CHARTS_DIR=/charts HOME=/home/nonroot PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
ENTRYPOINT ["gardener-extension-cri-resmgr"]

# ---- installation-and-agent image. Containers run the unpacked build (no writable /tmp needed, fast probes),
# and the installer copies the same directory to nodes (its --binary default).
FROM ${BASE_IMAGE} AS installation
COPY --from=executable /out/cri-resmgr.dir /opt/cri-resmgr/lib
RUN for c in cri-resmgr cri-resmgr-agent cri-resmgr-agent-probe cri-resmgr-installer cri-resmgr-installer-probe cri-resmgr-webhook; do \
        ln -s /opt/cri-resmgr/lib/cri-resmgr /usr/local/bin/$c; done \
    && command -v nsenter
ENTRYPOINT ["/usr/local/bin/cri-resmgr-installer"]
