# Headstart: the gateway and the engine share one image; compose picks the command.
# Installs exactly as `make install` does on a developer machine.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false \
    PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN apt-get update && apt-get install -y --no-install-recommends make curl g++ \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml Makefile README.md ./
COPY openai_api openai_api
COPY cpu_kernels cpu_kernels
COPY engine engine
COPY gateway gateway
COPY cache cache
COPY prompts prompts
COPY bench bench
# `headstart bench --soak` starts servers with the tests' process helpers
COPY tests/__init__.py tests/
COPY tests/support tests/support
COPY deploy deploy
RUN make install
ENV PATH=/app/.venv/bin:$PATH
EXPOSE 8000 8001
CMD ["headstart", "serve", "--host", "0.0.0.0", "--port", "8000"]
