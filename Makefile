# make lab   boot the lab host(s), build the parser venv (the deep check) and deploy the stack into them (root)
# make check lint + unit tests + the deep check (SGLang's and smg's own startup checks), no lab, a few minutes
# make test  lint + the whole test suite: unit, component, lab, verify, molecule (root)
# make help  every target

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# ansible-playbook, molecule (which needs ansible-config on PATH) and friends come from the venv.
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

# Every directory under tests/ holding test_*.py files, at any depth, less those inside another (pytest collects
# them with it): tests/unit, tests/component/*, tests/lab/*. The verify suite, verify/, is not under tests/: it runs
# against a deployed inventory (make verify). Override to narrow: make test TEST_DIRS=tests/unit
test_dirs := $(sort $(patsubst %/,%,$(dir $(shell find tests -name 'test_*.py'))))
TEST_DIRS ?= $(strip $(foreach d,$(test_dirs),$(if $(filter $(addsuffix /%,$(test_dirs)),$(d)),,$(d))))
PYTEST_ARGS ?=
FAULT_DIRS := $(filter tests/lab/faults,$(TEST_DIRS))
ROLLOUT_DIRS := $(filter tests/lab/stack,$(TEST_DIRS))
SHELL_SCRIPTS ?= .ci/run collections/ansible_collections/sglang/dsv4/roles/sglang_lab/files/sglang-lab-machine collections/ansible_collections/sglang/dsv4/roles/sglang_common/files/wheelhouse.sh

# Controller packages: systemd-nspawn, debootstrap, socat (ssh ProxyCommand), shellcheck (lint),
# prometheus (promtool: the alert rules tests), haproxy, keepalived and prometheus-alertmanager (amtool): the
# render play's checks of every rendered file (plugins/plugin_utils/sglang_filecheck.py) and tests/component/frontend,
# plus tools a minimal Debian may lack.
APT_PACKAGES := systemd systemd-container debootstrap socat shellcheck openssh-client iproute2 util-linux procps haproxy \
	keepalived \
	prometheus prometheus-alertmanager
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# Lab facts shown by `make lab-info`; they follow roles/sglang_lab/defaults/main.yml and the
# lab inventory (inventories/lab).
# LAB=multinode boots inventories/multinode-lab instead: 2 prefill, 2 decode, 2 router and 1 front host on one bridge;
# LAB=lab2 or LAB=lab3 one of the further single-host labs (inventories/lab2, lab3), where make test injects its faults;
LAB ?=
FURTHER_LAB := $(filter lab2 lab3,$(LAB))
LAB_DIR := $(if $(filter multinode,$(LAB)),multinode-lab,$(or $(FURTHER_LAB),lab))
LAB_INVENTORY := inventories/$(LAB_DIR)/hosts.yml
LAB_HOST ?= $(if $(filter multinode,$(LAB)),mlab-r1,$(or $(FURTHER_LAB),lab1))
LAB_STATE_DIR ?= /var/lib/sglang-lab
LAB_ROUTER_PORT ?= 8000
LAB_SSH := ssh -F $(LAB_STATE_DIR)/ssh_config

# pip installs the controller's venvs without compiling their modules to bytecode: Python compiles and caches
# each one the first time it is imported (the venvs belong to the user who runs them), so only the modules a command
# uses are ever compiled. Two fifths less time for make venvs (torch alone: 30 s to 9 s on 2 cores).
# Not so .venv: every ansible-playbook run imports ansible, Jinja, PyYAML, cryptography and the dashboard SDK, and
# where PYTHONDONTWRITEBYTECODE is set (or the venv is read-only) Python would compile them again on every run
# (0.6 s of CPU per run). make venv compiles it once (6 s on 2 cores).
PIP_INSTALL := pip install -q --no-compile

# SGLang 0.5.23's own code on CPU for the contract and conformance tests: CPU torch, sglang without its
# dependencies, the small set its server_args module imports, and requirements/sglang-cpu.txt (what its
# resolution pipeline and pool configurators import).
PARSER_VENV ?= .cache/sglang-parser-venv
# AIConfigurator 0.12.0 (estimator + op-level data measured on H200) for the performance model, in a venv of its own:
# requirements/aiconfigurator.txt says why this package and not aisimulate 0.13.0.
PERF_VENV ?= .cache/aiconfigurator-venv
PARSER_PACKAGES := numpy orjson psutil pybase64 requests urllib3 idna certifi packaging pillow starlette anyio \
	msgspec pydantic-core pyzmq tqdm ipython traitlets pygments pydantic typing-inspection aiohttp multidict \
	attrs yarl propcache aiohappyeyeballs aiosignal frozenlist

.PHONY: help venv venvs apt parser-venv perf-venv flag-tables rules-doc filter-docs sim-steps fixtures mutation mutation-recheck lab lab-up lab-deploy lab-info lab-ssh lab-down check test sanity collection \
	test-rollout test-stress lint verify molecule bench

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

venv: $(VENV)/.installed ## Python venv with the dev tools and this project (editable)

$(VENV)/.installed: requirements/dev.txt requirements/constraints.txt pyproject.toml
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m $(PIP_INSTALL) -r requirements/dev.txt -c requirements/constraints.txt
	$(BIN)/python -m $(PIP_INSTALL) -e . -c requirements/constraints.txt
	$(BIN)/python -m compileall -q -j0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null
	touch $@

venvs: venv parser-venv perf-venv ## Every controller venv an operator needs: .venv, SGLang's parser (the deep check), AIConfigurator (time)

parser-venv: $(PARSER_VENV)/.installed ## SGLang 0.5.23 parser on CPU, for the contract test

# Built atomically: into $(PARSER_VENV).building, renamed into place only once complete, so the deep check never
# runs a half-built venv (it finds either the previous one or none). Only bin/python is used: the scripts' shebangs
# keep the build path.
$(PARSER_VENV)/.installed: requirements/sglang-cpu.txt
	rm -rf $(PARSER_VENV).building
	$(PYTHON) -m venv $(PARSER_VENV).building
	$(PARSER_VENV).building/bin/python -m $(PIP_INSTALL) torch==2.13.0
	$(PARSER_VENV).building/bin/python -m $(PIP_INSTALL) --no-deps sglang==0.5.23 $(PARSER_PACKAGES)
	$(PARSER_VENV).building/bin/python -m $(PIP_INSTALL) -r requirements/sglang-cpu.txt -c requirements/sglang-cpu.txt
	touch $(PARSER_VENV).building/.installed
	rm -rf $(PARSER_VENV).old
	if [ -e $(PARSER_VENV) ]; then mv $(PARSER_VENV) $(PARSER_VENV).old; fi
	mv $(PARSER_VENV).building $(PARSER_VENV)
	rm -rf $(PARSER_VENV).old

# Built in place, `.installed` last: an interrupted build leaves no `.installed`, and the next run starts over from an
# empty directory (the performance model and its tests check `.installed`, never a half-installed venv).
perf-venv: $(PERF_VENV)/.installed ## AIConfigurator 0.12.0 on CPU, for the TTFT/ITL model and its tests

$(PERF_VENV)/.installed: requirements/aiconfigurator.txt
	rm -rf $(PERF_VENV)
	$(PYTHON) -m venv $(PERF_VENV)
	$(PERF_VENV)/bin/python -m $(PIP_INSTALL) -r requirements/aiconfigurator.txt -c requirements/aiconfigurator.txt
	$(PERF_VENV)/bin/python -c 'from aiconfigurator.cli.api import cli_estimate'
	touch $@

flag-tables: venv parser-venv ## Regenerate the SGLang and smg argument tables and SGLang's env registry from their code
	$(PARSER_VENV)/bin/python tests/component/contract/flag_dump.py sglang --write collections/ansible_collections/sglang/dsv4/plugins/module_utils/sglang_argtable.py
	$(PARSER_VENV)/bin/python tests/component/contract/env_dump.py --write collections/ansible_collections/sglang/dsv4/plugins/plugin_utils/sglang_envtable.py
	$(BIN)/python tests/component/contract/flag_dump.py smg --write collections/ansible_collections/sglang/dsv4/plugins/module_utils/smg_argtable.py
	$(BIN)/ruff format -q collections/ansible_collections/sglang/dsv4/plugins/module_utils/sglang_argtable.py collections/ansible_collections/sglang/dsv4/plugins/module_utils/smg_argtable.py \
	  collections/ansible_collections/sglang/dsv4/plugins/plugin_utils/sglang_envtable.py

rules-doc: venv ## Regenerate docs/rules.md from the validation rule tables
	$(BIN)/python bench/rules_doc.py

filter-docs: venv ## Regenerate the filters' documentation (plugins/filter/<name>.yml, what ansible-doc shows)
	$(BIN)/python bench/filter_docs.py

sim-steps: venv perf-venv ## Regenerate the simulator's step table (sim/sglang_sim/step_tables) from AIConfigurator
	$(BIN)/python tests/component/perf/sim_steps.py

fixtures: parser-venv ## Regenerate the audit fixtures with SGLang 0.5.23's own code on CPU
	$(PARSER_VENV)/bin/python tests/unit/audit/fixtures/make_fixtures.py

# Mutation testing (not part of make test): mutmut mutates module_utils/, plugin_utils/, the CLI and the drift exporter
# in a copy (.cache/mutation/mutants, laid out by bench/mutation_tree.py) and runs the unit suites (tests/unit)
# against each mutant. Results are kept there: a run evaluates the mutants not yet evaluated (every mutant the first
# time, hours on two cores; after an edit, the mutants of the changed functions), MUTATE=globs reruns the named
# ones, and mutation-recheck reruns the survivors and untested ones after tests were added. bench/mutation_report.py
# judges the results against bench/mutation_equivalent.yml (survivors no test can tell apart, matched by their diff)
# and writes docs/mutation_summary.md; it fails on a stale entry. docs/mutation.md explains the figures.
MUTATE ?=
MUTATION_JOBS ?= 2
MUTATION_DIR := .cache/mutation

mutation: venv ## Mutation testing of the Python core with the unit suites: kill rate and survivors (MUTATE=globs)
	$(BIN)/python bench/mutation_tree.py
	cd $(MUTATION_DIR) && nice -n 19 $(abspath $(BIN))/mutmut run --max-children $(MUTATION_JOBS) $(MUTATE) > mutmut.log 2>&1 || true
	$(BIN)/python bench/mutation_report.py

mutation-recheck: venv ## Rerun the survivors and untested mutants of the last mutation run (after adding tests)
	$(BIN)/python bench/mutation_report.py --forget-unkilled
	$(MAKE) mutation

apt: ## Debian packages the lab and the lint need (installs only what is missing)
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${db:Status-Abbrev}' "$$pkg" 2>/dev/null | grep -q '^ii' || missing="$$missing $$pkg"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  $(SUDO) apt-get update -qq; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
	  echo "apt: nothing to install"; \
	fi

lab: lab-deploy ## Boot the lab and deploy the stack into it
	@$(MAKE) --no-print-directory lab-info

lab-up: venv apt ## Boot the lab host(s) only (debootstrap once, about a minute; LAB=multinode: seven hosts)
	ansible-playbook -i $(LAB_INVENTORY) playbooks/lab.yml

# The parser venv first: without it the validation would skip the deep check (sglang_validate_deep_check: auto).
lab-deploy: lab-up parser-venv ## Deploy the stack into the lab (ansible-playbook site.yml, with the deep check)
	ansible-playbook -i $(LAB_INVENTORY) site.yml

lab-info: ## Where things are in the lab
	@echo "lab host:      $(LAB_HOST) (systemd-nspawn; network namespace /run/netns/$(LAB_HOST), loopback only)"
	@echo "inventory:     $(LAB_INVENTORY) (inventories/lab is the default in ansible.cfg; LAB=multinode: seven hosts)"
	@echo "ssh in:        make lab-ssh   or   $(LAB_SSH) $(LAB_HOST)"
	@echo "router:        http://127.0.0.1:$(LAB_ROUTER_PORT) inside the netns, e.g."
	@echo "               ip netns exec $(LAB_HOST) curl -s http://127.0.0.1:$(LAB_ROUTER_PORT)/health"
	@echo "audit:         $(BIN)/ansible-playbook audit.yml"
	@echo "verify:        make verify"
	@echo "console log:   /run/sglang-lab/$(LAB_HOST).log"
	@echo "tear down:     make lab-down"

lab-ssh: ## Root shell on the lab host (LAB_HOST=lab1)
	$(LAB_SSH) $(LAB_HOST)

lab-down: venv ## Power off the lab host(s) and delete their network namespaces (LAB=multinode: those five)
	ansible-playbook -i $(LAB_INVENTORY) playbooks/lab_down.yml

# The Python that mypy checks (strict types are the rule there; make mutation counts a mutant mypy refuses as caught).
TYPED := collections/ansible_collections/sglang/dsv4/plugins cli

# The Ansible content is the collection sglang.dsv4 (ansible.cfg: collections_path = collections).
COLLECTION := collections/ansible_collections/sglang/dsv4
# ansible-test sanity over the collection, in venvs it makes per test from the package index. It fetches the script
# that bootstraps pip in them from ci-files.testing.ansible.com; requirements/ansible_test_get_pip.py stands in for it
# in its cache (the interpreter's ensurepip, then pip from the index), so only the index needs to be reachable.
ANSIBLE_TEST_PIP = $(shell $(BIN)/python -c 'import pathlib, re, ansible_test; \
	print(re.search(r"pip=.([0-9.]+).", (pathlib.Path(ansible_test.__file__).parent / "_internal/python_requirements.py").read_text())[1])')
ANSIBLE_TEST_GET_PIP = $(HOME)/.ansible/test/cache/get_pip_$(subst .,_,$(ANSIBLE_TEST_PIP)).py

sanity: venv ## ansible-test sanity of the collection (validate-modules, pylint, import, yamllint and the rest)
	@[ -f $(ANSIBLE_TEST_GET_PIP) ] || install -D -m 0644 requirements/ansible_test_get_pip.py $(ANSIBLE_TEST_GET_PIP)
	cd $(COLLECTION) && $(abspath $(BIN))/ansible-test sanity --local --color no \
	  --python $$($(abspath $(BIN))/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')

collection: venv ## Build the collection artifact (ansible-galaxy collection build) into build/
	ansible-galaxy collection build $(COLLECTION) --output-path build --force

lint: venv ## yamllint, ansible-lint, ruff, mypy, shellcheck, the changelog fragments
	yamllint --strict .
	ansible-lint
	cd $(COLLECTION) && antsibull-changelog lint
	ruff check .
	ruff format --check .
	mypy $(TYPED)
	shellcheck $(SHELL_SCRIPTS)

# The quick target: no lab, no root. The deep check needs the parser venv (`make parser-venv`, once); without it
# its tests fail and say so, since this target exists to run it. Besides tests/unit, the contract tests of the modules
# that need no lab and fit its time: the records' writer run by `ansible`, the router's worker module against smg and
# the simulator in check mode and on a worker already draining (5 s).
CHECK_TESTS ?= tests/unit tests/component/contract/test_deep_check.py tests/component/contract/test_deploy_records.py \
	tests/component/sim/test_rollout.py::test_the_worker_module_in_check_mode_and_on_a_worker_already_draining

# The check's tests in two processes, a file each at a time: once ansible-lint and sanity are done they take both cores
# (3:07 in one process, 2:44 in two, on 2 cores).
CHECK_WORKERS ?= -n 2 --dist loadfile

check: venv ## Lint, sanity, unit tests and the deep check (no lab; needs `make parser-venv` once)
	yamllint --strict .
	cd $(COLLECTION) && antsibull-changelog lint
	ruff check .
	ruff format --check .
	mypy $(TYPED)
	if command -v shellcheck >/dev/null; then shellcheck $(SHELL_SCRIPTS); else echo "check: shellcheck missing (make apt)"; fi
	@mkdir -p .cache
	@# ansible-lint and ansible-test sanity (about a minute each) run beside pytest; their output follows the tests'.
	{ ansible-lint && $(MAKE) --no-print-directory sanity; } > .cache/check-ansible-lint.log 2>&1 & lint=$$!; \
	pytest $(CHECK_WORKERS) $(PYTEST_ARGS) $(CHECK_TESTS) -k 'not rendered'; tests=$$?; \
	wait $$lint; linted=$$?; cat .cache/check-ansible-lint.log; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

# Four passes at once, each mostly waiting on ansible or a lab host: the tests without the lab, which start first,
# beside the lint, sanity and the labs' boot; the fault suite in two shards, each on a single-host lab of its own:
# lab2, which `molecule destroy` takes down and `molecule test --destroy never` boots and converges first (create,
# converge, idempotence, verify, and no destroy: its verify leaves the envelope probes to make verify on lab1, which
# sends the same ones), then the shard and the single-host rollout test; lab3, then the multi-host rollout test;
# both then powered off; lab2's chain fails when molecule or the shard fails, and the wall times name which. In the
# foreground the other lab tests on lab1 (the audit's drift tests too, SGLANG_AUDIT_LAB=shared, not on a scratch
# host of their own). verify runs on lab1 last, once the other passes are done: its probes time the router's
# admission and rejections, which a machine loaded by the other passes (a load of 20 on 2 cores) slows past their
# bounds. The background passes' output follows, also kept in .cache/test-*.log; each pass lists its slowest tests.
# lab1 and lab3 boot one after the other (the first boot builds the labs' shared rootfs, which molecule's create on
# lab2 then finds); lab1 stays up at the end, as after `make lab`.
SHARD_LABS := inventories/lab2/hosts.yml inventories/lab3/hosts.yml
# make test boots lab1 and lab3; molecule boots lab2.
BOOTED_LABS := inventories/lab/hosts.yml inventories/lab3/hosts.yml
DURATIONS := --durations=15 --durations-min=5
# The tests without the lab in two processes (pytest-xdist), a directory each at a time (tests/conftest.py): they
# take both cores once the lab passes wait or are done.
WITHOUT_LAB_WORKERS ?= -n 2 --dist loadscope

test: venv parser-venv perf-venv apt ## Lint, sanity, pytest over TEST_DIRS (boots the labs: root), the rollout tests, verify, molecule test
	@mkdir -p .cache; : > $(WALLS); $(call stamp,start)
	{ pytest -m 'not lab and not rollout' -p no:cacheprovider $(WITHOUT_LAB_WORKERS) $(DURATIONS) $(PYTEST_ARGS) \
	  $(TEST_DIRS) && $(call stamped,without-lab); } > .cache/test-without-lab.log 2>&1 & without=$$!; \
	if ! { $(MAKE) --no-print-directory lint sanity && $(call stamp,lint-sanity) \
	       && { ansible-playbook $(addprefix -i ,$(BOOTED_LABS)) playbooks/lab.yml \
	              > .cache/test-lab-up.log 2>&1 || { cat .cache/test-lab-up.log; false; }; } && $(call stamp,labs-up); }; then \
	  kill $$without 2>/dev/null || true; wait $$without || true; exit 1; \
	fi; \
	{ { $(molecule_on_lab2); } > .cache/test-molecule.log 2>&1 && mol=0 || mol=$$?; \
	  { $(call shard,1,inventories/lab2/hosts.yml,-k 'not multinode') \
	    && ansible-playbook -i inventories/lab2/hosts.yml playbooks/lab_down.yml >/dev/null && $(call stamped,lab2); \
	  } > .cache/test-lab2.log 2>&1 && two=0 || two=$$?; \
	  [ $$two -eq 0 ] && [ $$mol -eq 0 ]; } & lab2=$$!; \
	{ $(call shard,2,inventories/lab3/hosts.yml,-k multinode) \
	  && ansible-playbook -i inventories/lab3/hosts.yml playbooks/lab_down.yml >/dev/null && $(call stamped,lab3); \
	} > .cache/test-lab3.log 2>&1 & lab3=$$!; \
	{ SGLANG_AUDIT_LAB=shared pytest -m 'lab and not rollout and not faults' $(DURATIONS) $(PYTEST_ARGS) $(TEST_DIRS) \
	  && $(call stamped,lab1); } && lab=0 || lab=$$?; \
	wait $$without && rest=0 || rest=$$?; echo "== tests without the lab =="; cat .cache/test-without-lab.log; \
	wait $$lab2 && two=0 || two=$$?; echo "== lab2: molecule test, which boots and converges it =="; \
	cat .cache/test-molecule.log; echo "== lab2: fault suite 1/2, single-host rollout =="; cat .cache/test-lab2.log; \
	wait $$lab3 && three=0 || three=$$?; echo "== lab3: fault suite 2/2, multi-host rollout =="; \
	cat .cache/test-lab3.log; \
	echo "== verify on lab1, the other passes done =="; \
	{ $(MAKE) --no-print-directory verify && $(call stamped,verify); } && verified=0 || verified=$$?; \
	$(call stamp,end); $(BIN)/python tests/pass_walls.py $(WALLS); \
	[ $$lab -eq 0 ] && [ $$rest -eq 0 ] && [ $$two -eq 0 ] && [ $$three -eq 0 ] && [ $$verified -eq 0 ]

# Each pass's wall time, printed at the end of make test (tests/pass_walls.py): $(call stamp,NAME) notes when NAME
# happened; `COMMAND && $(call stamped,NAME)` notes when the pass NAME ended and with which exit status, and keeps
# that status.
WALLS := .cache/test-walls.txt
stamp = echo "$(1) $$(date +%s) 0" >> $(WALLS)
stamped = rc=0 || rc=$$?; echo "$(1) $$(date +%s) $$rc" >> $(WALLS); (exit $$rc)
# molecule on lab2 (the labs' shared rootfs is built by then), its verify without the envelope probes; it leaves
# lab2 converged for the fault shard, which powers it off at the end. --destroy never skips molecule's first destroy
# too, so `molecule destroy` takes down a lab2 an earlier run left up: molecule always deploys a fresh host. Only
# molecule's own destroy will do: molecule keeps in its state that it created the host, and skips its create while
# that says so, even when lab_down.yml (the shard's end, make lab-down) powered the host off since.
molecule_on_lab2 = SGLANG_LAB_INVENTORY=inventories/lab2/hosts.yml molecule destroy \
	&& SGLANG_LAB_INVENTORY=inventories/lab2/hosts.yml PYTEST_ADDOPTS=--no-probes \
	$(MAKE) --no-print-directory molecule MOLECULE_ARGS='--destroy never' && $(call stamped,molecule)

# The fault and rollout suites with the machine loaded on purpose (STRESS_HOGS busy loops at the lowest priority
# besides): a race that only shows under the load make test puts on the machine shows here too. Uses lab2 and lab3
# (booted if needed) like make test, and leaves them down. The controller is killed after every phase of a deploy
# here (SGLANG_FAULT_EVERY_PHASE), after three of the five in make test.
STRESS_HOGS ?= 2
test-stress: export SGLANG_FAULT_EVERY_PHASE = 1
test-stress: venv parser-venv apt ## The fault and rollout suites beside CPU hogs (root; about as long as make test)
	@mkdir -p .cache; : > $(WALLS); $(call stamp,start)
	hogs=""; for i in $$(seq $(STRESS_HOGS)); do nice -n 19 sh -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null || true' EXIT; \
	ansible-playbook $(addprefix -i ,$(SHARD_LABS)) playbooks/lab.yml > .cache/test-lab-up.log 2>&1 \
	  || { cat .cache/test-lab-up.log; exit 1; }; $(call stamp,labs-up); \
	{ $(call shard,1,inventories/lab2/hosts.yml,-k 'not multinode') \
	  && ansible-playbook -i inventories/lab2/hosts.yml playbooks/lab_down.yml >/dev/null && $(call stamped,lab2); \
	} > .cache/test-stress-lab2.log 2>&1 & lab2=$$!; \
	{ $(call shard,2,inventories/lab3/hosts.yml,-k multinode) \
	  && ansible-playbook -i inventories/lab3/hosts.yml playbooks/lab_down.yml >/dev/null && $(call stamped,lab3); \
	} > .cache/test-stress-lab3.log 2>&1 & lab3=$$!; \
	wait $$lab2 && two=0 || two=$$?; echo "== lab2: fault suite 1/2, single-host rollout =="; cat .cache/test-stress-lab2.log; \
	wait $$lab3 && three=0 || three=$$?; echo "== lab3: fault suite 2/2, multi-host rollout =="; \
	cat .cache/test-stress-lab3.log; $(call stamp,end); $(BIN)/python tests/pass_walls.py $(WALLS); \
	[ $$two -eq 0 ] && [ $$three -eq 0 ]

# $(call shard,I,INVENTORY,-k ...): fault shard I/2 on the lab INVENTORY, then the rollout tests the -k expression
# selects there. A narrowed run (TEST_DIRS, PYTEST_ARGS) may leave either with no test: pytest's exit 5 passes.
# FAULT_SHARES deals the fault cases in turn (ten in make test, twelve in make test-stress): shard 1 is followed by
# the single-host rollout, shard 2 by the multi-host one (one site.yml run under load each, after their set-up).
FAULT_SHARES ?= 1,1
shard = { $(if $(FAULT_DIRS),SGLANG_FAULT_SHARD=$(1)/2 SGLANG_FAULT_SHARES=$(FAULT_SHARES) SGLANG_LAB_INVENTORY=$(2) pytest -m 'faults and not rollout' \
	  -p no:cacheprovider $(DURATIONS) $(PYTEST_ARGS) $(FAULT_DIRS); $(none_is_fine),true) \
	&& $(if $(ROLLOUT_DIRS),SGLANG_LAB_INVENTORY=$(2) pytest -m rollout -p no:cacheprovider $(DURATIONS) $(PYTEST_ARGS) \
	  $(ROLLOUT_DIRS) $(3); $(none_is_fine),true); }
none_is_fine = rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

test-rollout: venv ## Limit changes under load on the lab (tests marked rollout, a few minutes; root)
	pytest -m rollout $(PYTEST_ARGS) tests/lab

verify: venv ## The verify suite against the deployed lab
	pytest verify --hosts=ansible://all --ansible-inventory=inventories/lab/hosts.yml $(PYTEST_ARGS)

# SGLang's own bench_serving against the inventory's router, each figure beside the time model's prediction; a router
# that is not a lab host only with BENCH_ARGS=--production-load-ok. docs/bench.md.
INVENTORY ?= inventories/lab/hosts.yml
BENCH_ARGS ?=
bench: venv parser-venv perf-venv ## bench_serving against INVENTORY's router (lab), measured beside predicted (BENCH_ARGS)
	$(BIN)/sglang-envelope bench --inventory $(INVENTORY) $(BENCH_ARGS)

# SGLANG_LAB_INVENTORY=inventories/lab3/hosts.yml runs the scenario on another single-host lab (make test does).
MOLECULE_ARGS ?=
molecule: venv apt ## molecule test: destroy, create, converge, idempotence, verify, destroy (takes the lab down)
	molecule test $(MOLECULE_ARGS)
