# Two commands for a fresh clone: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Debian packages the test suite needs; installed by `make test` when missing.
APT_PACKAGES ?= openssh-server openssh-client sudo nftables chromium prometheus prometheus-node-exporter \
                slurm-wlm munge

.PHONY: install demo demo-nvl72 test test-fast fuzz lint apt-packages bytecode clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[nodes,dev]'
	touch $(STAMP)

install: $(STAMP)

apt-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

demo: install
	$(BIN)/provision validate examples/*.yaml
	$(BIN)/provision plan examples/sim-cluster.yaml
	$(BIN)/provision apply examples/sim-cluster.yaml || [ $$? -eq 1 ]  # 1: nodes quarantined, a normal outcome
	$(BIN)/provision status examples/sim-cluster.yaml
	$(BIN)/provision topology flaps examples/sim-cluster.yaml || [ $$? -eq 1 ]  # 1: a suspect cable, as injected
	$(BIN)/provision report examples/sim-cluster.yaml

# The GB200 NVL72 example (two racks, 36 Grace trays) on the simulator, with a fault of each kind a rack's burn-in
# must catch (examples/sim-nvl72.yaml, held to examples/gb200-nvl72.yaml by tests/spec/test_sim_nvl72.py).
demo-nvl72: install
	$(BIN)/provision validate examples/gb200-nvl72.yaml examples/sim-nvl72.yaml
	$(BIN)/provision apply examples/sim-nvl72.yaml || [ $$? -eq 1 ]  # 1: trays quarantined, as injected
	$(BIN)/provision status examples/sim-nvl72.yaml
	$(BIN)/provision topology slurm --admitted examples/sim-nvl72.yaml
	$(BIN)/provision report examples/sim-nvl72.yaml

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	cd playbooks && ../$(BIN)/ansible-lint --offline --profile production site.yml

# The project's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (CI images set it) every process the
# suite starts — each CLI, stand-in, agent and worker — would otherwise compile what it imports, every time.
bytecode: install
	$(BIN)/python -m compileall -q provision topology fabric_tests

# The suite on three pytest-xdist workers over the two cores: a third of a serial run is a cluster waiting (a
# reboot, a timeout, a daemon's answer), which another worker's cluster fills. Two workers left the cores a fifth
# idle (process accounting over one run: 1,661 CPU-s in 1,020 s); three ran the same suite in 854 s. Whole
# modules, longest first (tests/conftest.py's scheduler); `$(BIN)/pytest` alone runs the same suite serially.
test: install apt-packages lint bytecode
	$(BIN)/pytest -n 3 --dist loadscope

# Every test that starts no cluster, daemon, browser or process (tests/conftest.py marks the others slow): parsers,
# judgements, replayed launches, the fabric model, the spec, the layering (< 30 s). They are pure and single-threaded,
# so two workers (pytest-xdist) halve them; the full suite is not spread (its clusters already use every core).
# The spec fuzzers run 25 cases here (600 in make test, 10,000 and more in make fuzz): a smoke test of the fuzzing.
test-fast: install bytecode
	PROVISION_FUZZ_EXAMPLES=25 PROVISION_FUZZ_CASES=25 $(BIN)/pytest -m "not slow" -q -n 2

# The long run of the spec fuzzers: 10,000 mutated files through validate, 20,000 hypothesis mutants.
fuzz: install
	PROVISION_FUZZ_CASES=10000 PROVISION_FUZZ_EXAMPLES=20000 $(BIN)/pytest -q tests/spec/test_mutations.py tests/spec/test_fuzz.py

clean:
	rm -rf $(VENV) examples/.provision .pytest_cache .hypothesis
