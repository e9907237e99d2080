# One image for every node of the program on Kubernetes (docs/gke.md), and
# a variant of it for a learner on a GPU:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/acme-impala:TAG .
#   docker build --target gpu -t REGION-docker.pkg.dev/PROJECT/REPO/acme-impala-gpu:TAG .
# The base is pinned by version and digest: dm-launchpad 0.5.2 exists only
# for Python <= 3.10, and the official python images ship the shared
# libpython that courier's and reverb's .so files link against. The tag's
# last build (it stopped moving when 3.10.14 came out); the digest was read
# from public Dockerfiles that pin it, since the machines this project is
# developed on reach no registry: check it with
# `docker buildx imagetools inspect python:3.10.13-slim-bookworm`.
#
# The gpu target adds the CUDA 11.2 and cuDNN 8.1 runtime libraries that
# TensorFlow 2.8.4's Linux wheel was built against (the same wheel, from the
# same lock, runs on CPU or GPU), taken from NVIDIA's runtime image of those
# versions (CUDA 11.2.2, cuDNN 8.1.1). That image is pinned by its version
# tag only: no public file these machines can read holds its digest. Pin it
# where you build (`docker buildx imagetools inspect
# nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04`). The node's driver comes
# from GKE's GPU node pool (/usr/local/nvidia).
FROM nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04 AS cuda

FROM python:3.10.13-slim-bookworm@sha256:1326d0fd281d283b077fd249e618339a44c9ca5aae6e05cb4f069a087e827922 AS base

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_CPP_MIN_LOG_LEVEL=1

WORKDIR /opt/acme_impala
# The same pins as the venv (scripts/setup_venv.sh): one copy of each, every
# transitive dependency held by requirements.lock; not the test tools
# (requirements-test.txt).
COPY requirements.txt requirements-nodeps.txt requirements.lock setup.py ./
RUN pip install -r requirements.txt -c requirements.lock \
 && pip install --no-deps -r requirements-nodeps.txt -c requirements.lock
COPY acme_impala ./acme_impala
COPY programs ./programs
COPY configs ./configs
RUN pip install --no-deps -e . \
 && python -c "import acme_impala.launch.k8s.node"

# An unprivileged user, the uid the manifests run as (runAsNonRoot with
# runAsUser 10001); the code and the venv stay root's and read-only to it.
RUN useradd --uid 10001 --user-group --no-create-home \
        --shell /usr/sbin/nologin impala
# Pods run `python -m acme_impala.launch.k8s.node --group=... <program flags>`
# (the command comes from the rendered Job); nothing runs by default.
CMD ["python", "-m", "acme_impala.launch.k8s.node", "--help"]

FROM base AS gpu
# The CUDA libraries TensorFlow loads (cudart, cuBLAS, cuFFT, cuRAND,
# cuSOLVER, cuSPARSE) and cuDNN; bookworm's glibc is newer than focal's.
COPY --from=cuda /usr/local/cuda-11.2/targets/x86_64-linux/lib/ /usr/local/cuda-11.2/lib64/
COPY --from=cuda /usr/lib/x86_64-linux-gnu/libcudnn* /usr/local/cuda-11.2/lib64/
ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda-11.2/lib64
USER 10001

# The default target (last): the CPU image, without CUDA.
FROM base AS cpu
USER 10001
