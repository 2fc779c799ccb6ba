"""The project's tooling, importable from the repository root (`python -m hack.localcluster ...`).

hack/localcluster/ runs before the project's virtualenv exists, so it is standard library only; the scripts
beside it that need the virtualenv (sample.py, dashboard.py) say so.
"""
