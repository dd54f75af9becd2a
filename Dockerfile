# One image for every Loadline component: the entrypoint is the `loadline` command, so a pod runs
# `loadline agent|manager|scheduler|descheduler|extender ...` as its args.
#
#   docker build -t registry.example.com/loadline:0.1.0 .      (or: buildah bud -t ... .)
#
# `make image` builds this same file with no registry and no network inside the build: BASE is a Debian
# bookworm root filesystem bootstrapped with mmdebstrap, the build context is a directory of wheels
# prepared on the host, and WHEELS names it (see tests/harness/image.py).
ARG BASE=python:3.12-slim

FROM ${BASE} AS install
# WHEELS: a directory of the build context holding the loadline wheel, every dependency's wheel and pip's
# own wheel, installed with --no-index. Empty (the default): the context is the source tree and the base
# image's pip builds and installs it from there (this needs the package index).
ARG WHEELS=""
COPY . /src
# A virtualenv without pip: the final image carries Loadline and its dependencies, not the installer.
# numpy's own test suites are dropped (~17 MB nothing imports); every component must at least start.
RUN set -eu; \
    python3 -m venv --without-pip /opt/loadline; \
    if [ -n "$WHEELS" ]; then \
        pip_wheel=$(ls /src/"$WHEELS"/pip-*.whl); \
        python3 "$pip_wheel/pip" --python /opt/loadline/bin/python install --no-index --no-cache-dir \
            --disable-pip-version-check --find-links /src/"$WHEELS" loadline; \
    else \
        python3 -m pip --python /opt/loadline/bin/python install --no-cache-dir --disable-pip-version-check /src; \
    fi; \
    rm -rf /opt/loadline/lib/python3*/site-packages/numpy/*/tests /opt/loadline/lib/python3*/site-packages/numpy/tests; \
    for component in agent manager scheduler descheduler extender; do \
        /opt/loadline/bin/loadline "$component" --help >/dev/null; \
    done

FROM ${BASE}
LABEL org.opencontainers.image.title="loadline" \
      org.opencontainers.image.description="Load-aware colocation for Kubernetes: agent, manager, scheduler, descheduler, extender" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=install /opt/loadline /opt/loadline
# A numeric non-root user (Kubernetes can only check runAsNonRoot against a number). The agent pod runs as
# root where the chart enables QoS enforcement, which writes cgroup files.
RUN echo 'loadline:x:65532:65532:Loadline:/nonexistent:/usr/sbin/nologin' >> /etc/passwd && \
    echo 'loadline:x:65532:' >> /etc/group
ENV PATH=/opt/loadline/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
ENTRYPOINT ["loadline"]
CMD ["--help"]
