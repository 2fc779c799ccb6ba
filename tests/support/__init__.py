"""The harness every cluster tier (integration, node, security, scale, chaos) and bench/ share: the cluster
(local or KUBECONFIG's), the chart's release and identities, the operator and broker processes, namespaces,
the sample manifests and the waits on them. The pytest fixtures are in fixtures.py (tests/conftest.py loads
it); everything else is plain modules, importable from bench/ as well."""
