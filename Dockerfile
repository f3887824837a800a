# xtag prediction service: serves one bundle mounted read-only at /bundle.
#   docker build -t xtag .
#   docker run -p 8000:8000 -v "$PWD/bundles/debtags-xl:/bundle:ro" xtag
# Reload after replacing the bundle's files: `docker kill -s HUP <container>` (or, with XTAG_ADMIN_KEY set,
# POST /v1/admin/reload with X-Admin-Key and Content-Type: application/json).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --system --uid 10001 --create-home --home-dir /home/xtag xtag
WORKDIR /app

# Dependencies first (cached while only the code changes), then the code. XTAG_EXTRAS adds optional extras by
# name: `--build-arg XTAG_EXTRAS=ray` builds the image that deploy/k8s/raycluster.yaml runs (Ray on every node).
ARG XTAG_EXTRAS=""
COPY pyproject.toml setup.py README.md* ./
RUN XTAG_EXTRAS="$XTAG_EXTRAS" python -c "import os, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
extras = [e for e in os.environ['XTAG_EXTRAS'].split(',') if e]; \
print('\n'.join(p['dependencies'] + [r for e in extras for r in p['optional-dependencies'][e]]))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
# The code: the whole build context (.dockerignore leaves out data, tests, bench), installed from a scratch copy.
# setup.py picks the package roots (pyproject.toml's [tool.xtag] package-roots), so no list of them is kept here.
COPY . /tmp/src
RUN pip install --no-deps /tmp/src && rm -rf /tmp/src

# The Numba kernels, compiled at build time (`xtag warm`) into a cache folder the runtime user owns: the package
# folder is not writable by it, and a cache in its home would be lost with each container, so every start
# compiled them again (seconds before /ready). numba keys the cache by CPU: on a host whose CPU differs from
# the build machine's, the first start compiles once more and caches it in the container.
ENV NUMBA_CACHE_DIR=/var/cache/xtag/numba
RUN mkdir -p "$NUMBA_CACHE_DIR" && chown -R xtag /var/cache/xtag
USER xtag
RUN xtag warm --serve-only

ENV XTAG_BUNDLE=/bundle \
    XTAG_HOST=0.0.0.0 \
    XTAG_PORT=8000 \
    XTAG_WORKERS=1
VOLUME ["/bundle"]
EXPOSE 8000

# /ready: 200 only once the bundle is loaded and a warm-up prediction succeeded.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=2).status != 200)"]

CMD ["xtag", "serve"]
