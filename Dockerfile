# The proxy image: installs the package from pyproject.toml with pip, as `make setup` does.
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY protocol ./protocol
COPY quotas ./quotas
COPY config ./config
COPY pipeline ./pipeline
RUN pip install --no-cache-dir . \
    && useradd --system --no-create-home proxy \
    && mkdir -p /var/lib/kafka-quota-proxy/usage \
    && chown proxy /var/lib/kafka-quota-proxy/usage

USER proxy
# usage samples ([usage] directory in config/docker.toml), for `kafka-quota-proxy report`
VOLUME /var/lib/kafka-quota-proxy/usage
# bootstrap listener, then broker N at 9200 + N, then Prometheus metrics
EXPOSE 9192 9201 9202 9203 9464
ENTRYPOINT ["kafka-quota-proxy"]
CMD ["run", "--config", "/etc/kafka-quota-proxy/proxy.toml"]
