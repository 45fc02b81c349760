# syntax=docker/dockerfile:1
# The one base of every service image: services/*/Dockerfile build FROM the two targets of
# this file instead of each repeating the OS, user, environment and venv set-up.
#   base   OS + Python, the unprivileged app user (10001), the environment every service
#          shares, /opt/venv on PATH; what each service's `app` stage starts from.
#   build  base + pip settings, an empty venv at /opt/venv, and in /src what every image
#          builds with (constraints.txt, proto/); what each service's `build` stage starts
#          from (it copies libs/runtime and its own packages and installs them). Only the
#          venv leaves it. The runtime library's sources stay out of the base on purpose:
#          in the Tilt loop a change to them is synced into the running containers, where
#          a base that held them would rebuild every image.
# Build both from the repository root before any service image (Tilt does it itself):
#   docker build -f infra/docker/base.Dockerfile --target base  -t k4d/base:cpu .
#   docker build -f infra/docker/base.Dockerfile --target build -t k4d/base-build:cpu .
# GPU variant (nvidia/cuda runtime, Ubuntu 24.04, Python 3.12), for the generator, the
# trainer's torchrun workers and the evaluator: --build-arg VARIANT=gpu, tags :gpu.
ARG VARIANT=cpu
ARG PYTHON_IMAGE=python:3.11-slim
ARG CUDA_IMAGE=nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04

FROM ${PYTHON_IMAGE} AS os-cpu
ENV K4D_IMAGE_VARIANT=cpu

FROM ${CUDA_IMAGE} AS os-gpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ENV K4D_IMAGE_VARIANT=gpu

# BuildKit builds only the OS stage the VARIANT names.
FROM os-${VARIANT} AS base
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/k4d --shell /usr/sbin/nologin k4d
# Tilt's dev targets make our own packages writable by the app user (live_update syncs
# sources into site-packages); never run outside the dev loop.
COPY infra/docker/k4d-dev-own-packages /usr/local/bin/k4d-dev-own-packages
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/k4d XDG_CACHE_HOME=/home/k4d/.cache
WORKDIR /home/k4d

FROM base AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
COPY constraints.txt ./
COPY proto/ proto/
