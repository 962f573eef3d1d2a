# The proxy image: a wheel built from the checkout, installed with its dependencies into a
# clean venv, with a config that serves as it is (config/image.toml at the CMD's path).
# tests/deploy/test_image.py builds it, runs it with no arguments, and reads /readyz.
#
# BASE names the Python image. Users keep the default; the suite, with no registry to pull
# from, passes an image made from Debian's packages (Makefile, `images`).
ARG BASE=python:3.11-slim

FROM ${BASE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY protocol ./protocol
COPY quotas ./quotas
COPY config ./config
COPY pipeline ./pipeline
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-deps --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/kafka-quota-proxy \
    && /opt/kafka-quota-proxy/bin/pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home kafka-quota-proxy \
    && mkdir -p /var/lib/kafka-quota-proxy/usage \
    && chown -R 10001 /var/lib/kafka-quota-proxy
COPY config/image.toml /etc/kafka-quota-proxy/proxy.toml
ENV PATH=/opt/kafka-quota-proxy/bin:$PATH
# relative paths of a config ([usage] directory = "usage") land here, writable by the proxy
WORKDIR /var/lib/kafka-quota-proxy

# numeric, so that Kubernetes' runAsNonRoot can tell it is not root (the Helm chart)
USER 10001
# usage samples ([usage] directory of config/image.toml and config/docker.toml)
VOLUME /var/lib/kafka-quota-proxy/usage
# bootstrap listener, then broker N at 9200 + N, then Prometheus metrics and the probes
EXPOSE 9192 9201 9202 9203 9464
# healthy while /readyz answers 200 ([metrics] port 9464, as the image's config serves it;
# a service on another port overrides this, as docker-compose.yml's proxy-b does): serving,
# the quota store and the fleet's bus read, not draining. /livez is for whoever restarts.
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/readyz', timeout=2)"]
ENTRYPOINT ["kafka-quota-proxy"]
CMD ["run", "--config", "/etc/kafka-quota-proxy/proxy.toml"]
