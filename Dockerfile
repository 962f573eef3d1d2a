# The proxy image, installed the way tests/deploy/test_docker.py proves it: a wheel built from
# the checkout, installed with its dependencies into a clean venv, and `check-config` run on
# the configs docker-compose.yml gives the proxies.
FROM python:3.11-slim AS wheel

WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY protocol ./protocol
COPY quotas ./quotas
COPY config ./config
COPY pipeline ./pipeline
RUN pip wheel --no-deps --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim

COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/kafka-quota-proxy \
    && /opt/kafka-quota-proxy/bin/pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --no-create-home proxy \
    && mkdir -p /var/lib/kafka-quota-proxy/usage \
    && chown proxy /var/lib/kafka-quota-proxy/usage
ENV PATH=/opt/kafka-quota-proxy/bin:$PATH

# numeric, so that Kubernetes' runAsNonRoot can tell it is not root (the Helm chart)
USER 10001
# usage samples ([usage] directory in config/docker.toml), for `kafka-quota-proxy report`
VOLUME /var/lib/kafka-quota-proxy/usage
# bootstrap listener, then broker N at 9200 + N, then Prometheus metrics and the probes
EXPOSE 9192 9201 9202 9203 9464
# healthy while /readyz answers 200 ([metrics] port 9464, as config/docker.toml serves it;
# a service on another port overrides this, as docker-compose.yml's proxy-b does): serving,
# the quota store and the fleet's bus read, not draining. /livez is for whoever restarts.
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/readyz', timeout=2)"]
ENTRYPOINT ["kafka-quota-proxy"]
CMD ["run", "--config", "/etc/kafka-quota-proxy/proxy.toml"]
