# The README's two commands: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BROKERS ?= 1

.PHONY: setup run test lint bench clean chromium haproxy prometheus docker-compose helm tmux franz-go podman images

$(VENV)/.installed: pyproject.toml
	@command -v java >/dev/null || { echo "Java 17 is required (the local Kafka runs on it)"; exit 1; }
	@command -v mvn >/dev/null || { echo "Maven is required (it fetches the Kafka jars)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pipeline,top]'
	touch $@

setup: $(VENV)/.installed
	$(PY) -m localkafka fetch

# a local Kafka plus the proxy with config/example.toml; prints the bootstrap address
run: setup
	$(PY) -m localkafka.demo --brokers $(BROKERS) --config config/example.toml

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# $(call apt_install,PACKAGE,NAME[,OPTIONS]): Debian's package, installed (as root, with
# apt-get, updating its lists only when the install fails); elsewhere, what the tests need
apt_install = if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(3) $(1) </dev/null >/dev/null \
	    || { apt-get update -q >/dev/null \
	         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(3) $(1) </dev/null >/dev/null; }; \
	else echo "$(2) is required by the tests (Debian/Ubuntu: apt-get install $(strip $(3) $(1)))"; exit 1; fi

# the usage report's test opens it in headless Chromium: Debian's package, installed when
# missing on a machine where that is possible
chromium:
	@command -v chromium >/dev/null || { $(call apt_install,chromium,Chromium); }

# the load balancer in front of a fleet (tests/integration/test_load_balancer.py): Debian's
# HAProxy, installed when missing; its package starts no service where no init system runs,
# and its default config binds no port
haproxy:
	@command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || { $(call apt_install,haproxy,HAProxy); }

# the operators' view (deploy/) is proven against Debian's Prometheus (prometheus and
# promtool; Debian 12's is 2.42.0, the version docker-compose.yml pins, and a test says so
# when they differ), unpacked from its package into .cache/ rather than installed: the
# package would start a Prometheus service on the machine. Without apt-get, the prometheus
# and promtool on the PATH.
PROMETHEUS_DEB := .cache/prometheus
prometheus:
	@{ [ -x $(PROMETHEUS_DEB)/usr/bin/promtool ] && [ -x $(PROMETHEUS_DEB)/usr/bin/prometheus ]; } || { \
	  if command -v apt-get >/dev/null; then \
	    mkdir -p .cache/debs && cd .cache/debs && rm -f prometheus_*.deb && { apt-get download -q prometheus >/dev/null 2>&1 \
	      || { [ "$$(id -u)" = 0 ] && apt-get update -q >/dev/null && apt-get download -q prometheus >/dev/null 2>&1; } \
	      || { echo "Debian's prometheus package could not be downloaded (apt-get download prometheus)"; exit 1; }; } \
	    && cd ../.. && dpkg-deb -x .cache/debs/prometheus_*.deb $(PROMETHEUS_DEB); \
	  else { command -v prometheus && command -v promtool; } >/dev/null \
	    || { echo "Prometheus is required by the tests (prometheus and promtool on the PATH)"; exit 1; }; fi; }

# the compose file is validated by a real compose implementation: Debian's docker-compose
# (its `config` needs no container engine; the engine it recommends is not installed)
docker-compose:
	@command -v docker-compose >/dev/null || { $(call apt_install,docker-compose,docker-compose,--no-install-recommends); }

# docker-compose.yml is brought up by the suite (tests/deploy/test_compose_up.py) in podman
# with runc, as Debian 12 packages them, with netavark for the compose network's service
# names; debootstrap makes the base image where no registry is reachable. containers.conf is
# written only when the machine has none: the limits runc needs here, runc, netavark.
CONTAINERS_CONF := /etc/containers/containers.conf
podman:
	@{ command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null \
	   && [ -x /usr/lib/podman/netavark ] && [ -x /usr/lib/podman/aardvark-dns ] && [ -x /usr/sbin/iptables ]; } \
	  || { $(call apt_install,podman runc netavark aardvark-dns iptables debootstrap uidmap,podman,--no-install-recommends); }
	@[ -f $(CONTAINERS_CONF) ] || { [ "$$(id -u)" = 0 ] && mkdir -p $(dir $(CONTAINERS_CONF)) && printf '%s\n' \
	  '[containers]' 'default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]' '' \
	  '[engine]' 'runtime = "runc"' '' '[network]' 'network_backend = "netavark"' > $(CONTAINERS_CONF); } \
	  || { echo "podman needs $(CONTAINERS_CONF) (see localkafka/engine.py)"; exit 1; }

# the images docker-compose.yml names, made from Debian's packages and Maven Central into
# .cache/images and podman's storage (localkafka/engine.py)
images: setup podman prometheus
	$(PY) -m localkafka images

# `kafka-quota-proxy top` is driven as a person would, in a tmux pane: Debian's package
tmux:
	@command -v tmux >/dev/null || { $(call apt_install,tmux,tmux); }

# the Helm chart (deploy/helm) is linted and rendered by Helm itself, built from the Go module
# proxy (helm.sh/helm/v3) into .cache/helm when missing, as Prometheus is unpacked there
HELM_VERSION := v3.22.0
HELM := .cache/helm/$(HELM_VERSION)/helm
helm:
	@[ -x $(HELM) ] || { command -v go >/dev/null || { echo "Go is required to build Helm for the chart's tests"; exit 1; }; \
	  echo "building Helm $(HELM_VERSION) from the Go module proxy into $(HELM)"; \
	  GOBIN=$(abspath .cache/helm/$(HELM_VERSION)) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); }

# a real client's own workloads (tests/integration/test_client_chains.py, bench.request_time):
# franz-go's kgo integration tests, whose consumer-group and transactional chains run against
# whatever broker KGO_SEEDS names, built from the Go module proxy into .cache/franz-go (the
# module is read-only in Go's cache, so it is built from a copy)
FRANZ_GO_VERSION := v1.22.3
KGO_TEST := .cache/franz-go/$(FRANZ_GO_VERSION)/kgo.test
franz-go:
	@[ -x $(KGO_TEST) ] || { command -v go >/dev/null || { echo "Go is required to build franz-go's tests for the client chains"; exit 1; }; \
	  echo "building franz-go $(FRANZ_GO_VERSION)'s kgo tests from the Go module proxy into $(KGO_TEST)"; \
	  module=$$(go mod download -json github.com/twmb/franz-go@$(FRANZ_GO_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') \
	  && [ -n "$$module" ] && copy=$$(mktemp -d) && cp -R "$$module/." "$$copy" && chmod -R u+w "$$copy" \
	  && (cd "$$copy/pkg/kgo" && go test -c -o $(abspath $(KGO_TEST)) .); status=$$?; rm -rf "$${copy:-/nonexistent}"; exit $$status; }

test: lint chromium haproxy prometheus docker-compose helm tmux franz-go images
	$(PY) -m pytest

bench: setup
	$(PY) -m bench.quota_decision
	$(PY) -m bench.latency
	$(PY) -m bench.mutation_burst
	$(PY) -m bench.producer_ids
	$(PY) -m bench.throughput
	$(PY) -m bench.usage_report
	$(PY) -m bench.hostile
	$(PY) -m bench.request_time

clean:
	rm -rf $(VENV) .cache
